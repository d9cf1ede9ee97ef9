"""The abstract run of a Triton kernel body (and of the ``@triton.jit`` helpers of its file it calls)
over blocks (blocks.py): every value is known by its shape, the grid axes and loops it depends on,
and its value where that is a known scalar. It records each load and store (``Access``) and each
inner product (``InnerProduct``) with the trips of the loops around it; ``triton.language`` calls are
modelled in tl_ops.py. diagnosis.py turns the records into bytes and multiply-accumulates.

An undecided branch runs both sides and merges what they bind; a loop body runs to a fixed point of
what it carries (accumulators, stepped pointers) before the recorded pass.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Any

from tools.pyeval.operators import OPERATION_ERRORS, unary
from tools.pyeval.syntax import dotted_name
from tools.pyeval.values import ModuleRef

from .blocks import UNKNOWN, Block, Frame, apply, combine, compare, merge, range_trips, shape_of, varies
from .scope import Scope, triton_function
from .source_text import segment
from .tl_ops import REDUCTIONS, TlCall, tl_call
from .values import DType, Tensor

_MAX_HELPER_DEPTH = 6


@dataclass
class Access:
    """One load, store or atomic of the run, with what its pointer block depends on."""

    op: str  # load | store | atomic_add ...
    line: int
    function: str
    text: str
    pointer_dtype: str | None
    shape: tuple | None
    trips: int | None  # product of the enclosing loops' trip counts (None: some unknown)
    loops: list[int]  # enclosing loop lines
    deps: frozenset
    conditional: str | None = None
    bases: frozenset = frozenset()


@dataclass
class InnerProduct:
    """One ``tl.dot`` (tensor cores) or ``tl.sum`` of an elementwise product (CUDA cores)."""

    kind: str  # "dot" | "multiply-reduce"
    line: int
    function: str
    text: str
    macs: int | None  # multiply-accumulates per program (all trips)
    shape: list | None
    conditional: str | None = None


class AbstractRun:
    """One run of a kernel body at one config: ``block(kernel.body, initial_env(...), frame)`` fills
    ``accesses``, ``products``, ``loop_trips`` (loop line -> trips, None unknown) and ``notes`` (what
    was not modelled). ``trip_counts`` are the loop analysis' counts by line, ``grid`` the launch
    grid (None where not known)."""

    def __init__(self, tree: ast.Module, source: str, module: Scope, trip_counts: dict[int, int | None], grid: tuple | None):
        self.tree = tree
        self.source = source
        self.module = module
        self.trip_counts = trip_counts
        self.grid = grid
        self.helpers = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.module_assigns = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        self.loop_trips: dict[int, int | None] = {}
        self.accesses: list[Access] = []
        self.products: list[InnerProduct] = []
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ---- expressions ----
    def expr(self, node: ast.expr, env: dict, frame: Frame) -> Any:
        if isinstance(node, ast.Constant):
            return Block(value=node.value) if isinstance(node.value, (int, float, bool)) else Block(value=node.value, shape=None)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return self.module_value(node.id)
        if isinstance(node, ast.Tuple) or isinstance(node, ast.List):
            return [self.expr(e, env, frame) for e in node.elts]
        if isinstance(node, ast.Attribute):
            name = triton_function(node, self.module)
            if name is not None:
                return Block(value=DType(name))  # tl.float32 and the like
            base = self.expr(node.value, env, frame)
            if isinstance(base, Block) and node.attr == "T" and base.shape:
                return replace(base, shape=tuple(reversed(base.shape)), product=False)
            if isinstance(base, Block) and node.attr == "dtype":
                return Block(value=DType(base.dtype or "?"))
            return replace(base, shape=None, value=None) if isinstance(base, Block) else UNKNOWN
        if isinstance(node, ast.BinOp):
            return self.binary(node.op, self.expr(node.left, env, frame), self.expr(node.right, env, frame))
        if isinstance(node, ast.UnaryOp):
            return self.unary(node.op, self.expr(node.operand, env, frame))
        if isinstance(node, ast.Compare):
            blocks = [self.expr(node.left, env, frame)] + [self.expr(c, env, frame) for c in node.comparators]
            return self.compare(node.ops, blocks)
        if isinstance(node, ast.BoolOp):
            blocks = [self.expr(v, env, frame) for v in node.values]
            result = combine(blocks)
            values = [b.value if isinstance(b, Block) else None for b in blocks]
            if all(isinstance(v, bool) for v in values):
                return replace(result, value=all(values) if isinstance(node.op, ast.And) else any(values))
            return replace(result, value=None)
        if isinstance(node, ast.IfExp):
            test = self.expr(node.test, env, frame)
            if isinstance(test, Block) and isinstance(test.value, bool):
                return self.expr(node.body if test.value else node.orelse, env, frame)
            return combine([test, self.expr(node.body, env, frame), self.expr(node.orelse, env, frame)])
        if isinstance(node, ast.Subscript):
            return self.subscript(node, env, frame)
        if isinstance(node, ast.Call):
            return self.call(node, env, frame)
        return UNKNOWN

    def module_value(self, name: str) -> Any:
        value = self.module.values.get(name)
        if isinstance(value, bool) or isinstance(value, (int, float)):
            return Block(value=value)
        if isinstance(value, (ModuleRef, DType)):
            return Block(value=value, shape=None)
        node = self.module_assigns.get(name)
        if node is not None:  # e.g. LOG2E = tl.constexpr(1.44...), which the launcher-side evaluator leaves unknown
            return self.expr(node, {}, Frame("module", 1, [], None, False))
        return UNKNOWN

    def unary(self, op: ast.unaryop, operand: Any) -> Any:
        """The operand with the operator applied to its known value (a value Python's operator
        rejects is not known); a negated first-program value stays known as the first program's."""
        if not isinstance(operand, Block):
            return UNKNOWN
        value = None
        if operand.value is not None and not isinstance(operand.value, DType):
            try:
                value = unary(op, operand.value)
            except OPERATION_ERRORS:
                value = None
        first = None
        if value is None and isinstance(operand.first, (int, float)):
            first = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v}.get(type(op), lambda v: None)(operand.first)
        return replace(operand, value=value, product=False, first=first)

    def compare(self, ops: list[ast.cmpop], blocks: list) -> Block:
        """A chained comparison: a flag block, its value known when every operand's is and Python
        can compare them."""
        result = combine(blocks)
        values = [b.value if isinstance(b, Block) else None for b in blocks]
        if all(v is not None and not isinstance(v, DType) for v in values):
            try:
                truth = True
                for op, left, right in zip(ops, values, values[1:]):
                    truth = truth and compare(op, left, right)
                return replace(result, value=bool(truth), dtype="bool")
            except OPERATION_ERRORS:
                pass
        return replace(result, value=None, dtype="bool")

    def binary(self, op: ast.operator, left: Any, right: Any) -> Block:
        if not isinstance(left, Block) or not isinstance(right, Block):
            return UNKNOWN
        result = combine([left, right])
        value = apply(op, left.value, right.value)
        first = apply(op, left.known, right.known) if value is None else None
        additive = isinstance(op, (ast.Add, ast.Sub))
        pointer = left.pointer or right.pointer if additive else None
        bases = left.bases | right.bases if additive else frozenset()
        product = isinstance(op, ast.Mult) and varies(left.shape) and varies(right.shape)
        return replace(result, value=value, first=first, pointer=pointer, product=product, dtype=left.dtype or right.dtype, bases=bases)

    def subscript(self, node: ast.Subscript, env: dict, frame: Frame) -> Block:
        base = self.expr(node.value, env, frame)
        if isinstance(base, list):
            index = self.expr(node.slice, env, frame)
            if isinstance(index, Block) and isinstance(index.value, int) and -len(base) <= index.value < len(base):
                return base[index.value]
            return UNKNOWN
        if not isinstance(base, Block) or base.shape is None:
            return replace(base, shape=None) if isinstance(base, Block) else UNKNOWN
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        dims = list(base.shape)
        shape: list = []
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                shape.append(1)
            elif isinstance(item, ast.Slice) and item.lower is None and item.upper is None and item.step is None:
                if not dims:
                    return replace(base, shape=None)
                shape.append(dims.pop(0))
            else:
                return replace(base, shape=None)
        return replace(base, shape=tuple(shape + dims), product=False)

    def call(self, node: ast.Call, env: dict, frame: Frame) -> Any:
        func = node.func
        name = triton_function(func, self.module)
        if name is None and isinstance(func, ast.Attribute):
            return self.method(node, func.attr, self.expr(func.value, env, frame), env, frame)
        if name is None and isinstance(func, ast.Name):
            if func.id in self.helpers:
                return self.helper(node, self.helpers[func.id], env, frame)
            args = [self.expr(a, env, frame) for a in node.args]
            if func.id in ("min", "max", "int", "float", "abs") and all(isinstance(a, Block) and a.value is not None for a in args):
                try:
                    return Block(value={"min": min, "max": max, "int": int, "float": float, "abs": abs}[func.id](*[a.value for a in args]))
                except OPERATION_ERRORS:
                    return UNKNOWN
            self.note(f"line {node.lineno}: call to {func.id} not followed (not a @triton.jit function of this file)")
            blocks = [a for a in args if isinstance(a, Block)]
            return replace(combine(blocks), shape=None)
        if name is None:
            return UNKNOWN
        args = [self.expr(a, env, frame) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env, frame) for k in node.keywords if k.arg}
        return tl_call(self, TlCall(node, name, args, kwargs, frame))

    def method(self, node: ast.Call, attr: str, base: Any, env: dict, frame: Frame) -> Any:
        args = [self.expr(a, env, frame) for a in node.args]
        if not isinstance(base, Block):
            return UNKNOWN
        if attr == "to":
            target = args[0] if args else None
            dtype = target.value.name if isinstance(target, Block) and isinstance(target.value, DType) else base.dtype
            value, first = base.value, base.first
            if dtype and dtype.startswith("int"):
                value = int(value) if isinstance(value, (int, float)) else value
                first = int(first) if isinstance(first, (int, float)) else first
            return replace(base, dtype=dtype, product=False, value=value, first=first)
        if attr in ("reshape", "view", "broadcast_to"):
            return replace(base, shape=shape_of(args[0] if len(args) == 1 else list(args)), product=False)
        if attr in ("trans", "permute"):
            return replace(base, shape=tuple(reversed(base.shape)) if base.shape else base.shape, product=False)
        if attr in REDUCTIONS:
            self.note(f"line {node.lineno}: method .{attr}() not modelled (shape unknown)")
            return replace(base, shape=None, product=False)
        return replace(base, product=False)

    def helper(self, node: ast.Call, fn: ast.FunctionDef, env: dict, frame: Frame) -> Any:
        if len(frame.function.split(" > ")) > _MAX_HELPER_DEPTH:
            self.note(f"line {node.lineno}: helper {fn.name} nested too deep; not followed")
            return UNKNOWN
        args = [self.expr(a, env, frame) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env, frame) for k in node.keywords if k.arg}
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        inner: dict[str, Any] = {}
        defaults = fn.args.defaults
        for i, param in enumerate(params):
            if i < len(args):
                inner[param] = args[i]
            elif param in kwargs:
                inner[param] = kwargs[param]
            else:
                d = i - (len(params) - len(defaults))
                inner[param] = self.expr(defaults[d], {}, frame) if d >= 0 else UNKNOWN
        sub = Frame(f"{frame.function} > {fn.name}", frame.trips, frame.loops, frame.conditional, frame.record)
        returned = self.block(fn.body, inner, sub)
        return returned if returned is not None else Block(shape=None)

    # ---- records ----
    def access(self, op: str, node: ast.Call, pointer: Block, frame: Frame) -> None:
        if not frame.record:
            return
        if pointer.shape is None:
            self.note(f"line {node.lineno}: the shape of the {op}'s pointer block is not known; its bytes are not counted")
        self.accesses.append(Access(op=op, line=node.lineno, function=frame.function, text=_short(segment(self.source, node)),
                                    pointer_dtype=pointer.pointer, shape=pointer.shape, trips=frame.trips,
                                    loops=list(frame.loops), deps=pointer.deps, conditional=frame.conditional, bases=pointer.bases))

    def inner(self, kind: str, node: ast.Call, macs: int | None, shape: list | None, frame: Frame) -> None:
        if not frame.record:
            return
        total = macs * frame.trips if macs is not None and frame.trips is not None else None
        self.products.append(InnerProduct(kind=kind, line=node.lineno, function=frame.function,
                                          text=_short(segment(self.source, node)), macs=total, shape=shape,
                                          conditional=frame.conditional))

    # ---- statements ----
    def block(self, stmts: list[ast.stmt], env: dict, frame: Frame) -> Any:
        """Run statements; the value of a ``return`` reached (helpers), else None."""
        for stmt in stmts:
            returned = self.statement(stmt, env, frame)
            if returned is not None:
                return returned
        return None

    def statement(self, stmt: ast.stmt, env: dict, frame: Frame) -> Any:
        if isinstance(stmt, ast.Assign):
            value = self.expr(stmt.value, env, frame)
            for target in stmt.targets:
                self.bind(target, value, env)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self.bind(stmt.target, self.expr(stmt.value, env, frame), env)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            current = env.get(stmt.target.id, UNKNOWN)
            self.bind(stmt.target, self.binary(stmt.op, current, self.expr(stmt.value, env, frame)), env)
        elif isinstance(stmt, ast.Expr):
            self.expr(stmt.value, env, frame)
        elif isinstance(stmt, ast.Return):
            return self.expr(stmt.value, env, frame) if stmt.value is not None else Block(shape=None)
        elif isinstance(stmt, ast.If):
            return self.branch(stmt, env, frame)
        elif isinstance(stmt, ast.For):
            self.loop(stmt, env, frame)
        elif isinstance(stmt, ast.While):
            self.note(f"line {stmt.lineno}: while loop: trip count not derived; its accesses are not counted in bytes")
            self.loop_trips[stmt.lineno] = None
            self.loop_body(stmt, stmt.body, env, frame, None, frozenset())
        elif isinstance(stmt, ast.With):
            return self.block(stmt.body, env, frame)
        return None

    def bind(self, target: ast.expr, value: Any, env: dict) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value if isinstance(value, list) and len(value) == len(target.elts) else [UNKNOWN] * len(target.elts)
            for element, item in zip(target.elts, items):
                self.bind(element, item, env)

    def branch(self, stmt: ast.If, env: dict, frame: Frame) -> Any:
        test = self.expr(stmt.test, env, frame)
        if isinstance(test, Block) and test.value is not None and not isinstance(test.value, DType):
            return self.block(stmt.body if test.value else stmt.orelse, env, frame)
        # undecided (a runtime or unknown condition): both sides run; what each binds is merged
        text = _short(segment(self.source, stmt.test))
        condition = f"{frame.conditional} and {text}" if frame.conditional else text
        results = []
        envs = []
        for side, body in ((True, stmt.body), (False, stmt.orelse)):
            branch_env = dict(env)
            label = condition if side else f"not ({condition})"
            sub = Frame(frame.function, frame.trips, frame.loops, label if body else frame.conditional, frame.record)
            results.append(self.block(body, branch_env, sub))
            envs.append(branch_env)
        for name in set(envs[0]) | set(envs[1]):
            a, b = envs[0].get(name, UNKNOWN), envs[1].get(name, UNKNOWN)
            env[name] = a if a == b else merge(a, b)
        returned = [r for r in results if r is not None]
        return merge(*returned) if len(returned) == 2 else (returned[0] if returned else None)

    def loop(self, stmt: ast.For, env: dict, frame: Frame) -> None:
        bounds: list = []
        is_range = isinstance(stmt.iter, ast.Call) and (dotted_name(stmt.iter.func) == "range" or triton_function(stmt.iter.func, self.module) in ("range", "static_range"))
        if is_range:
            bounds = [self.expr(a, env, frame) for a in stmt.iter.args[:3]]
        # the loop analysis' count (program 0), else this run's: it also follows tl.cdiv/tl.minimum and helpers
        trips = self.trip_counts.get(stmt.lineno)
        if trips is None:
            trips = range_trips(bounds)
        if not is_range:
            self.note(f"line {stmt.lineno}: loop over a non-range iterable: trip count not derived")
        deps = frozenset().union(*[b.deps for b in bounds if isinstance(b, Block)]) if bounds else frozenset()
        self.loop_trips[stmt.lineno] = trips
        self.loop_body(stmt, stmt.body, env, frame, trips, deps)

    def loop_body(self, stmt: ast.stmt, body: list[ast.stmt], env: dict, frame: Frame, trips: int | None, deps: frozenset) -> None:
        tag = ("loop", stmt.lineno)
        if isinstance(stmt, ast.For):
            self.bind(stmt.target, Block(deps=deps | {tag}, dtype="int32"), env)
        total = trips * frame.trips if trips is not None and frame.trips is not None else None
        silent = Frame(frame.function, total, frame.loops + [stmt.lineno], frame.conditional, False)
        # carried values (accumulators, stepped pointers) take on what the body adds: run to a fixed point
        for _ in range(4):
            before = dict(env)
            trial = dict(env)
            self.block(body, trial, silent)
            for name, value in trial.items():
                env[name] = merge(before[name], value) if name in before and before[name] != value else value
            if env == before:
                break
        loud = Frame(frame.function, total, frame.loops + [stmt.lineno], frame.conditional, frame.record)
        after = dict(env)
        self.block(body, after, loud)
        for name, value in after.items():
            env[name] = merge(env[name], value) if name in env and env[name] != value else value


def _short(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def initial_env(fn: ast.FunctionDef, values: dict[str, Any], dtypes: dict[str, str]) -> dict[str, Block]:
    """The kernel's parameters as blocks: pointers (from the launch's tensors, or ``dtypes``) offset
    from themselves, known scalars with their values, the rest as named runtime scalars."""
    env: dict[str, Block] = {}
    for arg in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
        value = values.get(arg.arg)
        if arg.arg in dtypes and not isinstance(value, (bool, int, float)):
            env[arg.arg] = Block(pointer=dtypes[arg.arg], bases=frozenset({arg.arg}))  # given by the caller, as for the compile
        elif isinstance(value, Tensor):
            env[arg.arg] = Block(pointer=value.dtype or "?", bases=frozenset({arg.arg}))
        elif isinstance(value, bool) or isinstance(value, (int, float)):
            env[arg.arg] = Block(value=value)
        else:  # a runtime scalar, or a value the launch does not show (named, in case it is a pointer)
            env[arg.arg] = Block(bases=frozenset({arg.arg}))
    return env

