"""The values the kernel-source evaluator computes besides plain Python ones.

``Unknown`` (source text and why) and ``ModuleRef`` are the shared core's (``tools.pyeval.values``);
what is particular to launchers and Triton kernels is here: tensors known only by dtype, dtypes,
``triton.Config`` objects, closures, and the meta dict Triton hands to grid lambdas.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools.pyeval.values import Unknown

if TYPE_CHECKING:
    from .scope import Scope


@dataclass(frozen=True)
class Tensor:
    """A tensor known only by dtype (canonical torch name or None) and how that dtype was found."""

    dtype: str | None
    origin: str


@dataclass(frozen=True)
class DType:
    """A dtype as a value (``torch.bfloat16``, ``tl.float32``), by canonical torch name."""

    name: str


@dataclass(frozen=True)
class ConfigValue:
    """A ``triton.Config(...)`` built statically."""

    kwargs: dict
    num_warps: int | Unknown
    num_stages: int | Unknown
    num_ctas: int | Unknown
    maxnreg: int | None | Unknown
    text: str


@dataclass
class Closure:
    """A lambda or def with the scope it was made in."""

    node: ast.Lambda | ast.FunctionDef
    scope: "Scope"


class MetaDict(dict):
    """The dict Triton passes to grid lambdas and heuristics: kernel arguments plus config values."""


def derived(text: str, missing: Unknown) -> Unknown:
    """An Unknown computed from ``missing``: keeps the root cause, not the whole chain."""
    if missing.text == text:
        return missing
    if missing.why.startswith("needs "):
        return Unknown(text, missing.why)
    return Unknown(text, f"needs {missing.text} ({missing.why})")


def is_known(value: Any) -> bool:
    """Whether ``value`` holds no Unknown (inside tuples and lists too)."""
    if isinstance(value, Unknown):
        return False
    if isinstance(value, (tuple, list)):
        return all(is_known(v) for v in value)
    return True


def first_unknown(*values: Any) -> Unknown | None:
    """The first Unknown among ``values`` (searched into tuples and lists), or None."""
    for value in values:
        if isinstance(value, Unknown):
            return value
        if isinstance(value, (tuple, list)):
            inner = first_unknown(*value)
            if inner is not None:
                return inner
    return None
