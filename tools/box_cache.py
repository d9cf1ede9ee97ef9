"""Box tools' results kept on the box, by what they are computed from.

Two results are slow to compute and the same every time an investigation runs on the same box:

- a gate scan (tools/gates) reads every .py file of an engine tree (thousands for SGLang: half a minute
  or more). It is a function of the tree's files, the scanner's own source, the Python that runs it,
  the installed package's version and the tool's arguments, and nothing else (the scan imports nothing
  from the tree and reads no environment: ``--env`` values come as arguments);
- whether SGLang's benchmark client imports as installed or needs the client shim
  (tools/engines/sglang/client.py: two imports of seven seconds each, once a tool process). It is a
  function of the Python, the installed distributions, the sglang tree and the shim.

A key is a digest of all of a result's inputs, so a changed file, package, scanner or argument is a
miss, and a hit is what the computation would return. The cache lives in ``$PERF_INVESTIGATOR_CACHE/KIND``
(default ``$XDG_CACHE_HOME/perf-investigator``, else ``~/.cache/perf-investigator``); ``python -m
tools.gates --no-cache`` always scans. Entries are written whole (a temporary file renamed into place),
so parallel tools computing one key never leave a torn entry; one that does not parse is a miss.
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
# The packages the gate scan's code lives in: a change to either is a new key.
GATES_CODE = (Path(__file__).resolve().parent / "gates", Path(__file__).resolve().parent / "pyeval")


def cache_dir(kind: str) -> Path:
    root = os.environ.get(CACHE_ENV) or (
        os.path.join(os.environ["XDG_CACHE_HOME"], "perf-investigator") if os.environ.get("XDG_CACHE_HOME")
        else os.path.join(os.path.expanduser("~"), ".cache", "perf-investigator"))
    return Path(root) / kind


def tree_digest(root: Path, digest: "hashlib._Hash") -> int:
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


def key(inputs: dict[str, Any], trees: list[Path]) -> str:
    """The digest of ``inputs`` (JSON data: arguments, versions, paths), the Python version and every .py
    file of ``trees``."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"inputs": inputs, "python": sys.version, "executable": sys.executable}, sort_keys=True).encode())
    for tree in trees:
        digest.update(b"\0tree\0" + str(tree).encode())
        tree_digest(tree, digest)
    return digest.hexdigest()


def gates_key(root: Path, inputs: dict[str, Any], engine: dict[str, Any]) -> str:
    """A gate scan's key: the tool's ``inputs`` (its arguments), ``engine`` (the installed package's name
    and version, which the output reports), the tree, the scanner's source and the Python."""
    return key({"inputs": inputs, "engine": engine, "root": str(root)}, [root, *GATES_CODE])


def get(kind: str, cache_key: str) -> dict[str, Any] | None:
    path = cache_dir(kind) / f"{cache_key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def put(kind: str, cache_key: str, value: dict[str, Any]) -> None:
    """Keep ``value`` under ``cache_key``; a cache that cannot be written is no error (the result stands)."""
    directory = cache_dir(kind)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            json.dump(value, handle, sort_keys=True, allow_nan=False)
        os.replace(tmp, directory / f"{cache_key}.json")
    except OSError as exc:
        print(f"{kind}: the result was not kept on this box ({type(exc).__name__}: {exc})", file=sys.stderr)
