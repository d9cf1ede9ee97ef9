"""Python's operators by AST node type. The evaluators compute values from source text they have never
seen, so what one line could make huge (``2 ** 10**9``, ``"x" * 10**9``, ``1 << 10**9``) raises
OverflowError here instead of being built.

Contract for callers: every function raises (TypeError for an operator outside the tables,
OverflowError for a result too large to build, and whatever Python raises for the operands:
ZeroDivisionError, TypeError...). ``OPERATION_ERRORS`` names exactly those; a caller catches them and
turns them into an ``Unknown`` whose reason names the exception, and lets anything else (a bug of
the evaluator) propagate.
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Callable

MAX_SEQUENCE = 10_000  # longest str/bytes/tuple built from source text
MAX_BITS = 4096  # widest integer operand or shift

# What applying an operator to operands taken from source can raise (not a bug of the evaluator).
OPERATION_ERRORS = (ArithmeticError, TypeError, ValueError, IndexError, KeyError, AttributeError)


def _int_too_wide(*values: Any) -> bool:
    return any(isinstance(v, int) and abs(v).bit_length() > MAX_BITS for v in values)


def _pow(a, b):
    if isinstance(b, (int, float)) and abs(b) >= 64:
        raise OverflowError("exponent too large to evaluate from source")
    return a**b


def _lshift(a, b):
    if b >= 64:
        raise OverflowError("shift too wide to evaluate from source")
    return a << b


def _mul(a, b):
    for seq, times in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, tuple)) and isinstance(times, int) and len(seq) * times > MAX_SEQUENCE:
            raise OverflowError("sequence too long to build from source")
    return a * b


BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _pow,
    ast.LShift: _lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}

COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}

UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}


def binary(op: ast.operator, a, b):
    """``a <op> b``; raises TypeError for an operator not in BINARY (``@``), OverflowError for a result
    too large to build, and whatever Python raises for the operands."""
    fn = BINARY.get(type(op))
    if fn is None:
        raise TypeError(f"operator {type(op).__name__} is not evaluated")
    if _int_too_wide(a, b):
        raise OverflowError("integer too wide to evaluate from source")
    result = fn(a, b)
    if isinstance(result, (str, bytes, tuple)) and len(result) > MAX_SEQUENCE:
        raise OverflowError("sequence too long to build from source")
    return result


def compare(op: ast.cmpop, a, b):
    """``a <op> b`` for one comparison operator."""
    return COMPARE[type(op)](a, b)


def unary(op: ast.unaryop, a):
    """``<op> a``."""
    return UNARY[type(op)](a)
