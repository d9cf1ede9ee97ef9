"""The scanned tree as Python modules: discovery and parsing, and the syntactic facts the pre-pass
(prepass.py) and the interpreter read off a node: the names it mentions, assignment targets,
relative imports resolved, import probes.

Nothing in the tree is imported; files are read and parsed with `ast`.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

ENV_PRIMITIVES = frozenset({"getenv", "environ", "putenv"})

# A name that looks like it is about a GPU architecture; used only to pick tests to interpret and to
# decide whether something the scan could not resolve is reported as unresolved (never an answer).
ARCH_NAME = re.compile(
    r"(?i)(?:^|_|\b)(?:sm_?\d{2,3}[a-z]?|sm\d+x|sm1\d\dx?|hopper|blackwell|ampere|ada_?lovelace|volta|turing"
    r"|capabilit|compute_cap|device_sm|cuda_arch)"
)

HELPER_MAX_LINES = 40
TEST_DIR_NAMES = frozenset({"test", "tests", "testing", "unit_tests"})


@functools.lru_cache(maxsize=65536)
def looks_arch(text: str) -> bool:
    return bool(ARCH_NAME.search(text))


@dataclass
class ModuleFile:
    name: str  # dotted module name
    path: Path
    rel: str  # path relative to the source root, as reported
    is_package: bool


def discover(root: Path, include_tests: bool = False) -> list[ModuleFile]:
    """Every .py file under `root` as a module. When `root` is a package (has __init__.py), module
    names start with its directory name, as an `import` would see them. Test directories and test
    files are left out unless `include_tests`."""
    root = root.resolve()
    prefix = [root.name] if (root / "__init__.py").is_file() else []
    found: list[ModuleFile] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d != "__pycache__" and (include_tests or d not in TEST_DIR_NAMES)
        )
        rel_dir = Path(dirpath).relative_to(root)
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            if not include_tests and (
                filename.startswith("test_") or filename.endswith("_test.py") or filename == "conftest.py"
            ):
                continue
            rel = (rel_dir / filename).as_posix()
            parts = prefix + list(rel_dir.parts)
            is_package = filename == "__init__.py"
            if not is_package:
                parts.append(filename[:-3])
            name = ".".join(parts) if parts else "__init__"
            found.append(ModuleFile(name, Path(dirpath) / filename, rel, is_package))
    return found


def parse_file(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return None


def target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in target_names(elt)]
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"):
        return [f"self.{target.attr}"]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    return []


def mentions(node: ast.AST, ifexp_lines: set | None = None) -> tuple[set, set]:
    """Bare names (and `name.attr` pairs, for module attributes) and attribute names in `node`;
    lines of conditional expressions are added to `ifexp_lines` when given."""
    names: set = set()
    attrs: set = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.IfExp) and ifexp_lines is not None:
            ifexp_lines.add(sub.lineno)
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            attrs.add(sub.attr)
            if isinstance(sub.value, ast.Name):
                names.add(f"{sub.value.id}.{sub.attr}")
            elif sub.attr in ("major", "minor") and call_name(sub.value) == "get_device_properties":
                attrs.add("get_device_properties.major")
    return names, attrs


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module named by `from <level dots><target> import ...` inside `module`."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    base = ".".join(parts)
    if target:
        return f"{base}.{target}" if base else target
    return base


def is_property(node: ast.AST) -> bool:
    for deco in getattr(node, "decorator_list", ()):
        name = deco.attr if isinstance(deco, ast.Attribute) else deco.id if isinstance(deco, ast.Name) else None
        if name in ("property", "cached_property"):
            return True
    return False


PROBE_EXCEPTIONS = frozenset(
    {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError", "RuntimeError", "AttributeError"}
)


def probe_modules(node: ast.Try) -> tuple:
    """Modules imported in a try body whose handlers catch an import failure; () if not a probe."""
    catches = False
    for handler in node.handlers:
        if handler.type is None:
            catches = True
            continue
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for t in types:
            name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else ""
            if name in PROBE_EXCEPTIONS:
                catches = True
    if not catches:
        return ()
    modules: list = []

    def collect(stmts):
        for stmt in stmts:
            if isinstance(stmt, ast.Import):
                modules.extend(alias.name for alias in stmt.names)
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                modules.append(stmt.module)
            elif isinstance(stmt, (ast.If, ast.With)):
                collect(stmt.body)
                collect(getattr(stmt, "orelse", []))

    collect(node.body)
    return tuple(dict.fromkeys(modules))

