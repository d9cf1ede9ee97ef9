"""Box tools' results kept on the box, by what they are computed from.

Two results are slow to compute and the same every time an investigation runs on the same box:

- a gate scan (tools/gates) reads every .py file of an engine tree (thousands for SGLang: half a minute
  or more). It is a function of the tree's files, the scanner's own source, the Python that runs it,
  the installed package's version and the tool's arguments, and nothing else (the scan imports nothing
  from the tree and reads no environment: ``--env`` values come as arguments);
- the scan itself (the tree read and interpreted), whatever the sm, kernels and environment its evaluation
  is asked for: runs of other targets on one box evaluate one scan (``scan_key``, kept pickled: the live
  scan state the evaluation walks has no JSON form; ``pickled`` computes a key once while other processes
  asking for it wait, instead of scanning beside it);
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

import fcntl
import hashlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

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


def scan_key(root: Path, cuda: str | None, engine: dict[str, Any]) -> str:
    """The key of a gate scan's live state: the tree, the assumed CUDA version, the installed package, the
    scanner's source and the Python (the sm, kernels and environment are the evaluation's, not the scan's)."""
    return key({"scan": {"cuda": cuda}, "engine": engine, "root": str(root)}, [root, *GATES_CODE])


def pickled(kind: str, cache_key: str, compute: Callable[[], Any], *, persistent_id: Callable[[Any], Any] | None = None,
            persistent_load: Callable[[Any], Any] | None = None) -> tuple[Any, bool]:
    """(value, whether it came from the cache): the pickled value under ``cache_key``, or ``compute()`` kept
    there. One process computes a key at a time (an exclusive lock on the key): the others wait and load its
    result. ``persistent_id``/``persistent_load`` name objects that are not pickled but found again at load
    (module-level singletons). Only this user's own cache directory is read: a pickle is trusted as code is.
    A cache that cannot be used is a computation, said on stderr, never an error."""
    directory = cache_dir(kind)
    path = directory / f"{cache_key}.pickle"

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj):  # noqa: D401 - pickle's hook
            return persistent_id(obj) if persistent_id else None

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid):
            if persistent_load is None:
                raise pickle.UnpicklingError("no persistent_load for a persistent id")
            return persistent_load(pid)

    def load():
        try:
            with open(path, "rb") as handle:
                return _Unpickler(handle).load(), True
        except FileNotFoundError:
            return None, False
        except Exception as exc:  # a torn or stale entry (another scanner's classes) is a miss
            print(f"{kind}: the kept result could not be read ({type(exc).__name__}); computing it", file=sys.stderr)
            return None, False

    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / f"{cache_key}.lock", "w")
    except OSError as exc:
        print(f"{kind}: no cache on this box ({type(exc).__name__}: {exc})", file=sys.stderr)
        return compute(), False
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        value, hit = load()
        if hit:
            return value, True
        value = compute()
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pickle")
            with os.fdopen(fd, "wb") as handle:
                _Pickler(handle, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
            os.replace(tmp, path)
        except (OSError, pickle.PicklingError, RecursionError, TypeError, AttributeError) as exc:
            print(f"{kind}: the result was not kept on this box ({type(exc).__name__}: {exc})", file=sys.stderr)
        return value, False


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
