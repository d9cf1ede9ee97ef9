"""The values of the abstract run of a Triton kernel body (abstract_run.py): a ``Block`` is known by its
shape, the grid axes and loops it depends on, and its value where that is a known scalar; and the
arithmetic on them (broadcast, merge of two branches, Python's operators on known values).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from tools.pyeval.operators import OPERATION_ERRORS, binary

from .values import DType


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
class Frame:
    """Where a statement of the run executes: the function (``kernel > helper`` for a helper), the
    product of the enclosing loops' trip counts (None: some unknown), those loops' lines, the
    condition of the undecided branches around it, and whether its accesses are recorded (the
    fixed-point trials of a loop body are not)."""

    function: str
    trips: int | None
    loops: list[int]
    conditional: str | None
    record: bool


def combine(blocks: list) -> Block:
    """Broadcast of elementwise operands: the union of their dependencies."""
    shape: tuple | None = ()
    deps: frozenset = frozenset()
    for block in blocks:
        if not isinstance(block, Block):
            return UNKNOWN
        deps |= block.deps
        shape = broadcast(shape, block.shape)
    return Block(shape=shape, deps=deps)


def compare(op: ast.cmpop, a: Any, b: Any) -> bool:
    """``a <op> b``. Every comparison of the pair is computed (and may raise one of OPERATION_ERRORS),
    so operands that do not order (an int and a str) compare as not known, even for ``==``."""
    return {ast.Eq: a == b, ast.NotEq: a != b, ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b,
            ast.Is: a is b, ast.IsNot: a is not b}[type(op)]


def broadcast(a: tuple | None, b: tuple | None) -> tuple | None:
    """NumPy's broadcast of two shapes; an unknown dimension takes the other's; None: they do not
    broadcast, or either is unknown."""
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


def varies(shape: tuple | None) -> bool:
    """Whether a block of this shape has more than one lane (or may have)."""
    return shape is None or any(d != 1 for d in shape)


def merge(a: Any, b: Any) -> Any:
    """One value for two a name may hold (the sides of an undecided branch, a loop's trips): what
    both agree on, the union of their dependencies and bases."""
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [merge(x, y) for x, y in zip(a, b)]
    if not isinstance(a, Block) or not isinstance(b, Block):
        return a if isinstance(a, Block) else b if isinstance(b, Block) else UNKNOWN
    shape = a.shape if a.shape == b.shape else (broadcast(a.shape, b.shape) if a.shape and b.shape else (a.shape or b.shape))
    return Block(shape=shape, deps=a.deps | b.deps, value=a.value if a.value == b.value else None,
                 first=a.first if a.first == b.first else None,
                 pointer=a.pointer or b.pointer, bases=a.bases | b.bases, dtype=a.dtype if a.dtype == b.dtype else None, product=a.product and b.product)


def apply(op: ast.operator, a: Any, b: Any) -> Any:
    """``a <op> b`` on known values; None where either is not known or Python's operator raises."""
    if a is None or b is None or isinstance(a, DType) or isinstance(b, DType):
        return None
    try:
        return binary(op, a, b)
    except OPERATION_ERRORS:
        return None


def known_int(block: Any) -> int | None:
    """The block's int for every program, else the first program's; None if neither is known."""
    if isinstance(block, Block) and isinstance(block.known, int) and not isinstance(block.known, bool):
        return block.known
    return None


def int_value(block: Any, default: int | None = None) -> int | None:
    """The block's int for every program, else ``default``."""
    if isinstance(block, Block) and isinstance(block.value, int) and not isinstance(block.value, bool):
        return block.value
    return default


def truthy(block: Any) -> bool:
    """The block's known value as a flag; False when not known."""
    return bool(block.value) if isinstance(block, Block) and block.value is not None else False


def shape_of(value: Any) -> tuple | None:
    """A shape argument (``[BLOCK_M, BLOCK_N]`` or one int) as a tuple; None when not a shape."""
    if isinstance(value, list):
        dims = [int_value(v) for v in value]
        return tuple(dims)
    if isinstance(value, Block) and isinstance(value.value, int):
        return (value.value,)
    return None


def range_trips(bounds: list) -> int | None:
    """Iterations of ``range(*bounds)`` (the first program's bounds where they vary); None if unknown."""
    values = [known_int(b) for b in bounds]
    if not values or any(v is None for v in values):
        return None
    start, stop, step = (0, values[0], 1) if len(values) == 1 else (values[0], values[1], values[2] if len(values) > 2 else 1)
    if step == 0:
        return None
    return max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))

