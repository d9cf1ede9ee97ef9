"""Shapes of Python syntax both evaluators read: dotted names, what a statement binds, walks that
stay out of nested definitions. Pure functions of the AST; nothing here evaluates."""

from __future__ import annotations

import ast
from typing import Iterator

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def dotted_name(node: ast.AST, *, through_calls: bool = False) -> str | None:
    """``a.b.c`` for an attribute chain on a name, None for anything else. With ``through_calls``,
    a call inside the chain is kept as ``()``: ``get_config().flag`` is 'get_config().flag'."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if through_calls and isinstance(node, ast.Call) and parts:
        inner = dotted_name(node.func, through_calls=True)
        return f"{inner}().{'.'.join(reversed(parts))}" if inner else None
    return None


def assign_targets(stmt: ast.Assign | ast.AnnAssign | ast.AugAssign) -> list[ast.expr]:
    """The targets an assignment statement stores into (one for annotated and augmented ones)."""
    return list(stmt.targets) if isinstance(stmt, ast.Assign) else [stmt.target]


def bound_names(target: ast.expr) -> list[str]:
    """The names an assignment target binds, in order: ``a, (b, *c) = ...`` binds a, b, c.
    Attributes and subscripts bind no name."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for elt in target.elts for name in bound_names(elt)]
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    return []


def import_bindings(stmt: ast.Import) -> list[tuple[str, str]]:
    """(bound name, module it binds) for each alias: ``import a.b`` binds a to module a,
    ``import a.b as c`` binds c to module a.b."""
    out = []
    for alias in stmt.names:
        if alias.asname:
            out.append((alias.asname, alias.name))
        else:
            head = alias.name.split(".")[0]
            out.append((head, head))
    return out


def walk_no_defs(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and its descendants, not entering nested functions, classes or lambdas (their
    bodies run elsewhere, if at all). Order: depth first, last child first."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if not isinstance(child, DEFINITIONS):
                stack.append(child)
