"""How the gate interpreter names things in labels and reasons: a node by its one-line source text,
a failed operation by its exception."""

from __future__ import annotations

import ast

LABEL_CHARS = 120


def text(node: ast.AST) -> str:
    """One-line source text of a node (labels of unknowns, reports); kept on the node once made."""
    cached = getattr(node, "_gates_text", None)
    if cached is not None:
        return cached
    try:
        out = ast.unparse(node)
    except (AttributeError, TypeError, ValueError):  # unparse of a partial tree: named by its type
        out = type(node).__name__
    out = " ".join(out.split())
    out = out if len(out) <= LABEL_CHARS else out[: LABEL_CHARS - 3] + "..."
    try:
        node._gates_text = out
    except AttributeError:
        pass
    return out


def failure(exc: BaseException) -> str:
    """The reason an operation on values from the source failed, for an unknown's `why`."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
