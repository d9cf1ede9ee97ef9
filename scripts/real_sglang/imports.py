"""The third-party modules an SGLang release imports at module level from a set of entry modules, read from its
source with ``ast`` (nothing is imported): what its server needs installed before it can start.

``python -m scripts.real_sglang.imports TREE [MODULE ...]`` prints ``{top-level name: [importer, ...]}`` as JSON
for the tree's ``sglang`` package (the folder that holds it); ``--missing`` instead of TREE reads the ``sglang``
this Python finds and prints the names this Python cannot find (on the GPU machine, after the carry: what is
still missing, all at once, rather than one ImportError a launch). An import counts when it runs on import: at module level, inside
module-level ``if``/``else``/``with`` blocks, but not under ``if TYPE_CHECKING`` nor in a ``try`` whose handlers
catch ImportError/ModuleNotFoundError/Exception (the module copes without it), nor inside a function (lazy: it
runs only when called; the entry list names the modules the launch is known to reach lazily instead). SGLang's
own modules are followed, each package's ``__init__`` too, as Python runs them.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

# What ``python -m sglang.launch_server`` runs for a DeepSeek-V4 model with dummy weights, and SGLang's client:
# the launcher's module-level chain, and the modules its functions import while the server starts (the
# scheduler and detokenizer processes, the model runner, the loader, the model, its attention backend).
ENTRY = ("sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.entrypoints.engine",
         "sglang.srt.managers.scheduler", "sglang.srt.managers.tokenizer_manager",
         "sglang.srt.managers.detokenizer_manager", "sglang.srt.model_executor.model_runner",
         "sglang.srt.model_loader.loader", "sglang.srt.models.deepseek_v4",
         "sglang.srt.layers.attention.deepseek_v4_backend", "sglang.srt.layers.attention.attention_registry",
         "sglang.bench_serving")

# Imported under module-level ``if _is_hip:``/``if _is_npu:``/Apple branches that the walk cannot evaluate: not
# on a CUDA machine (aiter: ROCm; torch_npu, sgl_kernel_npu: Ascend; mlx: Apple; flash_attn_interface: MUSA;
# dequant_k_cache: a ROCm kernel module).
PLATFORM_ONLY = frozenset({"aiter", "torch_npu", "sgl_kernel_npu", "mlx", "flash_attn_interface", "dequant_k_cache",
                           # under ``if get_bool_env_var("SGLANG_USE_MODELSCOPE")`` (hf_transformers/common.py)
                           "modelscope"})

_OPTIONAL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(n, ast.Name) and n.id in _OPTIONAL for n in names):
            return True
    return False


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _module_imports(body: list[ast.stmt]):
    """The Import/ImportFrom nodes of a module body that run on import (see the module docstring)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_imports(node.body)
            yield from _module_imports(node.orelse)
        elif isinstance(node, ast.With):
            yield from _module_imports(node.body)
        elif isinstance(node, ast.Try) and not _catches_import_error(node):
            yield from _module_imports(node.body + node.finalbody)


class Walk:
    def __init__(self, tree: Path, own: str = "sglang"):
        self.tree = Path(tree)
        self.own = own  # the package whose modules are followed
        self.seen: set[str] = set()
        self.external: dict[str, list[str]] = {}

    def path_of(self, module: str) -> Path | None:
        base = self.tree.joinpath(*module.split("."))
        for candidate in (base / "__init__.py", base.with_suffix(".py")):
            if candidate.is_file():
                return candidate
        return None

    def visit(self, module: str) -> None:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # a package's __init__ runs before its submodule
            self._visit_one(".".join(parts[:i]))

    def _visit_one(self, module: str) -> None:
        if module in self.seen:
            return
        self.seen.add(module)
        path = self.path_of(module)
        if path is None:
            return
        is_package = path.name == "__init__.py"
        for node in _module_imports(ast.parse(path.read_text(), str(path)).body):
            for name in self._targets(node, module, is_package):
                self._import(name, module)

    def _targets(self, node, module: str, is_package: bool) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        # ``from pkg import sub``: sub may be a module of SGLang's own, which Python imports only when the
        # package's __init__ does not bind that name itself
        return [base] + [f"{base}.{alias.name}" for alias in node.names
                         if base.split(".")[0] == self.own and self.path_of(f"{base}.{alias.name}")
                         and alias.name not in self.bound(base)]

    def bound(self, package: str) -> set[str]:
        """Names a package's ``__init__`` binds at module level (defs, classes, assignments, imports)."""
        path = self.path_of(package)
        if path is None or path.name != "__init__.py":
            return set()
        names: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    def _import(self, name: str, importer: str) -> None:
        top = name.split(".")[0]
        if top == self.own:
            self.visit(name)
        elif top and top not in sys.stdlib_module_names and top != "__future__":
            self.external.setdefault(top, []).append(importer)


def external_imports(tree: Path, entries=ENTRY, own: str = "sglang") -> dict[str, list[str]]:
    walk = Walk(tree, own)
    for entry in entries:
        walk.visit(entry)
    return {name: sorted(set(importers)) for name, importers in sorted(walk.external.items())}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    if argv[0] == "--missing":
        import importlib.util

        spec = importlib.util.find_spec("sglang")
        if spec is None:
            print(json.dumps({"error": "sglang is not importable here"}))
            return 1
        found = external_imports(Path(list(spec.submodule_search_locations)[0]).parent, argv[1:] or ENTRY)
        missing = {name: found[name] for name in found if name not in PLATFORM_ONLY
                   and importlib.util.find_spec(name) is None}
        print(json.dumps({"sglang": str(spec.origin), "missing": missing}, indent=1))
        return 1 if missing else 0
    print(json.dumps(external_imports(Path(argv[0]), argv[1:] or ENTRY), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
