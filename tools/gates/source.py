"""Where the engine source lives when none is named: the installed sglang package."""

from __future__ import annotations

import importlib.util
from pathlib import Path


class SourceMissing(RuntimeError):
    """No source tree given and no installed sglang package found."""


def default_source(package: str = "sglang") -> Path:
    """Directory of the installed `package`, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SourceMissing(f"{package} is not installed; pass --source DIR (pip install --no-deps {package} brings its source)")
    return Path(list(spec.submodule_search_locations)[0])
