"""The loops each program of a Triton kernel runs: trip counts, carried values, grid coverage.

A loop *carries* a name when an iteration reads the value the previous iteration wrote (read
before written in the body, and written). A carried name whose update depends on loaded data
(``tl.load``, or a ``@triton.jit`` helper fed by it) is an *accumulator*; one updated only from
itself and loop-invariant values (a pointer stepping ``p += BLOCK * stride``, a counter) is an
*induction*. A loop with accumulators is a serial reduction. Its range is *covered by the grid*
when its bounds depend on ``tl.program_id`` (the grid splits it) or its extent's symbol is one of
the grid's symbols.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from tools.pyeval.operators import OPERATION_ERRORS
from tools.pyeval.syntax import dotted_name
from tools.pyeval.values import Unknown

from .expressions import evaluate
from .locate import is_triton_kernel
from .scope import Context, Scope, triton_function
from .source_text import segment
from .statements import execute, range_arguments

LOAD_FUNCTIONS = {"load", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "dot", "dot_scaled", "load_tensor_descriptor", "gather", "descriptor_load"}


@dataclass
class LoopInfo:
    text: str
    line: int
    var: str | None
    kind: str  # "range" | "tl.range" | "tl.static_range" | "while" | "other"
    depth: int
    start_expr: str | None
    stop_expr: str | None
    step_expr: str | None
    trip_counts: dict[str, int | None] = field(default_factory=dict)  # by config label
    trip_count_notes: list[str] = field(default_factory=list)
    carries: list[str] = field(default_factory=list)
    accumulators: list[str] = field(default_factory=list)
    inductions: list[str] = field(default_factory=list)
    reduction: bool = False
    range_params: list[str] = field(default_factory=list)
    range_symbols: list[str] = field(default_factory=list)
    grid_axes: list[int] = field(default_factory=list)
    runtime_bounds: bool = False
    covered_by_grid: bool = False
    calls: list[str] = field(default_factory=list)
    node: ast.stmt | None = None

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "line": self.line,
            "var": self.var,
            "kind": self.kind,
            "depth": self.depth,
            "start": self.start_expr,
            "stop_expr": self.stop_expr,
            "step_expr": self.step_expr,
            "trip_counts": dict(self.trip_counts),
            "trip_count_notes": list(self.trip_count_notes),
            "carries": list(self.carries),
            "accumulators": list(self.accumulators),
            "inductions": list(self.inductions),
            "reduction": self.reduction,
            "range_params": list(self.range_params),
            "range_symbols": list(self.range_symbols),
            "grid_axes": list(self.grid_axes),
            "runtime_bounds": self.runtime_bounds,
            "covered_by_grid": self.covered_by_grid,
            "calls": list(self.calls),
        }


def _program_axis(call: ast.Call) -> int | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, int):
        return call.args[0].value
    for kw in call.keywords:
        if kw.arg == "axis" and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def kernel_dependencies(fn: ast.FunctionDef, module: Scope, helpers: set[str]) -> dict[str, set]:
    """Flow-insensitive dependencies of each name in the kernel body.

    Tags: ("param", name), ("pid", axis), ("load",) for loaded data, ("call", helper) for
    ``@triton.jit`` helpers of the same source.
    """
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    deps: dict[str, set] = {p: {("param", p)} for p in params}
    assignments: list[tuple[list[str], ast.AST, bool]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            targets = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            assignments.append((targets, node.value, False))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
            assignments.append((targets, node.value, isinstance(node, ast.AugAssign)))
        elif isinstance(node, ast.For):
            targets = [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
            assignments.append((targets, node.iter, False))
        elif isinstance(node, ast.NamedExpr):
            assignments.append(([node.target.id], node.value, False))

    def expr_tags(expr: ast.AST) -> set:
        # Loaded data depends on *where* it was loaded from (a program's row), not on which slice
        # of a range the program owns: tags under a load collapse to ("load",).
        if isinstance(expr, ast.Name) and isinstance(expr.ctx, ast.Load):
            return set(deps.get(expr.id, set()))
        if isinstance(expr, ast.Call):
            fn_name = triton_function(expr.func, module)
            if fn_name == "program_id":
                axis = _program_axis(expr)
                return {("pid", axis if axis is not None else -1)}
            if fn_name in LOAD_FUNCTIONS:
                return {("load",)}
            if isinstance(expr.func, ast.Name) and expr.func.id in helpers:
                inner = {("call", expr.func.id)}
                for child in ast.iter_child_nodes(expr):
                    inner |= expr_tags(child)
                return inner
        tags: set = set()
        for child in ast.iter_child_nodes(expr):
            tags |= expr_tags(child)
        return tags

    changed = True
    while changed:
        changed = False
        for targets, value, _aug in assignments:
            tags = expr_tags(value)
            for target in targets:
                current = deps.setdefault(target, set())
                if not tags <= current:
                    current |= tags
                    changed = True
    return deps


def _reads(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def _stores(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def carried_names(body: list[ast.stmt], loop_var: str | None, decide=None) -> tuple[list[str], dict[str, list[ast.AST]]]:
    """Names read before being (definitely) written in an iteration and written in it; with their updates.

    ``decide(test)`` may return True/False for a condition known statically (a constexpr), so only
    the branch compiled is walked. Otherwise a branch taken under the same condition text as an
    earlier one is assumed to see that earlier branch's writes (``if PAGE == 1: ... else: p = ...``
    followed by ``if PAGE == 1: ... else: use(p)``).
    """
    read_first: list[str] = []
    branch_writes: dict[tuple[str, bool], set[str]] = {}
    written_any: set[str] = set()
    updates: dict[str, list[ast.AST]] = {}

    def block(stmts: list[ast.stmt], written: set[str]) -> set[str]:
        for stmt in stmts:
            written = statement(stmt, written)
        return written

    def note_reads(names: list[str], written: set[str]) -> None:
        for name in names:
            if name not in written and name not in read_first:
                read_first.append(name)

    def statement(stmt: ast.stmt, written: set[str]) -> set[str]:
        if isinstance(stmt, ast.Assign):
            note_reads(_reads(stmt.value), written)
            for target in stmt.targets:
                note_reads(_reads(target), written)  # subscripts/attributes read their base
                for name in _stores(target):
                    updates.setdefault(name, []).append(stmt.value)
                    written_any.add(name)
                    written = written | {name}
            return written
        if isinstance(stmt, ast.AugAssign):
            names = _stores(stmt.target)
            note_reads(names + _reads(stmt.value), written)
            for name in names:
                updates.setdefault(name, []).append(stmt.value)
                written_any.add(name)
            return written | set(names)
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                note_reads(_reads(stmt.value), written)
                names = _stores(stmt.target)
                for name in names:
                    updates.setdefault(name, []).append(stmt.value)
                    written_any.add(name)
                return written | set(names)
            return written
        if isinstance(stmt, ast.If):
            note_reads(_reads(stmt.test), written)
            known = decide(stmt.test) if decide is not None else None
            if known is True:
                return block(stmt.body, written)
            if known is False:
                return block(stmt.orelse, written)
            key = ast.unparse(stmt.test)
            after_body = block(stmt.body, set(written) | branch_writes.get((key, True), set()))
            after_else = block(stmt.orelse, set(written) | branch_writes.get((key, False), set()))
            branch_writes[(key, True)] = branch_writes.get((key, True), set()) | (after_body - written)
            branch_writes[(key, False)] = branch_writes.get((key, False), set()) | (after_else - written)
            return after_body & after_else
        if isinstance(stmt, (ast.For, ast.While)):
            note_reads(_reads(stmt.iter if isinstance(stmt, ast.For) else stmt.test), written)
            inner = set(written)
            if isinstance(stmt, ast.For):
                inner |= set(_stores(stmt.target))
                written_any.update(_stores(stmt.target))
            block(stmt.body, inner)
            return written
        if isinstance(stmt, ast.With):
            return block(stmt.body, written)
        note_reads(_reads(stmt), written)
        return written

    block(body, set())
    carried = [n for n in read_first if n in written_any and n != loop_var]
    return carried, updates


def _loop_kind(node: ast.stmt, module: Scope) -> tuple[str, ast.Call | None]:
    if isinstance(node, ast.While):
        return "while", None
    it = node.iter
    if isinstance(it, ast.Call):
        name = dotted_name(it.func)
        if name == "range":
            return "range", it
        tl_name = triton_function(it.func, module)
        if tl_name in ("range", "static_range"):
            return f"tl.{tl_name}", it
    return "other", None


def find_loops(fn: ast.FunctionDef) -> list[tuple[ast.stmt, int, list[ast.AST]]]:
    """(loop, depth, ancestors) for every for/while loop in the kernel body, in source order."""
    out: list[tuple[ast.stmt, int, list[ast.AST]]] = []

    def visit(node: ast.AST, ancestors: list[ast.AST], depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, (ast.For, ast.While)):
                out.append((child, depth, ancestors + [node]))
                visit(child, ancestors + [node], depth + 1)
            else:
                visit(child, ancestors + [node], depth)

    visit(fn, [], 0)
    out.sort(key=lambda item: item[0].lineno)
    return out


def _header_text(node: ast.stmt, source: str) -> str:
    if isinstance(node, ast.For):
        return f"for {segment(source, node.target)} in {segment(source, node.iter)}"
    return f"while {segment(source, node.test)}"


def trip_count(start: Any, stop: Any, step: Any) -> int | None:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step)) or step == 0:
        return None
    if step > 0:
        return max(0, -(-(stop - start) // step))
    return max(0, -(-(start - stop) // -step))


def analyze_loops(
    fn: ast.FunctionDef,
    source: str,
    module: Scope,
    kernel_values: dict[str, dict[str, Any]],
    ctx_factory,
    launcher_names_of: dict[str, list[str]],
    grid_symbols: list[str],
    helpers: set[str],
) -> list[LoopInfo]:
    """Every loop of ``fn`` with trip counts per config.

    ``kernel_values`` maps a config label to the kernel's argument values under it;
    ``ctx_factory(label)`` gives the evaluation Context for that config (pinned shapes, grid);
    ``launcher_names_of`` maps a kernel parameter to the launcher names its argument reads.
    """
    deps = kernel_dependencies(fn, module, helpers)
    decide = _constexpr_decider(fn, module, kernel_values, ctx_factory)
    loops = []
    for node, depth, ancestors in find_loops(fn):
        kind, call = _loop_kind(node, module)
        start_node, stop_node, step_node = _range_nodes(call)
        text_of = lambda n: segment(source, n) if n is not None else None  # noqa: E731
        info = LoopInfo(
            text=_header_text(node, source),
            line=node.lineno,
            var=node.target.id if isinstance(node, ast.For) and isinstance(node.target, ast.Name) else None,
            kind=kind,
            depth=depth,
            start_expr=text_of(start_node) if start_node is not None else ("0" if stop_node is not None else None),
            stop_expr=text_of(stop_node),
            step_expr=text_of(step_node) if step_node is not None else ("1" if stop_node is not None else None),
            node=node,
        )
        _read_extent(info, _bound_tags(node, (start_node, stop_node), deps, module), launcher_names_of, grid_symbols)
        _read_carried(info, node, deps, module, helpers, decide)
        _count_trips(info, fn, node, ancestors, call, module, kernel_values, ctx_factory)
        loops.append(info)
    return loops


def _range_nodes(call: ast.Call | None) -> tuple[ast.expr | None, ast.expr | None, ast.expr | None]:
    """(start, stop, step) argument nodes of a range call, None for those not written."""
    range_args: list[ast.expr] = list(call.args[:3]) if call is not None else []
    if len(range_args) == 1:
        return None, range_args[0], None
    if len(range_args) >= 2:
        return range_args[0], range_args[1], range_args[2] if len(range_args) > 2 else None
    return None, None, None


def _bound_tags(node: ast.stmt, bounds: tuple, deps: dict[str, set], module: Scope) -> set:
    """What the loop's extent depends on (start and stop; the step is a tile size; a while's test)."""
    tags: set = set()
    for bound in bounds:
        if bound is None:
            continue
        for name in _reads(bound):
            tags |= deps.get(name, set())
        for sub in ast.walk(bound):
            if isinstance(sub, ast.Call):
                tl_name = triton_function(sub.func, module)
                if tl_name == "program_id":
                    tags.add(("pid", _program_axis(sub)))
                elif tl_name in LOAD_FUNCTIONS:
                    tags.add(("load",))
    if isinstance(node, ast.While):
        for name in _reads(node.test):
            tags |= deps.get(name, set())
    return tags


def _read_extent(info: LoopInfo, tags: set, launcher_names_of: dict[str, list[str]], grid_symbols: list[str]) -> None:
    """The grid axes, runtime data, parameters and launcher symbols the loop's extent depends on."""
    info.grid_axes = sorted({t[1] for t in tags if t[0] == "pid" and t[1] is not None})
    info.runtime_bounds = ("load",) in tags
    info.range_params = sorted({t[1] for t in tags if t[0] == "param"})
    symbols: list[str] = []
    for param in info.range_params:
        for name in launcher_names_of.get(param, [param]):
            if name not in symbols:
                symbols.append(name)
    info.range_symbols = symbols
    info.covered_by_grid = bool(info.grid_axes) or bool(set(symbols) & set(grid_symbols))


def _read_carried(info: LoopInfo, node: ast.stmt, deps: dict[str, set], module: Scope, helpers: set[str], decide) -> None:
    """The names the loop carries, split into accumulators (updated from loaded data) and inductions."""
    carried, updates = carried_names(node.body, info.var, decide)
    info.carries = carried
    for name in carried:
        data = False
        for value in updates.get(name, []):
            for read in _reads(value):
                if read == name:
                    continue
                tags = deps.get(read, set())
                if ("load",) in tags or any(t[0] == "call" for t in tags):
                    data = True
            for sub in ast.walk(value):
                if isinstance(sub, ast.Call):
                    if triton_function(sub.func, module) in LOAD_FUNCTIONS or (isinstance(sub.func, ast.Name) and sub.func.id in helpers):
                        data = True
        (info.accumulators if data else info.inductions).append(name)
    info.reduction = bool(info.accumulators)
    info.calls = sorted({sub.func.id for s in node.body for sub in ast.walk(s) if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in helpers})


def _count_trips(info: LoopInfo, fn: ast.FunctionDef, node: ast.stmt, ancestors: list[ast.AST], call: ast.Call | None,
                 module: Scope, kernel_values: dict[str, dict[str, Any]], ctx_factory) -> None:
    """Trip counts per config: the kernel body run up to the loop with that config's values."""
    path = {id(a) for a in ancestors} | {id(node)}
    for label, values in kernel_values.items():
        ctx: Context = ctx_factory(label)
        scope = Scope(ctx, module, values)
        execute(fn.body, scope, node, path)
        if isinstance(node, ast.While) or call is None:
            info.trip_counts[label] = None
            continue
        bounds = range_arguments(call, scope)
        if bounds is None:
            info.trip_counts[label] = None
            continue
        count = trip_count(*bounds)
        info.trip_counts[label] = count
        if count is None:
            unknown = next((b for b in bounds if isinstance(b, Unknown)), None)
            if unknown is not None:
                note = f"{unknown.text}: {unknown.why}"
                if note not in info.trip_count_notes:
                    info.trip_count_notes.append(note)
    if info.grid_axes and any(v is not None for v in info.trip_counts.values()):
        info.trip_count_notes.append(
            f"bounds depend on tl.program_id axis {info.grid_axes}: counts are for the first program (program_id 0)"
        )
    if isinstance(node, ast.While):
        info.trip_count_notes.append("while loop: trip count not derived statically")
    elif call is None:
        info.trip_count_notes.append("loop over a non-range iterable: trip count not derived")


def _constexpr_decider(fn: ast.FunctionDef, module: Scope, kernel_values: dict[str, dict[str, Any]], ctx_factory):
    """A condition's value when it reads only constexpr parameters and agrees across configs."""
    constexprs = {
        a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
    }
    if not kernel_values:
        return None

    def decide(test: ast.expr) -> bool | None:
        if not set(_reads(test)) <= constexprs | set(module.values):
            return None
        answers = set()
        for label, values in kernel_values.items():
            scope = Scope(ctx_factory(label), module, {k: v for k, v in values.items() if k in constexprs})
            value = evaluate(test, scope)
            if isinstance(value, Unknown):
                return None
            try:
                answers.add(bool(value))
            except OPERATION_ERRORS:  # no static truth value: undecided, both branches are walked
                return None
        return answers.pop() if len(answers) == 1 else None

    return decide


def jit_helpers(tree: ast.Module) -> set[str]:
    """Names a kernel may call as device functions: ``@triton.jit`` defs of the module, and names
    imported from other (non-Triton, non-torch) modules, which a kernel can only call if they are
    ``@triton.jit`` functions too."""
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and is_triton_kernel(n)}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] not in ("triton", "torch", "math", "typing", "functools")):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


__all__ = ["LoopInfo", "analyze_loops", "carried_names", "kernel_dependencies", "jit_helpers", "trip_count"]
