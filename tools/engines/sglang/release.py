"""Read a given SGLang release's source tree instead of the installed one (issue #34: sglang 0.5.17, the release
that runs as a real server on the H200, beside the 0.5.23 the CPU venv has installed).

``activate(tree, site)`` puts the release's tree (a folder holding ``sglang/`` and its dist-info, as
scripts/real_sglang/source.py unpacks it) and, if given, a folder of the release's own pinned dependencies
first on this process's path, before anything of sglang is imported; from then on installed.py's
``package_dir``, ``version``, ``server_parser`` and check.py's environment fields read that release, and
``installed.info()`` names it. One release a process: a process that imported sglang already refuses.

On a CPU box one module-level import of 0.5.17 cannot be met: ``srt/utils/common.py`` imports
``torchvision.io.decode_jpeg`` (and some model configs import ``torchvision.transforms``) at module level, and
the torchvision that matches a CPU torch is not on PyPI (its wheel links the CUDA torch's libraries). Only then
(``import torchvision`` fails here) a placeholder package stands in for it: every name imported from it is a
class that raises when used. Reading the server's arguments and environment never calls them (decode_jpeg
decodes request images; the transforms are vision models' preprocessing); the result's ``shims`` says that
the placeholder was used. On the GPU machine the real torchvision is installed and no placeholder is made.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

SHIMS: list[str] = []


class _Placeholder:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torchvision placeholder (tools/engines/sglang/release.py): torchvision cannot be "
                           "imported on this box, and this name was used")


class _PlaceholderMeta(type):
    def __getattr__(cls, attr):  # e.g. InterpolationMode.BILINEAR at a config module's import
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _PlaceholderMeta(attr, (_Placeholder,), {})


class _TorchvisionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, "placeholder: tools/engines/sglang/release.py")
        module.__path__ = []
        module.__version__ = "0.0+placeholder"

        def __getattr__(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _PlaceholderMeta(attr, (_Placeholder,), {})

        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        pass


def _torchvision_importable() -> bool:
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except Exception:  # the CUDA wheel on a CPU torch fails in its op registrations
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        return False
    return True


def activate(tree: Path, site: Path | None = None) -> str:
    """Read the release in ``tree`` (with its dependencies in ``site``) from now on; returns its version."""
    tree = Path(tree).resolve()
    if not (tree / "sglang").is_dir():
        raise FileNotFoundError(f"{tree} holds no sglang/ package")
    loaded = sys.modules.get("sglang")
    if loaded is not None and Path(list(loaded.__path__)[0]).resolve() != tree / "sglang":
        raise RuntimeError(f"sglang is imported already from {list(loaded.__path__)[0]}: one release a process")
    for folder in [p for p in (site, tree) if p is not None]:  # tree first, then site, then the rest
        path = str(Path(folder).resolve())
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    importlib.invalidate_caches()
    if not _torchvision_importable() and "torchvision" not in SHIMS:
        sys.meta_path.insert(0, _TorchvisionFinder())
        SHIMS.append("torchvision")
    from . import installed

    return installed.version("sglang")
