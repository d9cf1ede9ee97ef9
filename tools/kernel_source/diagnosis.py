"""What a Triton kernel's programs load and how they multiply, read from its source at given shapes.

An abstract run of the kernel body (and of the ``@triton.jit`` helpers it calls) in which every value
is known only by its block *shape*, the grid axes (``tl.program_id(i)``) and loop variables it
depends on, and its value where that is a known scalar. A loaded value depends on what its address
depends on, so ``indices`` loaded per batch row and then used to address the KV cache carry the
batch axis into the cache's addresses. From that, per ``tl.load``/``tl.store``:

* bytes per program: lanes of the pointer block x element size x trips of the loops around it;
* bytes all programs load: that x the programs of the grid;
* unique bytes: a load whose address does not depend on a grid axis (or an enclosing loop) reads the
  same bytes in every program along it (every iteration of it), so that axis (loop) counts once;
* the redundancy factor: loaded / unique.

Inner products: ``tl.dot`` (tensor cores) against ``tl.sum`` of an elementwise product of two blocks
(CUDA-core multiply-reduce), with their lines and multiply-accumulate counts.

What this rests on (listed in ``assumptions``): masks are not modelled (a masked-off lane is counted
as loaded, an upper bound); rows gathered through loaded indices are taken as distinct (top-k
indices of one row are); loop trip counts are those of the first program (``tl.program_id`` 0), so
a split loop's share is assumed equal across programs.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field, replace
from typing import Any

from .evaluate import DType, ModuleRef, Scope, Tensor, segment
from .locate import dotted

ELEMENT_BYTES = {
    "bool": 1, "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
}
_ELEMENTWISE = {
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sigmoid", "sin", "cos", "erf", "floor", "ceil", "fdiv",
    "div_rn", "cast", "maximum", "minimum", "where", "clamp", "fma", "umulhi", "softmax", "math.exp", "math.exp2",
    "math.log", "math.log2", "math.sqrt", "math.rsqrt", "math.abs", "math.fma", "math.div_rn", "math.floor",
}
_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "cumsum", "cumprod"}
_STORES = {"store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor"}
_PASS_THROUGH = {"multiple_of", "max_contiguous", "max_constancy", "advance"}
_MAX_HELPER_DEPTH = 6


@dataclass(frozen=True)
class Block:
    """A value of the kernel: ``shape`` () for a scalar, None when unknown; ``deps`` the grid axes
    ("pid", i) and loops ("loop", line) it depends on, plus ("data",) once loaded; ``value`` a known
    Python scalar; ``pointer`` the element dtype of a pointer; ``product`` an elementwise product of
    two blocks (what ``tl.sum`` turns into a CUDA-core inner product); ``first`` its value in the first
    program (every ``tl.program_id`` 0), where ``value`` is not known for all programs (loop bounds)."""

    shape: tuple | None = ()
    deps: frozenset = frozenset()
    value: Any = None
    pointer: str | None = None
    dtype: str | None = None
    product: bool = False
    first: Any = None
    bases: frozenset = frozenset()  # the pointer arguments an address is offset from

    @property
    def known(self) -> Any:
        """The value for every program, else the first program's (None: neither known)."""
        return self.value if self.value is not None else self.first


UNKNOWN = Block(shape=None)


@dataclass
class Access:
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
    kind: str  # "dot" | "multiply-reduce"
    line: int
    function: str
    text: str
    macs: int | None  # multiply-accumulates per program (all trips)
    shape: list | None
    conditional: str | None = None


@dataclass
class _Frame:
    function: str
    trips: int | None
    loops: list[int]
    conditional: str | None
    record: bool


class _Interpreter:
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

    # ---- names ----
    def tl_name(self, node: ast.expr) -> str | None:
        """'load' for tl.load / triton.language.load, 'math.exp2' for tl.math.exp2, else None."""
        name = dotted(node)
        if not name:
            return None
        head, _, tail = name.partition(".")
        ref = self.module.values.get(head)
        if isinstance(ref, ModuleRef):
            full = f"{ref.name}.{tail}" if tail else ref.name
            if full.startswith("triton.language."):
                return full[len("triton.language."):]
        return None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ---- expressions ----
    def expr(self, node: ast.expr, env: dict, frame: _Frame) -> Any:
        if isinstance(node, ast.Constant):
            return Block(value=node.value) if isinstance(node.value, (int, float, bool)) else Block(value=node.value, shape=None)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return self.module_value(node.id)
        if isinstance(node, ast.Tuple) or isinstance(node, ast.List):
            return [self.expr(e, env, frame) for e in node.elts]
        if isinstance(node, ast.Attribute):
            name = self.tl_name(node)
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
            operand = self.expr(node.operand, env, frame)
            if not isinstance(operand, Block):
                return UNKNOWN
            value = None
            if operand.value is not None and not isinstance(operand.value, DType):
                try:
                    value = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Not: lambda v: not v, ast.Invert: lambda v: ~v}[type(node.op)](operand.value)
                except Exception:
                    value = None
            first = None
            if value is None and isinstance(operand.first, (int, float)):
                first = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v}.get(type(node.op), lambda v: None)(operand.first)
            return replace(operand, value=value, product=False, first=first)
        if isinstance(node, ast.Compare):
            blocks = [self.expr(node.left, env, frame)] + [self.expr(c, env, frame) for c in node.comparators]
            result = self.combine(blocks)
            values = [b.value if isinstance(b, Block) else None for b in blocks]
            if all(v is not None and not isinstance(v, DType) for v in values):
                try:
                    truth = True
                    for op, left, right in zip(node.ops, values, values[1:]):
                        truth = truth and _compare(op, left, right)
                    return replace(result, value=bool(truth), dtype="bool")
                except Exception:
                    pass
            return replace(result, value=None, dtype="bool")
        if isinstance(node, ast.BoolOp):
            blocks = [self.expr(v, env, frame) for v in node.values]
            result = self.combine(blocks)
            values = [b.value if isinstance(b, Block) else None for b in blocks]
            if all(isinstance(v, bool) for v in values):
                return replace(result, value=all(values) if isinstance(node.op, ast.And) else any(values))
            return replace(result, value=None)
        if isinstance(node, ast.IfExp):
            test = self.expr(node.test, env, frame)
            if isinstance(test, Block) and isinstance(test.value, bool):
                return self.expr(node.body if test.value else node.orelse, env, frame)
            return self.combine([test, self.expr(node.body, env, frame), self.expr(node.orelse, env, frame)])
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
            return self.expr(node, {}, _Frame("module", 1, [], None, False))
        return UNKNOWN

    def combine(self, blocks: list) -> Block:
        """Broadcast of elementwise operands: the union of their dependencies."""
        shape: tuple | None = ()
        deps: frozenset = frozenset()
        for block in blocks:
            if not isinstance(block, Block):
                return UNKNOWN
            deps |= block.deps
            shape = _broadcast(shape, block.shape)
        return Block(shape=shape, deps=deps)

    def binary(self, op: ast.operator, left: Any, right: Any) -> Block:
        if not isinstance(left, Block) or not isinstance(right, Block):
            return UNKNOWN
        result = self.combine([left, right])
        value = _apply(op, left.value, right.value)
        first = _apply(op, left.known, right.known) if value is None else None
        additive = isinstance(op, (ast.Add, ast.Sub))
        pointer = left.pointer or right.pointer if additive else None
        bases = left.bases | right.bases if additive else frozenset()
        product = isinstance(op, ast.Mult) and _varies(left.shape) and _varies(right.shape)
        return replace(result, value=value, first=first, pointer=pointer, product=product, dtype=left.dtype or right.dtype, bases=bases)

    def subscript(self, node: ast.Subscript, env: dict, frame: _Frame) -> Block:
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

    def call(self, node: ast.Call, env: dict, frame: _Frame) -> Any:
        func = node.func
        name = self.tl_name(func)
        if name is None and isinstance(func, ast.Attribute):
            return self.method(node, func.attr, self.expr(func.value, env, frame), env, frame)
        if name is None and isinstance(func, ast.Name):
            if func.id in self.helpers:
                return self.helper(node, self.helpers[func.id], env, frame)
            args = [self.expr(a, env, frame) for a in node.args]
            if func.id in ("min", "max", "int", "float", "abs") and all(isinstance(a, Block) and a.value is not None for a in args):
                try:
                    return Block(value={"min": min, "max": max, "int": int, "float": float, "abs": abs}[func.id](*[a.value for a in args]))
                except Exception:
                    return UNKNOWN
            self.note(f"line {node.lineno}: call to {func.id} not followed (not a @triton.jit function of this file)")
            blocks = [a for a in args if isinstance(a, Block)]
            return replace(self.combine(blocks), shape=None)
        if name is None:
            return UNKNOWN
        args = [self.expr(a, env, frame) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env, frame) for k in node.keywords if k.arg}
        short = name.split(".")[-1]
        if name == "program_id":
            axis = _int(args[0] if args else kwargs.get("axis"), 0)
            return Block(deps=frozenset({("pid", axis)}), dtype="int32", first=0)
        if name == "num_programs":
            axis = _int(args[0] if args else kwargs.get("axis"), 0)
            value = self.grid[axis] if self.grid is not None and axis is not None and axis < len(self.grid) else None
            return Block(value=value if isinstance(value, int) else None, dtype="int32")
        if name == "arange":
            start, stop = _int(args[0]), _int(args[1]) if len(args) > 1 else None
            return Block(shape=(stop - start,) if start is not None and stop is not None else (None,), dtype="int32")
        if name in ("zeros", "full", "empty"):
            shape = _shape(args[0] if args else kwargs.get("shape"))
            value = args[1].value if name == "full" and len(args) > 1 and isinstance(args[1], Block) else None
            return Block(shape=shape, value=value if shape == () else None)
        if name in ("zeros_like", "full_like", "empty_like"):
            base = args[0] if args else UNKNOWN
            return Block(shape=base.shape if isinstance(base, Block) else None)
        if name == "constexpr":
            return args[0] if args else UNKNOWN
        if name in ("cdiv",) and len(args) == 2:
            result = self.combine(args)
            cdiv = lambda a, b: -(-a // b) if isinstance(a, int) and isinstance(b, int) and b else None  # noqa: E731
            value = cdiv(args[0].value, args[1].value)
            return replace(result, value=value, first=cdiv(args[0].known, args[1].known) if value is None else None)
        if name in ("load",) or name.endswith("load_tensor_descriptor"):
            pointer = args[0] if args else kwargs.get("pointer", UNKNOWN)
            if not isinstance(pointer, Block):
                pointer = UNKNOWN
            self.access("load", node, pointer, frame)
            return Block(shape=pointer.shape, deps=pointer.deps | {("data",)}, dtype=pointer.pointer)
        if short in _STORES and not name.startswith("math."):
            pointer = args[0] if args else kwargs.get("pointer", UNKNOWN)
            self.access(short, node, pointer if isinstance(pointer, Block) else UNKNOWN, frame)
            value = args[1] if len(args) > 1 else kwargs.get("val", UNKNOWN)
            return value if short != "store" and isinstance(value, Block) else Block(shape=None)
        if name in ("dot", "dot_scaled"):
            a, b = (args + [UNKNOWN, UNKNOWN])[:2]
            acc = args[2] if len(args) > 2 else kwargs.get("acc")
            shape = None
            macs = None
            if isinstance(a, Block) and isinstance(b, Block) and a.shape and b.shape and len(a.shape) == 2 and len(b.shape) == 2:
                shape = (a.shape[0], b.shape[1])
                dims = (a.shape[0], a.shape[1], b.shape[1])
                macs = math.prod(dims) if all(isinstance(d, int) for d in dims) else None
            self.inner("dot", node, macs, list(shape) if shape else None, frame)
            blocks = [x for x in (a, b, acc) if isinstance(x, Block)]
            return Block(shape=shape, deps=self.combine(blocks).deps if blocks else frozenset(), dtype="float32")
        if short in _REDUCTIONS:
            x = args[0] if args else UNKNOWN
            axis_block = args[1] if len(args) > 1 else kwargs.get("axis")
            axis = _int(axis_block) if axis_block is not None else None
            if not isinstance(x, Block):
                return UNKNOWN
            if short == "sum" and x.product:
                macs = math.prod(x.shape) if x.shape and all(isinstance(d, int) for d in x.shape) else None
                self.inner("multiply-reduce", node, macs, list(x.shape) if x.shape else None, frame)
            if x.shape is None:
                return replace(x, product=False)
            if axis is None and axis_block is None:
                return replace(x, shape=(), product=False)
            if axis is None or not -len(x.shape) <= axis < len(x.shape):
                return replace(x, shape=None, product=False)
            keep = _bool(kwargs.get("keep_dims"))
            dims = list(x.shape)
            if keep:
                dims[axis] = 1
            else:
                dims.pop(axis)
            return replace(x, shape=tuple(dims), product=False, value=None)
        if name in ("trans", "permute"):
            x = args[0] if args else UNKNOWN
            return replace(x, shape=tuple(reversed(x.shape)) if x.shape else x.shape, product=False) if isinstance(x, Block) else UNKNOWN
        if name in ("reshape", "view", "broadcast_to"):
            x = args[0] if args else UNKNOWN
            shape = _shape(args[1] if len(args) > 1 else kwargs.get("shape"))
            return replace(x, shape=shape, product=False) if isinstance(x, Block) else UNKNOWN
        if name == "expand_dims":
            x = args[0] if args else UNKNOWN
            axis = _int(args[1] if len(args) > 1 else kwargs.get("axis"))
            if isinstance(x, Block) and x.shape is not None and axis is not None:
                dims = list(x.shape)
                dims.insert(axis if axis >= 0 else len(dims) + 1 + axis, 1)
                return replace(x, shape=tuple(dims), product=False)
            return UNKNOWN
        if short in _PASS_THROUGH:
            return args[0] if args else UNKNOWN
        if name in ("debug_barrier", "static_assert", "static_print", "device_print", "device_assert"):
            return Block(shape=None)
        if name in ("maximum", "minimum") and len(args) == 2 and all(isinstance(a, Block) for a in args):
            result = self.combine(args)
            pick = max if name == "maximum" else min
            if all(isinstance(a.value, (int, float)) and not isinstance(a.value, bool) for a in args):
                return replace(result, value=pick(args[0].value, args[1].value))
            if all(isinstance(a.known, (int, float)) and not isinstance(a.known, bool) for a in args):
                return replace(result, first=pick(args[0].known, args[1].known))
            return result
        if name in _ELEMENTWISE or short in _ELEMENTWISE:
            blocks = [a for a in args if isinstance(a, Block) and not isinstance(a.value, DType)]
            return self.combine(blocks) if blocks else UNKNOWN
        self.note(f"line {node.lineno}: tl.{name} not modelled")
        blocks = [a for a in args if isinstance(a, Block)]
        return replace(self.combine(blocks), shape=None) if blocks else UNKNOWN

    def method(self, node: ast.Call, attr: str, base: Any, env: dict, frame: _Frame) -> Any:
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
            return replace(base, shape=_shape(args[0] if len(args) == 1 else list(args)), product=False)
        if attr in ("trans", "permute"):
            return replace(base, shape=tuple(reversed(base.shape)) if base.shape else base.shape, product=False)
        if attr in _REDUCTIONS:
            self.note(f"line {node.lineno}: method .{attr}() not modelled (shape unknown)")
            return replace(base, shape=None, product=False)
        return replace(base, product=False)

    def helper(self, node: ast.Call, fn: ast.FunctionDef, env: dict, frame: _Frame) -> Any:
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
        sub = _Frame(f"{frame.function} > {fn.name}", frame.trips, frame.loops, frame.conditional, frame.record)
        returned = self.block(fn.body, inner, sub)
        return returned if returned is not None else Block(shape=None)

    # ---- records ----
    def access(self, op: str, node: ast.Call, pointer: Block, frame: _Frame) -> None:
        if not frame.record:
            return
        if pointer.shape is None:
            self.note(f"line {node.lineno}: the shape of the {op}'s pointer block is not known; its bytes are not counted")
        self.accesses.append(Access(op=op, line=node.lineno, function=frame.function, text=_short(segment(self.source, node)),
                                    pointer_dtype=pointer.pointer, shape=pointer.shape, trips=frame.trips,
                                    loops=list(frame.loops), deps=pointer.deps, conditional=frame.conditional, bases=pointer.bases))

    def inner(self, kind: str, node: ast.Call, macs: int | None, shape: list | None, frame: _Frame) -> None:
        if not frame.record:
            return
        total = macs * frame.trips if macs is not None and frame.trips is not None else None
        self.products.append(InnerProduct(kind=kind, line=node.lineno, function=frame.function,
                                          text=_short(segment(self.source, node)), macs=total, shape=shape,
                                          conditional=frame.conditional))

    # ---- statements ----
    def block(self, stmts: list[ast.stmt], env: dict, frame: _Frame) -> Any:
        """Run statements; the value of a ``return`` reached (helpers), else None."""
        for stmt in stmts:
            returned = self.statement(stmt, env, frame)
            if returned is not None:
                return returned
        return None

    def statement(self, stmt: ast.stmt, env: dict, frame: _Frame) -> Any:
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

    def branch(self, stmt: ast.If, env: dict, frame: _Frame) -> Any:
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
            sub = _Frame(frame.function, frame.trips, frame.loops, label if body else frame.conditional, frame.record)
            results.append(self.block(body, branch_env, sub))
            envs.append(branch_env)
        for name in set(envs[0]) | set(envs[1]):
            a, b = envs[0].get(name, UNKNOWN), envs[1].get(name, UNKNOWN)
            env[name] = a if a == b else _merge(a, b)
        returned = [r for r in results if r is not None]
        return _merge(*returned) if len(returned) == 2 else (returned[0] if returned else None)

    def loop(self, stmt: ast.For, env: dict, frame: _Frame) -> None:
        bounds: list = []
        is_range = isinstance(stmt.iter, ast.Call) and (dotted(stmt.iter.func) == "range" or self.tl_name(stmt.iter.func) in ("range", "static_range"))
        if is_range:
            bounds = [self.expr(a, env, frame) for a in stmt.iter.args[:3]]
        # the loop analysis' count (program 0), else this run's: it also follows tl.cdiv/tl.minimum and helpers
        trips = self.trip_counts.get(stmt.lineno)
        if trips is None:
            trips = _trips(bounds)
        if not is_range:
            self.note(f"line {stmt.lineno}: loop over a non-range iterable: trip count not derived")
        deps = frozenset().union(*[b.deps for b in bounds if isinstance(b, Block)]) if bounds else frozenset()
        self.loop_trips[stmt.lineno] = trips
        self.loop_body(stmt, stmt.body, env, frame, trips, deps)

    def loop_body(self, stmt: ast.stmt, body: list[ast.stmt], env: dict, frame: _Frame, trips: int | None, deps: frozenset) -> None:
        tag = ("loop", stmt.lineno)
        if isinstance(stmt, ast.For):
            self.bind(stmt.target, Block(deps=deps | {tag}, dtype="int32"), env)
        total = trips * frame.trips if trips is not None and frame.trips is not None else None
        silent = _Frame(frame.function, total, frame.loops + [stmt.lineno], frame.conditional, False)
        # carried values (accumulators, stepped pointers) take on what the body adds: run to a fixed point
        for _ in range(4):
            before = dict(env)
            trial = dict(env)
            self.block(body, trial, silent)
            for name, value in trial.items():
                env[name] = _merge(before[name], value) if name in before and before[name] != value else value
            if env == before:
                break
        loud = _Frame(frame.function, total, frame.loops + [stmt.lineno], frame.conditional, frame.record)
        after = dict(env)
        self.block(body, after, loud)
        for name, value in after.items():
            env[name] = _merge(env[name], value) if name in env and env[name] != value else value


def _compare(op: ast.cmpop, a: Any, b: Any) -> bool:
    return {ast.Eq: a == b, ast.NotEq: a != b, ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b,
            ast.Is: a is b, ast.IsNot: a is not b}[type(op)]


def _broadcast(a: tuple | None, b: tuple | None) -> tuple | None:
    if a is None or b is None:
        return None
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        else:
            return None
    return tuple(out)


def _varies(shape: tuple | None) -> bool:
    return shape is None or any(d != 1 for d in shape)


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [_merge(x, y) for x, y in zip(a, b)]
    if not isinstance(a, Block) or not isinstance(b, Block):
        return a if isinstance(a, Block) else b if isinstance(b, Block) else UNKNOWN
    shape = a.shape if a.shape == b.shape else (_broadcast(a.shape, b.shape) if a.shape and b.shape else (a.shape or b.shape))
    return Block(shape=shape, deps=a.deps | b.deps, value=a.value if a.value == b.value else None,
                 first=a.first if a.first == b.first else None,
                 pointer=a.pointer or b.pointer, bases=a.bases | b.bases, dtype=a.dtype if a.dtype == b.dtype else None, product=a.product and b.product)


def _apply(op: ast.operator, a: Any, b: Any) -> Any:
    if a is None or b is None or isinstance(a, DType) or isinstance(b, DType):
        return None
    try:
        from tools import ast_ops

        return ast_ops.binary(op, a, b)
    except Exception:
        return None


def _known_int(block: Any) -> int | None:
    if isinstance(block, Block) and isinstance(block.known, int) and not isinstance(block.known, bool):
        return block.known
    return None


def _int(block: Any, default: int | None = None) -> int | None:
    if isinstance(block, Block) and isinstance(block.value, int) and not isinstance(block.value, bool):
        return block.value
    return default


def _bool(block: Any) -> bool:
    return bool(block.value) if isinstance(block, Block) and block.value is not None else False


def _shape(value: Any) -> tuple | None:
    if isinstance(value, list):
        dims = [_int(v) for v in value]
        return tuple(dims)
    if isinstance(value, Block) and isinstance(value.value, int):
        return (value.value,)
    return None


def _trips(bounds: list) -> int | None:
    values = [_known_int(b) for b in bounds]
    if not values or any(v is None for v in values):
        return None
    start, stop, step = (0, values[0], 1) if len(values) == 1 else (values[0], values[1], values[2] if len(values) > 2 else 1)
    if step == 0:
        return None
    return max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))


def _short(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _initial_env(fn: ast.FunctionDef, values: dict[str, Any], dtypes: dict[str, str]) -> dict[str, Block]:
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


@dataclass
class ConfigDiagnosis:
    """One config's accesses and inner products, with the byte totals at its grid."""

    label: str
    grid: list | None
    programs: int | None
    accesses: list[dict] = field(default_factory=list)
    inner_products: list[dict] = field(default_factory=list)
    loaded_bytes: int | None = None
    unique_bytes: int | None = None
    redundancy_factor: float | None = None
    gathered_bytes: int | None = None  # loads addressed through loaded data (KV rows through top-k indices)
    unique_gathered_bytes: int | None = None
    gather_redundancy_factor: float | None = None
    scratch_bytes: int | None = None  # loads of what the kernel itself stores (a scratch round trip): not input
    stored_bytes: int | None = None
    unique_stored_bytes: int | None = None
    cuda_core_macs: int | None = None
    tensor_core_macs: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _access_dict(access: Access, grid: list | None, loop_trips: dict[int, int | None]) -> dict:
    axes = sorted(t[1] for t in access.deps if t[0] == "pid")
    loop_deps = {t[1] for t in access.deps if t[0] == "loop"}
    element = ELEMENT_BYTES.get(access.pointer_dtype or "")
    lanes = math.prod(access.shape) if access.shape is not None and all(isinstance(d, int) for d in access.shape) else None
    per_trip = lanes * element if lanes is not None and element is not None else None
    per_program = per_trip * access.trips if per_trip is not None and access.trips is not None else None
    programs = math.prod(grid) if grid and all(isinstance(d, int) for d in grid) else None
    total = per_program * programs if per_program is not None and programs is not None else None
    unique = None
    if per_trip is not None and grid and all(isinstance(d, int) for d in grid):
        # trips of the loops the address varies with, times the programs along the axes it varies with
        trips_dependent = _dependent_trips(access, loop_deps, loop_trips)
        if trips_dependent is not None:
            unique = per_trip * trips_dependent * math.prod(grid[a] for a in axes if 0 <= a < len(grid))
    independent = [a for a in range(len(grid or [])) if a not in axes]
    return {
        "op": access.op, "line": access.line, "function": access.function, "text": access.text, "tensor": sorted(access.bases),
        "dtype": access.pointer_dtype, "element_bytes": element, "shape": list(access.shape) if access.shape is not None else None,
        "trips": access.trips, "loops": access.loops, "grid_axes": axes,
        "independent_axes": independent, "data_dependent": ("data",) in access.deps,
        "bytes_per_program": per_program, "bytes": total, "unique_bytes": unique,
        "redundancy": total / unique if total is not None and unique else None,
        "conditional": access.conditional,
    }


def _dependent_trips(access: Access, loop_deps: set, loop_trips: dict[int, int | None]) -> int | None:
    """Trips of only the enclosing loops the address depends on (each loop's own count)."""
    product = 1
    for line in access.loops:
        if line in loop_deps:
            count = loop_trips.get(line)
            if count is None:
                return None
            product *= count
    return product


def diagnose_config(kdef, module: Scope, values: dict[str, Any], grid: tuple | None, trip_counts: dict[int, int | None], label: str,
                    dtypes: dict[str, str] | None = None) -> ConfigDiagnosis:
    """The accesses and inner products of one config (its kernel argument ``values`` and ``grid``);
    ``dtypes`` names the element dtype of pointer arguments the launch does not show."""
    dims = [d if isinstance(d, int) and not isinstance(d, bool) else None for d in grid] if isinstance(grid, tuple) else None
    interpreter = _Interpreter(kdef.tree, kdef.source, module, trip_counts, tuple(dims) if dims else None)
    env = _initial_env(kdef.node, values, dtypes or {})
    interpreter.block(kdef.node.body, env, _Frame(kdef.name, 1, [], None, True))
    accesses = [_access_dict(a, dims, interpreter.loop_trips) for a in interpreter.accesses]
    programs = math.prod(dims) if dims and all(d is not None for d in dims) else None
    result = ConfigDiagnosis(label=label, grid=dims, programs=programs, accesses=accesses, notes=list(interpreter.notes))
    stores = [a for a in accesses if a["op"] != "load"]
    stored_tensors = {t for a in stores for t in a["tensor"]}
    for access in accesses:
        access["scratch"] = access["op"] == "load" and bool(set(access["tensor"]) & stored_tensors)
    loads = [a for a in accesses if a["op"] == "load" and not a["scratch"]]
    result.scratch_bytes = _total([a for a in accesses if a.get("scratch")], "bytes", empty=0)
    result.loaded_bytes = _total(loads, "bytes")
    result.unique_bytes = _total(loads, "unique_bytes")
    gathers = [a for a in loads if a["data_dependent"]]
    result.gathered_bytes = _total(gathers, "bytes")
    result.unique_gathered_bytes = _total(gathers, "unique_bytes")
    if result.gathered_bytes is not None and result.unique_gathered_bytes:
        result.gather_redundancy_factor = result.gathered_bytes / result.unique_gathered_bytes
    result.stored_bytes = _total(stores, "bytes")
    result.unique_stored_bytes = _total(stores, "unique_bytes")
    if result.loaded_bytes is not None and result.unique_bytes:
        result.redundancy_factor = result.loaded_bytes / result.unique_bytes
    for product in interpreter.products:
        entry = dict(product.__dict__)
        entry["unit"] = "tensor cores" if product.kind == "dot" else "CUDA cores"
        entry["macs_all_programs"] = product.macs * programs if product.macs is not None and programs is not None else None
        result.inner_products.append(entry)
    result.tensor_core_macs = _total([p for p in result.inner_products if p["kind"] == "dot"], "macs_all_programs", empty=0)
    result.cuda_core_macs = _total([p for p in result.inner_products if p["kind"] == "multiply-reduce"], "macs_all_programs", empty=0)
    return result


def _total(items: list[dict], key: str, empty: int | None = None) -> int | None:
    if not items:
        return empty
    values = [i[key] for i in items]
    return sum(values) if all(v is not None for v in values) else None


def inner_product_kind(products: list[dict]) -> str:
    """"tensor-core dot", "CUDA-core multiply-reduce", "mixed" (both) or "none"."""
    kinds = {p["kind"] for p in products}
    if kinds == {"dot"}:
        return "tensor-core dot"
    if kinds == {"multiply-reduce"}:
        return "CUDA-core multiply-reduce"
    return "mixed" if kinds else "none"


ASSUMPTIONS = [
    "bytes per access = lanes of the pointer block x element size x trips of the enclosing loops; masks are not "
    "modelled, so masked-off lanes count as loaded (an upper bound)",
    "unique bytes count an access once along each grid axis and loop its address does not depend on; rows gathered "
    "through loaded indices are taken as distinct, and so are the rows of different programs along the axes it does depend on",
    "trip counts are those of the first program (program_id 0): a loop split across programs is assumed to split evenly",
    "loads from a tensor the kernel also stores to (its own scratch) are counted apart (scratch_bytes), not as input",
]


def diagnose(kdef, module: Scope, config_args: dict[str, dict], grids: dict[str, Any], loops: list, chosen_label: str | None,
             padding: dict | None = None, dtypes: dict[str, str] | None = None) -> dict:
    """The diagnosis the grid tool reports: per config (``configs``), and for the chosen config (else the
    first) the headline figures: ``loaded_bytes``, ``unique_bytes``, ``redundancy_factor``,
    ``inner_product`` ("tensor-core dot" / "CUDA-core multiply-reduce" / "mixed" / "none"), the lines of
    each inner product, ``padding`` (from ``padded_programs`` when the real head count was given) and
    ``assumptions``. Loop trip counts come from the loop analysis (by line, per config)."""
    configs = []
    for label, values in config_args.items():
        trips = {loop.line: loop.trip_counts.get(label) for loop in loops}
        configs.append(diagnose_config(kdef, module, values, grids.get(label), trips, label, dtypes))
    focus = next((c for c in configs if c.label == chosen_label), configs[0] if configs else None)
    if focus is None:
        return {"ok": False, "error": "no config to diagnose", "configs": []}
    products = focus.inner_products
    return {
        "ok": True,
        "config": focus.label,
        "grid": focus.grid,
        "programs": focus.programs,
        "loaded_bytes": focus.loaded_bytes,
        "unique_bytes": focus.unique_bytes,
        "redundancy_factor": focus.redundancy_factor,
        "gathered_bytes": focus.gathered_bytes,
        "unique_gathered_bytes": focus.unique_gathered_bytes,
        "gather_redundancy_factor": focus.gather_redundancy_factor,
        "gather_lines": sorted({a["line"] for a in focus.accesses if a["op"] == "load" and a["data_dependent"] and not a["scratch"]}),
        "independent_axes_of_gathers": sorted({x for a in focus.accesses if a["op"] == "load" and a["data_dependent"] and not a["scratch"] for x in a["independent_axes"]}),
        "scratch_bytes": focus.scratch_bytes,
        "stored_bytes": focus.stored_bytes,
        "inner_product": inner_product_kind(products),
        "dot_lines": sorted({p["line"] for p in products if p["kind"] == "dot"}),
        "multiply_reduce_lines": sorted({p["line"] for p in products if p["kind"] == "multiply-reduce"}),
        "cuda_core_macs": focus.cuda_core_macs,
        "tensor_core_macs": focus.tensor_core_macs,
        "padding": padding,
        "assumptions": list(ASSUMPTIONS),
        "configs": [c.to_dict() for c in configs],
    }


__all__ = ["ASSUMPTIONS", "ConfigDiagnosis", "diagnose", "diagnose_config", "inner_product_kind"]
