"""The Python builtins an evaluator may apply to values it knows, by name.

Each entry is a plain function over concrete arguments. It raises what Python raises for bad
arguments (``operators.OPERATION_ERRORS`` covers them), and nothing here builds a huge value from one line
of source: ``range`` refuses more than ``MAX_RANGE`` elements and returns a tuple. An evaluator
picks the names it supports and wraps them in its own calling convention (``values.Builtin``).
"""

from __future__ import annotations

from typing import Any, Callable

MAX_RANGE = 100_000


def bounded_range(*args: int) -> tuple:
    """``tuple(range(*args))``; ValueError when longer than MAX_RANGE."""
    values = range(*args)
    if len(values) > MAX_RANGE:
        raise ValueError("range too long to expand statically")
    return tuple(values)


PURE: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "bool": bool,
    "divmod": divmod,
    "float": float,
    "int": int,
    "len": len,
    "list": list,
    "max": max,
    "min": min,
    "range": bounded_range,
    "round": round,
    "sorted": sorted,
    "str": str,
    "sum": sum,
    "tuple": tuple,
}
