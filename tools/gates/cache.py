"""The box tool's results kept on the box, by what they are computed from.

A gate scan reads every .py file of an engine tree (thousands for SGLang) and takes half a minute or
more; an investigation asks for the same scan each time it runs on the same box. Its result is a
function of the tree's files, the scanner's own source, the Python that runs it, the installed
package's version and the tool's arguments, and nothing else (the scan imports nothing from the
tree and reads no environment: ``--env`` values come as arguments). The key is a digest of all of
them, so a changed file, scanner or argument is a miss, and a hit is the JSON a scan would print.

The cache lives in ``$PERF_INVESTIGATOR_CACHE/gates`` (default ``$XDG_CACHE_HOME/perf-investigator``,
else ``~/.cache/perf-investigator``); ``python -m tools.gates --no-cache`` always scans. Entries are
written whole (a temporary file renamed into place), so parallel scans of one key never leave a
torn entry; one that does not parse is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

CACHE_ENV = "PERF_INVESTIGATOR_CACHE"
# The packages the scan's code lives in: a change to either is a new key.
_TOOL_DIRS = (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1] / "pyeval")


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or (
        os.path.join(os.environ["XDG_CACHE_HOME"], "perf-investigator") if os.environ.get("XDG_CACHE_HOME")
        else os.path.join(os.path.expanduser("~"), ".cache", "perf-investigator"))
    return Path(root) / "gates"


def _tree_digest(root: Path, digest: "hashlib._Hash") -> int:
    """Every .py file under ``root`` (a superset of what the scan reads: test directories too), by path and content."""
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as handle:
                    data = handle.read()
                digest.update(os.path.relpath(path, root).encode() + b"\0" + hashlib.sha256(data).digest())
                count += 1
    return count


def key(root: Path, inputs: dict[str, Any], engine: dict[str, Any]) -> str:
    """The digest of everything a scan's output is computed from: ``inputs`` (the tool's arguments),
    ``engine`` (the installed package's name and version, which the output reports), the tree, the
    scanner's source and the Python version."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"inputs": inputs, "engine": engine, "python": sys.version, "root": str(root)},
                             sort_keys=True).encode())
    _tree_digest(root, digest)
    for tool_dir in _TOOL_DIRS:
        digest.update(b"\0tool\0")
        _tree_digest(tool_dir, digest)
    return digest.hexdigest()


def get(cache_key: str) -> dict[str, Any] | None:
    path = cache_dir() / f"{cache_key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def put(cache_key: str, value: dict[str, Any]) -> None:
    """Keep ``value`` under ``cache_key``; a cache that cannot be written is no error (the result stands)."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            json.dump(value, handle, sort_keys=True, allow_nan=False)
        os.replace(tmp, directory / f"{cache_key}.json")
    except OSError as exc:
        print(f"gates: the result was not cached ({type(exc).__name__}: {exc})", file=sys.stderr)
