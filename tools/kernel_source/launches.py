"""Find where a kernel is launched: ``NAME[grid](...)``, ``NAME.fn[grid](...)``, ``NAME.run(..., grid=g)``,
an alias (``k = NAME; k[grid](...)``), and CUDA ``NAME<<<grid, block>>>(...)``."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from .source_text import segment
from .locate import CUDA_SUFFIXES, PY_SUFFIXES, iter_source_files, parse, split_top_level


@dataclass
class LaunchSite:
    """One launch of the kernel and the function (chain) it sits in."""

    file: Path
    line: int
    launcher: str  # qualified function name, "<module>" at top level
    launcher_line: int | None
    kind: str  # "subscript" | "fn" | "run" | "alias" | "cuda"
    grid_text: str
    block_text: str | None = None
    call: ast.Call | None = None
    grid_node: ast.expr | None = None
    functions: list[ast.FunctionDef] = field(default_factory=list)  # outermost first
    tree: ast.Module | None = None
    source: str = ""
    path: list[ast.AST] = field(default_factory=list)  # ancestors of the call, outermost first

    def to_dict(self) -> dict:
        return {
            "file": str(self.file),
            "line": self.line,
            "launcher": self.launcher,
            "launcher_line": self.launcher_line,
            "kind": self.kind,
            "grid_expr": self.grid_text,
            "block_expr": self.block_text,
        }


def _refers_to(node: ast.expr, name: str, aliases: set[str]) -> str | None:
    """How ``node`` names the kernel: "subscript" (the kernel), "fn" (its .fn), "alias", or None."""
    if isinstance(node, ast.Name):
        if node.id == name:
            return "subscript"
        if node.id in aliases:
            return "alias"
        return None
    if isinstance(node, ast.Attribute):
        if node.attr == name:
            return "subscript"
        if node.attr == "fn" and _refers_to(node.value, name, aliases):
            return "fn"
    return None


def _aliases(tree: ast.Module, name: str) -> set[str]:
    """Names bound to the kernel: ``from m import NAME as k``, ``k = NAME``, ``k = NAME if c else OTHER``."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == name and alias.asname:
                    aliases.add(alias.asname)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            candidates = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            if any(_refers_to(c, name, set()) for c in candidates):
                aliases.add(node.targets[0].id)
    aliases.discard(name)
    return aliases


def find_launch_sites(source: Path, name: str) -> list[LaunchSite]:
    """Every launch of kernel ``name`` under ``source`` (file or directory), in file/line order."""
    sites: list[LaunchSite] = []
    for path, text in iter_source_files(source, PY_SUFFIXES, name):
        tree = parse(path, text)
        if tree is None:
            continue
        aliases = _aliases(tree, name)
        _visit(tree, [], name, aliases, path, text, tree, sites)
    pattern = re.compile(re.escape(name) + r"\s*(?:<[^;<>]*(?:<[^;<>]*>[^;<>]*)*>)?\s*<<<(.*?)>>>", re.S)
    for path, text in iter_source_files(source, CUDA_SUFFIXES, name):
        for match in pattern.finditer(text):
            parts = split_top_level(match.group(1), "([{", ")]}")
            line = text.count("\n", 0, match.start()) + 1
            sites.append(
                LaunchSite(
                    file=path,
                    line=line,
                    launcher=_cuda_enclosing_function(text, match.start()),
                    launcher_line=None,
                    kind="cuda",
                    grid_text=parts[0].strip() if parts else "",
                    block_text=parts[1].strip() if len(parts) > 1 else None,
                    source=text,
                )
            )
    return sites


def _visit(node: ast.AST, ancestors: list[ast.AST], name: str, aliases: set[str], path: Path, text: str, tree: ast.Module, sites: list[LaunchSite]) -> None:
    if isinstance(node, ast.Call):
        site = _launch_of(node, name, aliases)
        if site is not None:
            kind, grid = site
            functions = [a for a in ancestors if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))]
            sites.append(
                LaunchSite(
                    file=path,
                    line=node.lineno,
                    launcher=".".join(f.name for f in functions) or "<module>",
                    launcher_line=functions[-1].lineno if functions else None,
                    kind=kind,
                    grid_text=segment(text, grid) if grid is not None else "",
                    call=node,
                    grid_node=grid,
                    functions=functions,
                    tree=tree,
                    source=text,
                    path=list(ancestors) + [node],
                )
            )
    for child in ast.iter_child_nodes(node):
        _visit(child, ancestors + [node], name, aliases, path, text, tree, sites)


def _launch_of(call: ast.Call, name: str, aliases: set[str]) -> tuple[str, ast.expr | None] | None:
    func = call.func
    if isinstance(func, ast.Subscript):
        how = _refers_to(func.value, name, aliases)
        if how:
            return how, func.slice
    if isinstance(func, ast.Attribute) and func.attr in ("run", "warmup"):
        how = _refers_to(func.value, name, aliases)
        if how:
            grid = next((k.value for k in call.keywords if k.arg == "grid"), None)
            return "run", grid
    return None


def _cuda_enclosing_function(text: str, offset: int) -> str:
    """Best-effort name of the C++ function around ``offset`` (the last definition header before it)."""
    header = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?:const\s*)?\{", re.S)
    name = "<unknown>"
    for match in header.finditer(text, 0, offset):
        if match.group(1) not in ("if", "for", "while", "switch", "catch", "return", "sizeof"):
            name = match.group(1)
    return name
