"""Walking a module with the context the interpreter needs at each place: the enclosing functions,
class, and the conditions (if-tests with the branch taken) that guard it, including the
`if gate: return fast()` form where everything after the `if` runs only when the test is false."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterator

from .values import ClassRef


@dataclass
class Place:
    """A node found in a module, with where it sits."""

    node: ast.AST
    module: str
    chain: tuple  # enclosing function nodes, outermost first
    cls: ClassRef | None
    qualname: str | None  # qualified name of the innermost function (or class)
    conds: tuple  # ((test node, branch), ...) guarding the node inside its innermost function


def _terminates(stmts: list) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def walk_places(tree: ast.Module, module: str, want: Callable[[ast.AST], bool]) -> Iterator[Place]:
    """Every expression node of `tree` for which `want(node)` holds, with its Place."""

    def expr(node, chain, cls, qual, conds):
        stack = [(node, conds)]
        while stack:
            current, current_conds = stack.pop()
            if isinstance(current, (ast.Lambda,)):
                continue
            if want(current):
                yield Place(current, module, chain, cls, qual, tuple(current_conds))
            if isinstance(current, ast.IfExp):
                stack.append((current.test, current_conds))
                stack.append((current.body, current_conds + ((current.test, True),)))
                stack.append((current.orelse, current_conds + ((current.test, False),)))
                continue
            for child in ast.iter_child_nodes(current):
                stack.append((child, current_conds))

    def block(stmts, chain, cls, qual, conds):
        conds = tuple(conds)
        for stmt in stmts:
            yield from statement(stmt, chain, cls, qual, conds)
            if isinstance(stmt, ast.If) and _terminates(stmt.body) and not stmt.orelse:
                conds = conds + ((stmt.test, False),)
            elif isinstance(stmt, ast.If) and stmt.orelse and _terminates(stmt.orelse) and not _terminates(stmt.body):
                conds = conds + ((stmt.test, True),)

    def statement(stmt, chain, cls, qual, conds):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in stmt.decorator_list:
                yield from expr(deco, chain, cls, qual, conds)
            name = f"{qual}.{stmt.name}" if qual else stmt.name
            yield from block(stmt.body, chain + (stmt,), cls, name, ())
            return
        if isinstance(stmt, ast.ClassDef):
            name = f"{qual}.{stmt.name}" if qual else stmt.name
            inner_cls = ClassRef(module, name, stmt, id(stmt))
            yield from block(stmt.body, chain, inner_cls, name, conds)
            return
        if isinstance(stmt, ast.If):
            yield from expr(stmt.test, chain, cls, qual, conds)
            yield from block(stmt.body, chain, cls, qual, conds + ((stmt.test, True),))
            yield from block(stmt.orelse, chain, cls, qual, conds + ((stmt.test, False),))
            return
        if isinstance(stmt, ast.While):
            yield from expr(stmt.test, chain, cls, qual, conds)
            yield from block(stmt.body, chain, cls, qual, conds + ((stmt.test, True),))
            yield from block(stmt.orelse, chain, cls, qual, conds)
            return
        if isinstance(stmt, ast.Try):
            for part in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from block(part, chain, cls, qual, conds)
            for handler in stmt.handlers:
                if handler.type is not None:
                    yield from expr(handler.type, chain, cls, qual, conds)
                yield from block(handler.body, chain, cls, qual, conds)
            return
        if isinstance(stmt, ast.Match):
            yield from expr(stmt.subject, chain, cls, qual, conds)
            for case in stmt.cases:
                yield from block(case.body, chain, cls, qual, conds)
            return
        bodies = []
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                bodies.append(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        yield from expr(item, chain, cls, qual, conds)
            elif isinstance(value, ast.AST):
                yield from expr(value, chain, cls, qual, conds)
        for body in bodies:
            yield from block(body, chain, cls, qual, conds)

    yield from block(tree.body, (), None, None, ())


def locate(tree: ast.Module, module: str, line: int, col: int) -> Place | None:
    """The expression starting at line:col (a gate's test), with its Place."""
    for place in walk_places(
        tree, module, lambda n: isinstance(n, ast.expr) and n.lineno == line and n.col_offset == col
    ):
        return place
    return None
