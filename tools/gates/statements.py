"""Statements of the gate interpreter: a helper's body run path by path. Each path state maps local
names to values; a test the scan cannot decide runs both branches, and what each returns is tagged
with what chose it. Paths are capped (MAX_STATES) by merging states name by name.

`Statements` is a mixin of `interp.Interpreter` (it uses `self.fx`, `self.project`, `ev`,
`bind_target`, `binding_value`, `binop`, `where`, `_in_tree`).
"""

from __future__ import annotations

import ast

from .effects import Budget, Frame
from .labels import text
from .values import ClassRef, FuncRef, join, refine_none, refine_truth, tag, truth_of, uncertainty, unknown

MAX_STEPS = 300
MAX_STATES = 8


class Statements:
    """Running statement lists over path states."""

    def exec_block(self, stmts: list, states: list, frame: Frame) -> tuple[list, list]:
        """Run `stmts` from each of the path `states` (local name -> value): the values returned on
        the way and the states still live after the last statement. Raises Budget past MAX_STEPS
        statements in one frame."""
        returns: list = []
        for stmt in stmts:
            if not states:
                break
            frame.steps += 1
            if frame.steps > MAX_STEPS:
                raise Budget()
            next_states: list = []
            for state in states:
                r, live = self.exec_stmt(stmt, state, frame)
                returns.extend(r)
                next_states.extend(live)
            states = _merge_states(next_states)
        return returns, states

    def exec_stmt(self, stmt: ast.stmt, state: dict, frame: Frame) -> tuple[list, list]:
        frame.locals = state
        if isinstance(stmt, ast.Return):
            return [self.ev(stmt.value, frame) if stmt.value is not None else None], []
        if isinstance(stmt, ast.Raise):
            return [], []
        if isinstance(stmt, ast.Assign):
            value = self.ev(stmt.value, frame)
            for target in stmt.targets:
                self.bind_target(target, value, state)
            return [], [state]
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.bind_target(stmt.target, self.ev(stmt.value, frame), state)
            return [], [state]
        if isinstance(stmt, ast.AugAssign):
            if isinstance(stmt.target, ast.Name):
                current = state.get(stmt.target.id, unknown(stmt.target.id, why="not bound before it is updated"))
                state[stmt.target.id] = self.binop(stmt.op, current, self.ev(stmt.value, frame), text(stmt))
            return [], [state]
        if isinstance(stmt, ast.If):
            return self.exec_if(stmt.test, stmt.body, stmt.orelse, state, frame)
        if isinstance(stmt, ast.Assert):
            truth = truth_of(self.ev(stmt.test, frame))
            if truth is False:
                return [], []
            return [], [state]
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                local = alias.asname or alias.name.split(".")[0]
                state[local] = self.binding_value(stmt, local, Frame(module=frame.module, mode="global"))
            return [], [state]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            state[stmt.name] = FuncRef(frame.module, stmt.name, stmt, id(stmt))
            return [], [state]
        if isinstance(stmt, ast.ClassDef):
            state[stmt.name] = ClassRef(frame.module, stmt.name, stmt, id(stmt))
            return [], [state]
        if isinstance(stmt, ast.Try):
            return self.exec_try(stmt, state, frame)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    self.bind_target(item.optional_vars, unknown(text(item.context_expr), why="a with-statement's value"), state)
            return self.exec_block(stmt.body, [state], frame)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            return self.exec_for(stmt, state, frame)
        if isinstance(stmt, ast.While):
            returns, live = self.exec_block(stmt.body, [dict(state)], frame)
            return returns, live + [state]
        if isinstance(stmt, (ast.Break, ast.Continue)):
            return [], [state]
        if isinstance(stmt, ast.Match):
            returns: list = []
            live: list = [state]
            for case in stmt.cases:
                r, l = self.exec_block(case.body, [dict(state)], frame)
                returns.extend(r)
                live.extend(l)
            return returns, live
        return [], [state]

    def exec_if(self, test: ast.AST, body: list, orelse: list, state: dict, frame: Frame) -> tuple[list, list]:
        value = self.ev(test, frame)
        truth = truth_of(value)
        returns: list = []
        live: list = []
        labels, arch = uncertainty(value) if truth is None else (frozenset(), False)
        if truth is None and not labels:
            labels = frozenset([text(test)])
        for taken, block in ((True, body), (False, orelse)):
            if truth is not None and truth is not taken:
                continue
            branch = dict(state)
            if truth is None:
                self.refine(test, taken, branch)
            r, l = self.exec_block(block, [branch], frame)
            returns.extend(tag(v, labels, arch) if truth is None else v for v in r)
            live.extend(l)
        return returns, live

    def refine(self, test: ast.AST, truth: bool, state: dict) -> None:
        if isinstance(test, ast.Name) and test.id in state:
            state[test.id] = refine_truth(state[test.id], truth)
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.refine(test.operand, not truth, state)
        elif (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.left, ast.Name)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
            and test.left.id in state
        ):
            is_none = truth if isinstance(test.ops[0], ast.Is) else not truth
            state[test.left.id] = refine_none(state[test.left.id], is_none)
        elif isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And) and truth or isinstance(test.op, ast.Or) and not truth:
                for operand in test.values:
                    self.refine(operand, truth, state)

    def exec_try(self, stmt: ast.Try, state: dict, frame: Frame) -> tuple[list, list]:
        external = [m for m in try_imports(stmt) if not self._in_tree(m) and m.split(".")[0] not in self.project.files]
        before = dict(state)
        returns, live = self.exec_block(stmt.body, [state], frame)
        if live and stmt.orelse:
            r, live = self.exec_block(stmt.orelse, live, frame)
            returns.extend(r)
        may_fail = bool(external) or any(
            isinstance(sub, ast.Raise) for body_stmt in stmt.body for sub in ast.walk(body_stmt)
        )
        if not may_fail:
            # A call the scan cannot see into may raise: the handlers stay possible then.
            may_fail = any(isinstance(sub, ast.Call) for body_stmt in stmt.body for sub in ast.walk(body_stmt))
        if may_fail:
            for module_name in external:
                self.fx.probes.add(module_name)
            why = frozenset(f"{m} importable" for m in external) or frozenset([f"no exception in try at {self.where(frame.module, stmt)}"])
            for handler in stmt.handlers:
                if handler.name:
                    before = dict(before)
                    before[handler.name] = unknown(handler.name, why="the exception caught")
                r, l = self.exec_block(handler.body, [dict(before)], frame)
                returns.extend(tag(v, why) for v in r)
                live.extend(l)
            returns = [tag(v, why) for v in returns] if external else returns
        if stmt.finalbody and live:
            r, live = self.exec_block(stmt.finalbody, live, frame)
            returns.extend(r)
        return returns, live

    def exec_for(self, stmt, state: dict, frame: Frame) -> tuple[list, list]:
        iterable = self.ev(stmt.iter, frame)
        if isinstance(iterable, tuple) and len(iterable) == 2 and iterable[0] == "__generator__":
            iterable = iterable[1]
        if isinstance(iterable, dict):
            iterable = tuple(iterable)
        returns: list = []
        if isinstance(iterable, (tuple, str)) and len(iterable) <= 16:
            states = [state]
            for element in iterable:
                next_states = []
                for s in states:
                    s = dict(s)
                    self.bind_target(stmt.target, element, s)
                    r, l = self.exec_block(stmt.body, [s], frame)
                    returns.extend(r)
                    next_states.extend(l)
                states = _merge_states(next_states)
                if not states:
                    break
            if stmt.orelse and states:
                r, states = self.exec_block(stmt.orelse, states, frame)
                returns.extend(r)
            return returns, states
        body_state = dict(state)
        self.bind_target(stmt.target, unknown(text(stmt.target), why="a loop variable over values not known"), body_state)
        r, l = self.exec_block(stmt.body, [body_state], frame)
        returns.extend(r)
        return returns, l + [state]


def _merge_states(states: list) -> list:
    if len(states) <= MAX_STATES:
        return states
    keys = set()
    for s in states:
        keys |= set(s)
    merged = {}
    for key in keys:
        merged[key] = join([s.get(key, unknown(key, why="not bound on every path")) for s in states])
    return [merged]


def try_imports(node: ast.Try) -> list:
    """Absolute modules the body of a try statement imports directly (an import probe)."""
    modules = []
    for stmt in node.body:
        if isinstance(stmt, ast.Import):
            modules.extend(alias.name for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            modules.append(stmt.module)
    return modules
