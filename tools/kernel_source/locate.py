"""Find a kernel's definition by name in a file or a source tree.

Triton: ``@triton.jit def NAME(...)``, also under ``@triton.autotune`` / ``@triton.heuristics``.
CUDA: ``__global__ ... NAME(`` in .cu/.cuh/.h/.cpp files (located and reported; its launch
expressions are read as text only).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tools.pyeval.syntax import dotted_name

from .source_text import segment

PY_SUFFIXES = (".py",)
CUDA_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".cxx")
_SKIP_DIRS = {".git", "__pycache__", "node_modules", ".tox", ".venv", "build", "dist", ".mypy_cache"}


@dataclass
class KernelParam:
    name: str
    annotation: str | None
    default: str | None
    constexpr: bool
    line: int

    def to_dict(self) -> dict:
        return {"name": self.name, "annotation": self.annotation, "default": self.default, "constexpr": self.constexpr, "line": self.line}


@dataclass
class KernelDef:
    """One kernel definition: where it is and how it is decorated."""

    name: str
    file: Path
    line: int
    kind: str  # "triton" | "cuda"
    decorators: list[str] = field(default_factory=list)
    params: list[KernelParam] = field(default_factory=list)
    source: str = ""
    node: ast.FunctionDef | None = None
    tree: ast.Module | None = None

    @property
    def autotune(self) -> ast.Call | None:
        return next((d for d in self._decorator_calls() if decorator_name(d).endswith("autotune")), None)

    @property
    def heuristics(self) -> list[ast.Call]:
        return [d for d in self._decorator_calls() if decorator_name(d).endswith("heuristics")]

    @property
    def jit(self) -> ast.expr | None:
        if self.node is None:
            return None
        return next((d for d in self.node.decorator_list if _is_jit(d)), None)

    def _decorator_calls(self) -> list[ast.Call]:
        if self.node is None:
            return []
        return [d for d in self.node.decorator_list if isinstance(d, ast.Call)]

    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "file": str(self.file),
            "line": self.line,
            "kind": self.kind,
            "decorators": list(self.decorators),
            "params": [p.to_dict() for p in self.params],
        }


def decorator_name(node: ast.expr) -> str:
    """Dotted name of a decorator (``triton.autotune`` for ``@triton.autotune(...)``)."""
    return dotted_name(node.func if isinstance(node, ast.Call) else node, through_calls=True) or ""


def _is_jit(node: ast.expr) -> bool:
    name = decorator_name(node)
    parts = name.split(".")
    return parts[-1] == "jit" and parts[0] not in ("torch", "numba", "jax")


def is_triton_kernel(node: ast.FunctionDef) -> bool:
    return any(_is_jit(d) for d in node.decorator_list)


def iter_source_files(root: Path, suffixes: tuple[str, ...], must_contain: str | None = None) -> Iterator[tuple[Path, str]]:
    """(path, text) of files under ``root`` (or ``root`` itself) whose text contains ``must_contain``."""
    if root.is_file():
        candidates = [root]
    else:
        candidates = sorted(_walk(root))
    for path in candidates:
        if not path.name.endswith(suffixes):
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if must_contain is None or must_contain in text:
            yield path, text


def _walk(root: Path) -> Iterator[Path]:
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(directory.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir():
                if entry.name not in _SKIP_DIRS and not entry.is_symlink():
                    stack.append(entry)
            else:
                yield entry


def parse(path: Path, text: str) -> ast.Module | None:
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError:
        return None


def _params(node: ast.FunctionDef, text: str) -> list[KernelParam]:
    args = node.args
    positional = list(args.posonlyargs) + list(args.args)
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    out = []
    for arg, default in pairs:
        annotation = segment(text, arg.annotation) if arg.annotation is not None else None
        out.append(
            KernelParam(
                name=arg.arg,
                annotation=annotation,
                default=segment(text, default) if default is not None else None,
                constexpr=annotation is not None and "constexpr" in annotation,
                line=arg.lineno,
            )
        )
    return out


def find_kernel_definitions(source: Path, name: str) -> list[KernelDef]:
    """All definitions of kernel ``name`` under ``source`` (a file or a directory), Triton first."""
    found: list[KernelDef] = []
    for path, text in iter_source_files(source, PY_SUFFIXES, f"def {name}"):
        tree = parse(path, text)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == name and is_triton_kernel(node):
                found.append(
                    KernelDef(
                        name=name,
                        file=path,
                        line=node.lineno,
                        kind="triton",
                        decorators=[segment(text, d) for d in node.decorator_list],
                        params=_params(node, text),
                        source=text,
                        node=node,
                        tree=tree,
                    )
                )
    pattern = re.compile(r"__global__\b[^;{}]*?\b" + re.escape(name) + r"\s*\(", re.S)
    for path, text in iter_source_files(source, CUDA_SUFFIXES, name):
        for match in pattern.finditer(text):
            start = match.end() - 1
            line = text.count("\n", 0, match.start() + match.group(0).rfind(name)) + 1
            found.append(KernelDef(name=name, file=path, line=line, kind="cuda", params=_cuda_params(text, start), source=text))
    return found


def _cuda_params(text: str, open_paren: int) -> list[KernelParam]:
    depth = 0
    for i in range(open_paren, min(len(text), open_paren + 20000)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                inner = text[open_paren + 1:i]
                break
    else:
        return []
    params = []
    line = text.count("\n", 0, open_paren) + 1
    for piece in split_top_level(inner):
        piece = " ".join(piece.split())
        if not piece:
            continue
        match = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*(=.*)?$", piece)
        params.append(KernelParam(name=match.group(1) if match else piece, annotation=piece, default=None, constexpr=False, line=line))
    return params


def split_top_level(text: str, opening: str = "<([", closing: str = ">)]") -> list[str]:
    """Split on the commas outside any bracket pair (C++ template angle brackets by default)."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts
