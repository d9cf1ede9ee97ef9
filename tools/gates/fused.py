"""Where an engine's source defines the fused ops the reference engine's operations stand for, and what selects them.

For each entry of tools/engines/reference/mirrors.py (an operation and the SGLang symbol doing its work),
parse the source tree: the symbol's definition (file:line to its last line, its decorators), and its call
sites in the engine proper (``srt/``, ``kernels/``; tests, benchmarks and other trees left out), each with
the tests of the ``if`` statements around it and the switches those tests read: an environment variable
(``envs.SGLANG_X`` or a quoted ``SGLANG_X``) or a server argument (``server_args.x``, shown ``--x``). Exact
names only: a symbol is found or not; nothing is matched by likeness.

    python -m tools.gates.fused [--source DIR] [--write PATH]

prints (or writes) one JSON object: {"tool": "gates.fused", "engine", "entries": [...]}.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from tools.engines.reference.mirrors import MIRRORS, Mirror

from .assemble import engine_info
from .source import SourceMissing, default_source

CALL_TREES = ("srt/", "kernels/")
SKIPPED = ("/test/", "/tests/", "/benchmark/", "/benchmarks/", "hardware_backend/npu/")
MAX_CALLS = 8
_ENV = re.compile(r"\bSGLANG_[A-Z0-9_]+\b")
_TEXT = 120


def _find_def(tree: ast.Module, qualname: str) -> ast.AST | None:
    body, node = tree.body, None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                     and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return node


def _switches(test: ast.AST, text: str) -> list[str]:
    """The environment variables and server arguments a test reads, by their exact names."""
    found = set(_ENV.findall(text))
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Call):
            base = node.value
            name = base.id if isinstance(base, ast.Name) else getattr(base.func, "id", getattr(base.func, "attr", ""))
            if name in ("server_args", "get_global_server_args"):
                found.add("--" + node.attr.replace("_", "-"))
    return sorted(found)


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _guards(call: ast.AST, parents: dict, source: str) -> list[dict]:
    """The ``if`` tests around a call, innermost first, up to its function: text, branch, switches."""
    out, node = [], call
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            break
        if isinstance(parent, ast.If | ast.IfExp) and node is not parent.test:
            in_body = node in parent.body if isinstance(parent, ast.If) else node is parent.body
            text = " ".join((ast.get_source_segment(source, parent.test) or "").split())
            out.append({"line": parent.lineno, "test": text[:_TEXT], "branch": "if" if in_body else "else",
                        "switches": _switches(parent.test, text)})
        node = parent
    return out


def _enclosing(node: ast.AST, parents: dict) -> str:
    names = []
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
    return ".".join(reversed(names)) or "<module>"


def _imported_as(tree: ast.Module, rel: str, name: str, module: str) -> set[str]:
    """The names a file binds ``name`` of ``module`` to by ``from M import name [as alias]``, M being that
    module or a package above it (which re-exports it); relative imports resolved from the file's place."""
    package = rel[:-3].split("/")[:-1]
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package[: len(package) - (node.level - 1)]
            base = ".".join(["sglang", *anchor, *([base] if base else [])])
        if base and (module == base or module.startswith(base + ".")):
            out.update(a.asname or a.name for a in node.names if a.name == name)
    return out


def call_sites(root: Path, name: str, defined_in: str) -> list[dict]:
    """Each call of the symbol ``name`` defined in ``defined_in`` (a path under the package), in the engine
    proper: by its name in its own file, elsewhere by the name a file imports it from its module as."""
    module = "sglang." + defined_in[:-3].replace("/", ".")
    sites = []
    for path in sorted(p for tree in CALL_TREES for p in (root / tree).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(s in "/" + rel for s in SKIPPED):
            continue
        source = path.read_text(errors="replace")
        if name not in source:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        names = {name} if rel == defined_in else _imported_as(tree, rel, name, module)
        parents = _parents(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                sites.append({"at": f"{rel}:{node.lineno}", "caller": _enclosing(node, parents),
                              "guards": _guards(node, parents, source)})
    return sorted(sites, key=lambda s: (s["at"].split(":")[0], int(s["at"].split(":")[1])))


def locate(root: Path, mirror: Mirror) -> dict:
    """One table entry against the tree: defined (at, end, decorators) or not, its calls and their switches."""
    entry = {**mirror._asdict(), "found": False}
    path = root / mirror.path
    if not path.is_file():
        return {**entry, "why": f"no file {mirror.path}"}
    source = path.read_text(errors="replace")
    node = _find_def(ast.parse(source), mirror.symbol)
    if node is None:
        return {**entry, "why": f"no definition of {mirror.symbol} in {mirror.path}"}
    decorators = [" ".join((ast.get_source_segment(source, d) or "").split())[:_TEXT] for d in node.decorator_list]
    calls = call_sites(root, mirror.symbol, mirror.path) if "." not in mirror.symbol else []
    switches = sorted({s for c in calls for g in c["guards"] for s in g["switches"]})
    return {**entry, "found": True, "at": f"{mirror.path}:{node.lineno}", "end_line": node.end_lineno,
            "decorators": decorators, "calls": calls[:MAX_CALLS], "call_count": len(calls), "switches": switches}


def scan_fused(root: Path) -> dict:
    return {"tool": "gates.fused", "engine": engine_info(root), "entries": [locate(root, m) for m in MIRRORS]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gates.fused", description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, help="the engine's package directory (default: the installed sglang)")
    parser.add_argument("--write", type=Path, help="write the JSON here instead of printing it")
    args = parser.parse_args(argv)
    try:
        root = args.source or default_source()
    except SourceMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    text = json.dumps(scan_fused(root), indent=1, sort_keys=True) + "\n"
    if args.write:
        args.write.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
