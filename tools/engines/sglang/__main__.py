"""``python -m tools.engines.sglang check --spec SPEC_JSON|@file|@env``
``python -m tools.engines.sglang sweep --spec SWEEP_JSON|@file|@env --out DIR``
``python -m tools.engines.sglang profile --spec PROFILE_JSON|@file|@env --out DIR``
``python -m tools.engines.sglang surface``
Before the command, ``--release TREE [--release-site SITE]`` reads that SGLang release's source tree (and its
pinned dependencies) instead of the installed one (release.py); the result's ``sglang`` names what was read.

check: server arguments, levers and environment against the installed SGLang (check.py); surface: the release's
server arguments, environment variables, /start_profile fields and trace-name lines (surface.py); sweep: each run on a
server of its own, measured by SGLang's benchmark client (sweep.py); profile: one run, the server's own
/start_profile traces (profile.py). Spec fields: spec.py; result shapes: docs/sglang.md and
/work/notes of issue 15 (i15-H1-report.md).
A spec carries the servers' environment (tokens included), so the agent passes it as ``@env`` (tools/box_cli.py
SPEC_ENV), never on the command line. A launcher's ``{python}`` is this tool's interpreter (the box's Python).
Prints exactly one JSON object on stdout (progress on stderr). Exit 0 ok; 2 bad input (a bad spec, or any
problem ``check`` finds; ``ok: false``); 1 failure (``ok: false`` with ``error`` and ``kind``). No server
outlives the tool, whatever ends it (server.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from tools.box_cli import SPEC_HELP, BadInput, Parser, emit, read_spec

from . import installed
from .spec import SpecError

ENGINE = "sglang"


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m tools.engines.sglang", description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=Path, help="an SGLang release's source tree to read instead of the installed")
    parser.add_argument("--release-site", type=Path, help="that release's pinned dependencies (a pip --target folder)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    check = sub.add_parser("check", help="server args, levers and env against the installed SGLang")
    check.add_argument("--spec", required=True, help=SPEC_HELP)
    sub.add_parser("surface", help="the release's server args, env, /start_profile fields and trace-name lines")
    for name, text in (("sweep", "each run on a server of its own, SGLang's client as the load"),
                       ("profile", "one run profiled by the server's /start_profile")):
        action = sub.add_parser(name, help=text)
        action.add_argument("--spec", required=True, help=SPEC_HELP)
        action.add_argument("--out", required=True, type=Path, help="folder for logs, client JSONL, traces")
    return parser


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.release:
        from . import release

        release.activate(args.release, args.release_site)
    if args.command == "surface":
        from . import surface

        emit(surface.run())
        return 0
    raw = read_spec(args.spec)
    try:
        if args.command == "check":
            from . import check

            if not isinstance(raw, dict):
                raise SpecError("bad spec: a JSON object is expected")
            result = check.run(raw)
            emit(result)
            return 0 if result["ok"] else 2
        from . import server, spec

        server.install_handlers()
        from . import client

        client.warm_up()  # the client's import runs while the first server starts
        if args.command == "sweep":
            from . import disagg, sweep

            # a prefill server, a decode server and the router (disagg.py) when the spec describes them
            result = (disagg.run_sweep(spec.sweep_spec(raw), raw, args.out) if "disaggregation" in raw
                      else sweep.run(spec.sweep_spec(raw), args.out))
        else:
            from . import disagg, profile

            result = (disagg.run_profile(spec.profile_spec(raw), raw, args.out) if "disaggregation" in raw
                      else profile.run(spec.profile_spec(raw), args.out))
    except SpecError as exc:
        raise BadInput(str(exc)) from None
    except installed.NotInstalled as exc:
        raise BadInput(str(exc), "missing_dependency") from None
    emit(result)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except BadInput as exc:
        message = str(exc).replace("\n", " ")
        print(message, file=sys.stderr)
        emit({"ok": False, "engine": ENGINE, "error": message, "kind": exc.kind})
        return 2
    except Exception as exc:  # a crash is a result: report it as JSON, with the traceback on stderr
        traceback.print_exc(file=sys.stderr)
        first_line = (str(exc).strip().splitlines() or [""])[0]
        emit({"ok": False, "engine": ENGINE, "error": f"{type(exc).__name__}: {first_line}", "kind": "error"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
