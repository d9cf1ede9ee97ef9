"""What ``triton.language`` functions do to the blocks of the abstract run (abstract_run.py): the
shape and dependencies of their result, and the loads, stores and inner products they record.

``tl_call(run, call)`` picks the handler: by the function's full name (``program_id``, ``math.exp2``)
first, then by its last part (``atomic_add``, ``sum``) for the families below; a function none
handles is noted as not modelled and its result's shape left unknown. A handler records through
``run.access``/``run.inner``/``run.note`` and reads the launch grid as ``run.grid``.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from .blocks import UNKNOWN, Block, Frame, combine, int_value, shape_of, truthy
from .values import DType

ELEMENTWISE = {
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sigmoid", "sin", "cos", "erf", "floor", "ceil", "fdiv",
    "div_rn", "cast", "maximum", "minimum", "where", "clamp", "fma", "umulhi", "softmax", "math.exp", "math.exp2",
    "math.log", "math.log2", "math.sqrt", "math.rsqrt", "math.abs", "math.fma", "math.div_rn", "math.floor",
}
REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "cumsum", "cumprod"}
STORES = {"store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor"}
PASS_THROUGH = {"multiple_of", "max_contiguous", "max_constancy", "advance"}


@dataclass(frozen=True)
class TlCall:
    """One call of a ``triton.language`` function, its arguments already run."""

    node: ast.Call
    name: str  # relative to triton.language: "load", "math.exp2"
    args: list
    kwargs: dict
    frame: Frame

    @property
    def short(self) -> str:
        return self.name.split(".")[-1]


def tl_call(run, call: TlCall) -> Any:
    handler = BY_NAME.get(call.name)
    if handler is None:
        handler = next((h for matches, h in BY_FAMILY if matches(call.name, call.short)), _not_modelled)
    return handler(run, call)


def _program_id(run, call: TlCall) -> Block:
    axis = int_value(call.args[0] if call.args else call.kwargs.get("axis"), 0)
    return Block(deps=frozenset({("pid", axis)}), dtype="int32", first=0)


def _num_programs(run, call: TlCall) -> Block:
    axis = int_value(call.args[0] if call.args else call.kwargs.get("axis"), 0)
    grid = run.grid
    value = grid[axis] if grid is not None and axis is not None and axis < len(grid) else None
    return Block(value=value if isinstance(value, int) else None, dtype="int32")


def _arange(run, call: TlCall) -> Block:
    args = call.args
    start, stop = int_value(args[0]), int_value(args[1]) if len(args) > 1 else None
    return Block(shape=(stop - start,) if start is not None and stop is not None else (None,), dtype="int32")


def _filled(run, call: TlCall) -> Block:
    args = call.args
    shape = shape_of(args[0] if args else call.kwargs.get("shape"))
    value = args[1].value if call.name == "full" and len(args) > 1 and isinstance(args[1], Block) else None
    return Block(shape=shape, value=value if shape == () else None)


def _filled_like(run, call: TlCall) -> Block:
    base = call.args[0] if call.args else UNKNOWN
    return Block(shape=base.shape if isinstance(base, Block) else None)


def _first_argument(run, call: TlCall) -> Any:
    return call.args[0] if call.args else UNKNOWN


def _cdiv(run, call: TlCall) -> Any:
    args = call.args
    if len(args) != 2:
        return _not_modelled(run, call)
    result = combine(args)
    cdiv = lambda a, b: -(-a // b) if isinstance(a, int) and isinstance(b, int) and b else None  # noqa: E731
    value = cdiv(args[0].value, args[1].value)
    return replace(result, value=value, first=cdiv(args[0].known, args[1].known) if value is None else None)


def _load(run, call: TlCall) -> Block:
    pointer = call.args[0] if call.args else call.kwargs.get("pointer", UNKNOWN)
    if not isinstance(pointer, Block):
        pointer = UNKNOWN
    run.access("load", call.node, pointer, call.frame)
    return Block(shape=pointer.shape, deps=pointer.deps | {("data",)}, dtype=pointer.pointer)


def _store(run, call: TlCall) -> Block:
    """``tl.store`` and the atomics: an access of the pointer block; an atomic returns the old value."""
    short = call.short
    pointer = call.args[0] if call.args else call.kwargs.get("pointer", UNKNOWN)
    run.access(short, call.node, pointer if isinstance(pointer, Block) else UNKNOWN, call.frame)
    value = call.args[1] if len(call.args) > 1 else call.kwargs.get("val", UNKNOWN)
    return value if short != "store" and isinstance(value, Block) else Block(shape=None)


def _dot(run, call: TlCall) -> Block:
    """A tensor-core inner product of an (M, K) and a (K, N) block: M*K*N multiply-accumulates."""
    args, kwargs = call.args, call.kwargs
    a, b = (args + [UNKNOWN, UNKNOWN])[:2]
    acc = args[2] if len(args) > 2 else kwargs.get("acc")
    shape = None
    macs = None
    if isinstance(a, Block) and isinstance(b, Block) and a.shape and b.shape and len(a.shape) == 2 and len(b.shape) == 2:
        shape = (a.shape[0], b.shape[1])
        dims = (a.shape[0], a.shape[1], b.shape[1])
        macs = math.prod(dims) if all(isinstance(d, int) for d in dims) else None
    run.inner("dot", call.node, macs, list(shape) if shape else None, call.frame)
    blocks = [x for x in (a, b, acc) if isinstance(x, Block)]
    return Block(shape=shape, deps=combine(blocks).deps if blocks else frozenset(), dtype="float32")


def _reduction(run, call: TlCall) -> Any:
    """The block reduced along ``axis`` (all axes when none is given); ``tl.sum`` of an elementwise
    product of two blocks is a CUDA-core inner product."""
    args, kwargs = call.args, call.kwargs
    x = args[0] if args else UNKNOWN
    axis_block = args[1] if len(args) > 1 else kwargs.get("axis")
    axis = int_value(axis_block) if axis_block is not None else None
    if not isinstance(x, Block):
        return UNKNOWN
    if call.short == "sum" and x.product:
        macs = math.prod(x.shape) if x.shape and all(isinstance(d, int) for d in x.shape) else None
        run.inner("multiply-reduce", call.node, macs, list(x.shape) if x.shape else None, call.frame)
    if x.shape is None:
        return replace(x, product=False)
    if axis is None and axis_block is None:
        return replace(x, shape=(), product=False)
    if axis is None or not -len(x.shape) <= axis < len(x.shape):
        return replace(x, shape=None, product=False)
    keep = truthy(kwargs.get("keep_dims"))
    dims = list(x.shape)
    if keep:
        dims[axis] = 1
    else:
        dims.pop(axis)
    return replace(x, shape=tuple(dims), product=False, value=None)


def _transpose(run, call: TlCall) -> Any:
    x = call.args[0] if call.args else UNKNOWN
    return replace(x, shape=tuple(reversed(x.shape)) if x.shape else x.shape, product=False) if isinstance(x, Block) else UNKNOWN


def _reshape(run, call: TlCall) -> Any:
    x = call.args[0] if call.args else UNKNOWN
    shape = shape_of(call.args[1] if len(call.args) > 1 else call.kwargs.get("shape"))
    return replace(x, shape=shape, product=False) if isinstance(x, Block) else UNKNOWN


def _expand_dims(run, call: TlCall) -> Any:
    x = call.args[0] if call.args else UNKNOWN
    axis = int_value(call.args[1] if len(call.args) > 1 else call.kwargs.get("axis"))
    if isinstance(x, Block) and x.shape is not None and axis is not None:
        dims = list(x.shape)
        dims.insert(axis if axis >= 0 else len(dims) + 1 + axis, 1)
        return replace(x, shape=tuple(dims), product=False)
    return UNKNOWN


def _debug(run, call: TlCall) -> Block:
    return Block(shape=None)


def _extremum(run, call: TlCall) -> Any:
    """``tl.maximum``/``tl.minimum`` of two blocks, with the value where both operands' are known."""
    args = call.args
    if not (len(args) == 2 and all(isinstance(a, Block) for a in args)):
        return _elementwise(run, call)
    result = combine(args)
    pick = max if call.name == "maximum" else min
    if all(isinstance(a.value, (int, float)) and not isinstance(a.value, bool) for a in args):
        return replace(result, value=pick(args[0].value, args[1].value))
    if all(isinstance(a.known, (int, float)) and not isinstance(a.known, bool) for a in args):
        return replace(result, first=pick(args[0].known, args[1].known))
    return result


def _elementwise(run, call: TlCall) -> Any:
    blocks = [a for a in call.args if isinstance(a, Block) and not isinstance(a.value, DType)]
    return combine(blocks) if blocks else UNKNOWN


def _not_modelled(run, call: TlCall) -> Any:
    run.note(f"line {call.node.lineno}: tl.{call.name} not modelled")
    blocks = [a for a in call.args if isinstance(a, Block)]
    return replace(combine(blocks), shape=None) if blocks else UNKNOWN


Handler = Callable[[Any, TlCall], Any]

BY_NAME: dict[str, Handler] = {
    "program_id": _program_id,
    "num_programs": _num_programs,
    "arange": _arange,
    **dict.fromkeys(("zeros", "full", "empty"), _filled),
    **dict.fromkeys(("zeros_like", "full_like", "empty_like"), _filled_like),
    "constexpr": _first_argument,
    "cdiv": _cdiv,
    "load": _load,
    **dict.fromkeys(("dot", "dot_scaled"), _dot),
    **dict.fromkeys(("trans", "permute"), _transpose),
    **dict.fromkeys(("reshape", "view", "broadcast_to"), _reshape),
    "expand_dims": _expand_dims,
    **dict.fromkeys(("debug_barrier", "static_assert", "static_print", "device_print", "device_assert"), _debug),
    **dict.fromkeys(("maximum", "minimum"), _extremum),
}

# (matches(name, short), handler), tried in order for a name BY_NAME does not hold.
BY_FAMILY: list[tuple[Callable[[str, str], bool], Handler]] = [
    (lambda name, short: name.endswith("load_tensor_descriptor"), _load),
    (lambda name, short: short in STORES and not name.startswith("math."), _store),
    (lambda name, short: short in REDUCTIONS, _reduction),
    (lambda name, short: short in PASS_THROUGH, _first_argument),
    (lambda name, short: name in ELEMENTWISE or short in ELEMENTWISE, _elementwise),
]
