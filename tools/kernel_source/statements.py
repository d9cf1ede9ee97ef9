"""Running statements: a launcher body up to the launch, a kernel body up to a loop, a def called on
known arguments, a module's top level.

Branches merge into unknowns: an ``if`` whose condition is not known runs both sides on copies of the
scope, and a name they leave different is an Unknown saying which condition it depends on. A loop
whose iterations are all known is run; any other marks what it assigns as updated in the loop.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from tools.pyeval import operators
from tools.pyeval.syntax import import_bindings
from tools.pyeval.values import Builtin, ModuleRef, Unknown

from .dtypes import TORCH_DTYPES
from .expressions import evaluate, failed, truth
from .scope import Context, Scope, bind_target
from .values import Closure, DType, Tensor, derived, first_unknown, is_known

RANGE_FUNCTIONS = ("range", "triton.language.range", "triton.language.static_range")
_MAX_LOOP_ITERATIONS = 4096
_MODULES = ("triton", "torch", "math")  # the outside modules this evaluator models


@dataclass
class Outcome:
    """How running statements ended: ``kind`` is "normal" | "reached" (the target) | "returned" |
    "unknown" (not static; ``why`` says why) | "break" | "continue"; ``value`` is what was returned
    (for "reached", the innermost scope at the target)."""

    kind: str
    value: Any = None
    why: str = ""


def execute(stmts: list[ast.stmt], scope: Scope, target: ast.AST | None = None, path: set[int] | None = None) -> Outcome:
    """Run statements in order; stop when reaching ``target`` (a node inside them).

    ``path`` holds the ids of ``target``'s ancestors, so compound statements on the way are
    entered rather than run. Conditions that cannot be decided on the way to the target are
    recorded as assumptions.
    """
    for stmt in stmts:
        if target is not None and path is not None and id(stmt) in path:
            outcome = _enter(stmt, scope, target, path)
            if outcome.kind == "reached" and outcome.value is None:
                outcome.value = scope  # the innermost scope at the target
            return outcome
        outcome = _run(stmt, scope)
        if outcome.kind != "normal":
            return outcome
    return Outcome("normal")  # "break"/"continue" are returned above to the enclosing loop


def module_scope(tree: ast.Module, ctx: Context) -> Scope:
    """The module's top-level names: constants, imports, functions (as closures)."""
    scope = Scope(ctx)
    for stmt in tree.body:
        _run(stmt, scope)
    return scope


def range_arguments(call: ast.expr, scope: Scope) -> tuple[Any, Any, Any] | None:
    """(start, stop, step) of ``range``/``tl.range``/``tl.static_range`` calls, else None."""
    if not isinstance(call, ast.Call):
        return None
    callee = evaluate(call.func, scope)
    name = callee.name if isinstance(callee, (ModuleRef, Builtin)) else None
    if name not in RANGE_FUNCTIONS:
        return None
    args = [evaluate(a, scope) for a in call.args[:3]]
    if len(args) == 1:
        return 0, args[0], 1
    if len(args) == 2:
        return args[0], args[1], 1
    if len(args) == 3:
        return args[0], args[1], args[2]
    return None


def first_iteration_value(iterable: ast.expr, scope: Scope) -> Any:
    """The loop variable's value in the first iteration over ``iterable`` (Unknown if not known)."""
    bounds = range_arguments(iterable, scope)
    if bounds is not None:
        start = bounds[0]
        return start if is_known(start) else Unknown(scope.ctx.text(iterable), "loop start unknown")
    value = evaluate(iterable, scope)
    if isinstance(value, (tuple, list)) and value:
        return value[0]
    return Unknown(scope.ctx.text(iterable), "loop values unknown")


def names_in(node: ast.AST) -> list[str]:
    """Free names read in an expression, in order of first appearance (lambda parameters excluded)."""
    bound: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Lambda):
            bound |= {a.arg for a in sub.args.args}
    found = [
        sub for sub in ast.walk(node)
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound
    ]
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    seen: list[str] = []
    for sub in found:
        if sub.id not in seen:
            seen.append(sub.id)
    return seen


# ---------------------------------------------------------------------------------------------
# entering compound statements on the way to a target


def _enter(stmt: ast.stmt, scope: Scope, target: ast.AST, path: set[int]) -> Outcome:
    if stmt is target or not isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef)):
        return Outcome("reached")
    if isinstance(stmt, ast.If):
        return _enter_if(stmt, scope, target, path)
    if isinstance(stmt, (ast.For, ast.While)):
        return _enter_loop(stmt, scope, target, path)
    if isinstance(stmt, ast.With):
        _bind_with(stmt, scope)
        return execute(stmt.body, scope, target, path)
    if isinstance(stmt, ast.Try):
        for block in (stmt.body, stmt.orelse, stmt.finalbody, *[h.body for h in stmt.handlers]):
            if any(id(s) in path for s in block):
                return execute(block, scope, target, path)
        return Outcome("reached")
    # a nested def holding the target: its body runs with the enclosing scope as closure
    inner = Scope(scope.ctx, scope)
    for arg in stmt.args.posonlyargs + stmt.args.args + stmt.args.kwonlyargs:
        inner.values[arg.arg] = Unknown(arg.arg, f"parameter of {stmt.name}")
    return execute(stmt.body, inner, target, path)


def _enter_if(stmt: ast.If, scope: Scope, target: ast.AST, path: set[int]) -> Outcome:
    ctx = scope.ctx
    in_body = any(id(s) in path for s in stmt.body)
    test = truth(stmt.test, scope)
    branch = stmt.body if in_body else stmt.orelse
    if isinstance(test, Unknown):
        ctx.notes.assume(f"line {stmt.lineno}: `{ctx.text(stmt.test)}` taken as {in_body} (the analyzed code is on that side)")
    elif bool(test) != in_body:
        ctx.notes.assume(f"line {stmt.lineno}: at these shapes `{ctx.text(stmt.test)}` is {bool(test)}, so this code does not run; analyzed anyway")
    return execute(branch, scope, target, path)


def _enter_loop(stmt: ast.For | ast.While, scope: Scope, target: ast.AST, path: set[int]) -> Outcome:
    ctx = scope.ctx
    if isinstance(stmt, ast.For):
        first = first_iteration_value(stmt.iter, scope)
        if not isinstance(first, Unknown):
            bind_target(stmt.target, first, scope, stmt.lineno)
            ctx.notes.assume(f"line {stmt.lineno}: analyzed at the first iteration of `for {ctx.text(stmt.target)} in {ctx.text(stmt.iter)}`")
        else:
            bind_target(stmt.target, Unknown(ctx.text(stmt.target), f"loop variable of line {stmt.lineno}"), scope, stmt.lineno)
    for name in _assigned_names(stmt.body):
        if name not in ctx.pinned and name in scope.values:
            scope.values[name] = Unknown(name, f"updated in the loop at line {stmt.lineno}")
    return execute(stmt.body, scope, target, path)


# ---------------------------------------------------------------------------------------------
# running statements


def _run(stmt: ast.stmt, scope: Scope) -> Outcome:
    rule = _STATEMENTS.get(type(stmt))
    return rule(stmt, scope) if rule is not None else Outcome("normal")


def _assign(stmt: ast.Assign, scope: Scope) -> Outcome:
    value = evaluate(stmt.value, scope)
    for target in stmt.targets:
        bind_target(target, value, scope, stmt.lineno)
    return Outcome("normal")


def _ann_assign(stmt: ast.AnnAssign, scope: Scope) -> Outcome:
    if stmt.value is not None:
        bind_target(stmt.target, evaluate(stmt.value, scope), scope, stmt.lineno)
    return Outcome("normal")


def _aug_assign(stmt: ast.AugAssign, scope: Scope) -> Outcome:
    if isinstance(stmt.target, ast.Name):
        name = stmt.target.id
        current = scope.lookup(name)
        value = evaluate(stmt.value, scope)
        missing = first_unknown(current, value)
        if missing is not None:
            result = derived(name, missing)
        else:
            try:
                result = operators.binary(stmt.op, current, value)
            except operators.OPERATION_ERRORS as exc:
                result = failed(name, "cannot compute", exc)
        scope.assign(name, result, stmt.lineno)
    return Outcome("normal")


def _if(stmt: ast.If, scope: Scope) -> Outcome:
    ctx = scope.ctx
    test = truth(stmt.test, scope)
    if not isinstance(test, Unknown):
        return execute(stmt.body if test else stmt.orelse, scope)
    branches = []
    for block in (stmt.body, stmt.orelse):
        branch = scope.fork()
        outcome = execute(block, branch)
        if outcome.kind in ("returned", "unknown", "break", "continue"):
            return Outcome("unknown", why=f"returns under `{ctx.text(stmt.test)}`, which is not known ({test.why})")
        branches.append(branch)
    _merge(scope, branches, ctx.text(stmt.test), stmt.lineno)
    return Outcome("normal")


def _loop(stmt: ast.For | ast.While | ast.AsyncFor, scope: Scope) -> Outcome:
    if not isinstance(stmt, ast.AsyncFor):
        ran = _run_loop(stmt, scope)
        if ran is not None:
            return ran
    for name in _assigned_names(stmt.body + stmt.orelse + ([stmt.target] if isinstance(stmt, ast.For) else [])):
        if name not in scope.ctx.pinned:
            scope.values[name] = Unknown(name, f"updated in the loop at line {stmt.lineno}")
    if any(isinstance(n, ast.Return) for s in stmt.body for n in ast.walk(s)):
        return Outcome("unknown", why=f"may return inside the loop at line {stmt.lineno}")
    return Outcome("normal")


def _run_loop(stmt: ast.For | ast.While, scope: Scope) -> Outcome | None:
    """Run a launcher-side loop whose iterations are all known (a while over known values, a for
    over a known sequence), on a copy of the scope; None when it cannot be run statically."""
    trial = scope.fork()
    if isinstance(stmt, ast.For):
        bounds = range_arguments(stmt.iter, trial)
        if bounds is not None:
            if not all(isinstance(b, int) for b in bounds) or bounds[2] == 0:
                return None
            items = range(*bounds)
        else:
            items = evaluate(stmt.iter, trial)
            if not isinstance(items, (tuple, list)):
                return None
        if len(items) > _MAX_LOOP_ITERATIONS:
            return None
        iterator = iter(items)
    count = 0
    while True:
        if isinstance(stmt, ast.While):
            test = truth(stmt.test, trial)
            if isinstance(test, Unknown):
                return None
            if not test:
                break
        else:
            item = next(iterator, _DONE)
            if item is _DONE:
                break
            bind_target(stmt.target, item, trial, stmt.lineno)
        count += 1
        if count > _MAX_LOOP_ITERATIONS:
            return None
        outcome = execute(stmt.body, trial)
        if outcome.kind == "break":
            break
        if outcome.kind == "unknown":
            return None
        if outcome.kind == "returned":
            scope.values.update(trial.values)
            return outcome
    scope.values.update(trial.values)
    return Outcome("normal")


_DONE = object()


def _return(stmt: ast.Return, scope: Scope) -> Outcome:
    return Outcome("returned", evaluate(stmt.value, scope) if stmt.value is not None else None)


def _def(stmt: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> Outcome:
    scope.assign(stmt.name, Closure(stmt, scope), stmt.lineno)
    return Outcome("normal")


def _bind_with(stmt: ast.With, scope: Scope) -> None:
    for item in stmt.items:
        if item.optional_vars is not None:
            bind_target(item.optional_vars, Unknown(scope.ctx.text(item.optional_vars), "with-statement value"), scope, stmt.lineno)


def _with(stmt: ast.With, scope: Scope) -> Outcome:
    _bind_with(stmt, scope)
    return execute(stmt.body, scope)


def _import(stmt: ast.Import | ast.ImportFrom, scope: Scope) -> Outcome:
    bind_imports(stmt, scope)
    return Outcome("normal")


def _class(stmt: ast.ClassDef, scope: Scope) -> Outcome:
    scope.assign(stmt.name, Unknown(stmt.name, "class"), stmt.lineno)
    return Outcome("normal")


_STATEMENTS = {
    ast.Assign: _assign,
    ast.AnnAssign: _ann_assign,
    ast.AugAssign: _aug_assign,
    ast.If: _if,
    ast.For: _loop,
    ast.While: _loop,
    ast.AsyncFor: _loop,
    ast.Return: _return,
    ast.FunctionDef: _def,
    ast.AsyncFunctionDef: _def,
    ast.With: _with,
    ast.Try: lambda stmt, scope: execute(stmt.body, scope),
    ast.Import: _import,
    ast.ImportFrom: _import,
    ast.Raise: lambda stmt, scope: Outcome("unknown", why=f"raises at line {stmt.lineno}"),
    ast.Break: lambda stmt, scope: Outcome("break"),
    ast.Continue: lambda stmt, scope: Outcome("continue"),
    ast.ClassDef: _class,
}


def bind_imports(stmt: ast.Import | ast.ImportFrom, scope: Scope) -> None:
    """Bind imported names: triton/tl/torch/math as modules, the rest as Unknown with their origin."""
    if isinstance(stmt, ast.Import):
        for (bound, module), alias in zip(import_bindings(stmt), stmt.names):
            if module.split(".")[0] in _MODULES:
                scope.values[bound] = ModuleRef(module)
            else:
                scope.values[bound] = Unknown(bound, f"module {alias.name}")
        return
    origin = "." * stmt.level + (stmt.module or "")
    for alias in stmt.names:
        bound = alias.asname or alias.name
        if stmt.level == 0 and stmt.module and stmt.module.split(".")[0] in _MODULES:
            scope.values[bound] = _imported_from_module(stmt.module, alias.name)
        else:
            scope.values[bound] = Unknown(bound, f"imported from {origin}")


def _imported_from_module(module: str, name: str) -> ModuleRef | DType:
    """What ``from <module> import <name>`` binds, for a module of triton, torch or math."""
    dotted = f"{module}.{name}"
    if dotted in ("triton.language", "triton.language.core"):
        return ModuleRef("triton.language")
    if module in ("triton.language", "triton.language.core"):
        return ModuleRef(f"triton.language.{name}")
    if module == "triton" or module.startswith("triton."):
        return ModuleRef(f"triton.{name}")
    if module == "torch" and name in TORCH_DTYPES:
        return DType(TORCH_DTYPES[name])
    return ModuleRef(dotted)


# ---------------------------------------------------------------------------------------------
# merging branches


def _assigned_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


def _merge(scope: Scope, branches: list[Scope], test_text: str, line: int) -> None:
    """Into ``scope``, each name the branches bound: its value where they agree, else an Unknown."""
    names = set()
    for branch in branches:
        names |= set(branch.values)
    for name in names:
        values = [b.values.get(name, scope.values.get(name, _MISSING)) for b in branches]
        first = values[0]
        if all(_same(v, first) for v in values[1:]) and first is not _MISSING:
            scope.values[name] = first
        else:
            scope.values[name] = Unknown(name, f"differs between the branches of `{test_text}` (line {line})")


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    """Whether two branches left a name with the same value (tensors: the same known dtype)."""
    if a is b:
        return True
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.dtype is not None and a.dtype == b.dtype
    if isinstance(a, (Closure, Scope)) or isinstance(b, (Closure, Scope)):
        return False
    return type(a) is type(b) and _equal(a, b)


def _equal(a: Any, b: Any) -> bool:
    """``a == b``, except that unknowns are equal only with the same reason too (the reason is no
    part of an Unknown's equality, but a branch that knows less is not the same as one that knows more)."""
    if isinstance(a, Unknown) or isinstance(b, Unknown):
        return isinstance(a, Unknown) and isinstance(b, Unknown) and a == b and a.why == b.why
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)
