"""Conditions about the platform: analyzed for a CUDA target, a test naming another platform (hip,
rocm, npu, xpu, gfx9...) is taken as false and one naming CUDA as true. Read from the condition's
text alone, so they decide what evaluation cannot (``_is_hip`` is set at import time on the box)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .scope import Context, Scope

_OTHER_PLATFORM = re.compile(r"hip|rocm|npu|xpu|musa|gfx9|cdna|mps|habana|hpu", re.IGNORECASE)
_THIS_PLATFORM = re.compile(r"(^|[^a-z])_?is_cuda(\(\))?$|is_cuda_alike|_is_nvidia", re.IGNORECASE)


def cuda_platform_condition(text: str) -> bool | None:
    """On a CUDA target, a condition naming another platform (hip, rocm, npu, xpu, gfx9...) is
    False and one naming CUDA is True; None for any other condition."""
    if _OTHER_PLATFORM.search(text):
        return False
    if _THIS_PLATFORM.search(text.strip()):
        return True
    return None


def platform_guess(text: str, ctx: Context) -> bool | None:
    """For an undecidable condition naming a platform: False if another platform, True if this one."""
    if ctx.platform != "cuda":
        return None
    return cuda_platform_condition(text)


def platform_guess_expr(node: ast.expr, scope: Scope) -> bool | None:
    """Platform guess through `not`, `and`, `or`, so `not _is_hip and x` still resolves what it can."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = platform_guess_expr(node.operand, scope)
        return None if inner is None else not inner
    return platform_guess(scope.ctx.text(node), scope.ctx)
