"""Box-side gate scan: prints one JSON object.

    python -m tools.gates --source DIR --sm N [--kernels NAME ...] [--cuda X.Y] [--env NAME=VALUE ...] [--no-cache]

{"tool": "gates", "source", "sm", "engine", "scan": {...}, "evaluation": [rows], "kernels": [ties], "cached": bool}
Exit 0 ok, 2 bad input (one line on stderr), 1 failure. The object is kept on the box by what it is
computed from (tools/box_cache.py): a later call with the same tree, scanner and arguments prints
the same object with ``"cached": true`` instead of scanning again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from tools import box_cache
from tools.box_cli import BadInput, read_spec

from .assemble import engine_info
from .builtin_calls import BUILTINS
from .cli import resolve_source
from .fallbacks import fallbacks_for_kernels, tie_to_dict
from .model import SM_VERSIONS, _jsonable
from .scan import scan
from .source import SourceMissing
from .table import evaluate


BRIEF_SCAN_KEYS = ("root", "engine", "sm_versions", "cuda", "files_scanned", "files_interpreted", "unresolved")


# The interpreter's builtins are module-level singletons holding closures: a kept scan names them instead.
_BUILTIN_NAMES = {id(value): name for name, value in BUILTINS.items()}


def scan_kept(root: Path, cuda: str | None, use_cache: bool = True):
    """The scan of ``root``: kept on the box by tree, scanner and CUDA version (tools/box_cache.py), so that
    evaluations for other sm, kernels or environments read one scan; scanned afresh without ``use_cache``."""
    def fresh():
        started = time.perf_counter()
        result = scan(root, cuda=cuda)
        print(f"gates: scanned {result.files_scanned} files in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        return result

    if not use_cache:
        return fresh()
    started = time.perf_counter()
    result, hit = box_cache.pickled(
        "gates-scan", box_cache.scan_key(root, cuda, engine_info(root)), fresh,
        persistent_id=lambda obj: ("builtin", _BUILTIN_NAMES[id(obj)]) if id(obj) in _BUILTIN_NAMES else None,
        persistent_load=lambda pid: BUILTINS[pid[1]])
    if hit:
        print(f"gates: the scan of {result.files_scanned} files kept on this box for this tree and scanner, read in "
              f"{time.perf_counter() - started:.1f}s", file=sys.stderr)
    return result


def build(root: Path, sm: int, kernels: list, cuda: str | None, env: dict | None, brief: bool = False,
          use_cache: bool = True) -> dict:
    """The JSON object the box prints (deterministic for the same tree and arguments). ``brief`` keeps
    of the scan only what the evaluation does not already say (counts instead of the gate, helper,
    constant and probe lists): the investigation journals every result, and the full scan is ~2 MB."""
    result = scan_kept(root, cuda, use_cache)
    rows = evaluate(result, sm, env=env)
    ties = fallbacks_for_kernels(result, sm, kernels) if kernels else []
    return {
        "tool": "gates",
        "source": str(root),
        "sm": sm,
        "env": dict(sorted((env or {}).items())),
        "engine": result.engine,
        "scan": _brief(result.to_dict()) if brief else result.to_dict(),
        "evaluation": _jsonable(rows),
        "kernels": [tie_to_dict(t) for t in ties],
    }


def _brief(scan: dict) -> dict:
    kept = {key: scan[key] for key in BRIEF_SCAN_KEYS if key in scan}
    kept["counts"] = {key: len(scan[key]) for key in ("gates", "helpers", "constants", "import_probes", "env") if key in scan}
    return kept


def parse_env(items: list[str], spec: str | None) -> dict[str, str]:
    """The environment to evaluate with: ``--env NAME=VALUE`` items, then ``--env-spec``'s object (the agent sends
    a target's environment that way, through the tool's environment, so its tokens are on no command line)."""
    env = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--env {item!r} is not NAME=VALUE")
        name, value = item.split("=", 1)
        env[name] = value
    if spec is not None:
        extra = read_spec(spec)
        if not (isinstance(extra, dict) and all(isinstance(v, str) for v in extra.values())):
            raise ValueError("--env-spec is not a JSON object of strings")
        env.update(extra)
    return env


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gates", description="Capability-gate scan of an engine source tree (JSON).")
    parser.add_argument("--source", type=Path, default=None, help="engine source tree (default: the installed sglang package)")
    parser.add_argument("--sm", type=int, required=True, help="compute capability, major*10+minor")
    parser.add_argument("--kernels", nargs="*", default=[], metavar="NAME")
    parser.add_argument("--cuda", default=None, help="torch.version.cuda to assume")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="evaluate with this environment variable set")
    parser.add_argument("--env-spec", default=None, metavar="JSON|@path|@env",
                        help="environment variables to evaluate with, as a JSON object; @env reads it from the "
                             "tool's environment, off the command line (a target's tokens)")
    parser.add_argument("--brief", action="store_true", help="the scan's counts instead of its full lists")
    parser.add_argument("--no-cache", action="store_true", help="scan even when the box holds this result (tools/box_cache.py)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        root = resolve_source(args.source)
        if args.sm not in SM_VERSIONS:
            raise ValueError(f"--sm {args.sm} is not a known compute capability; one of {list(SM_VERSIONS)}")
        env = parse_env(args.env, args.env_spec)
    except (SourceMissing, FileNotFoundError, ValueError, BadInput) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    try:
        inputs = {"sm": args.sm, "kernels": args.kernels, "cuda": args.cuda, "env": dict(sorted(env.items())), "brief": args.brief}
        cache_key = box_cache.gates_key(root, inputs, engine_info(root))
        out = None if args.no_cache else box_cache.get("gates", cache_key)
        cached = out is not None
        if cached:
            print(f"gates: {out['scan']['files_scanned']} files, the result kept on this box for this tree, scanner and "
                  f"arguments ({box_cache.cache_dir('gates')}/{cache_key[:12]}...)", file=sys.stderr)
        else:
            out = build(root, args.sm, args.kernels, args.cuda, env or None, brief=args.brief, use_cache=not args.no_cache)
            box_cache.put("gates", cache_key, out)
    except Exception:
        traceback.print_exc(file=sys.stderr)
        return 1
    json.dump({**out, "cached": cached}, sys.stdout, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
