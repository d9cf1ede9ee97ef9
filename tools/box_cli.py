"""What every box-side tool's command line shares: one JSON object on stdout, JSON-safe (NaN and inf
become null); a usage error is BadInput (one line, exit 2), never argparse's own exit."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

# A spec given as ``--spec @env`` is read from this variable, so that it is not on the command line, where every
# user of the box can read it (ps, /proc/PID/cmdline); a process's environment only its user (and root) can. The
# tool removes it from its own environment first, so that the processes it starts do not inherit it.
SPEC_ENV = "PERF_INVESTIGATOR_TOOL_SPEC"
SPEC_HELP = f"JSON object, @path to a JSON file, or @env (the JSON in ${SPEC_ENV}, off the command line)"


class BadInput(Exception):
    """Input the tool refuses: one line, exit 2, with ``kind`` in its JSON result."""

    def __init__(self, message: str, kind: str = "bad_input"):
        super().__init__(message)
        self.kind = kind


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as every box tool
        raise BadInput(f"usage error: {message}")


def clean(value):
    """JSON-safe plain data: NaN/inf become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(clean(obj), sort_keys=True, allow_nan=False) + "\n")
    sys.stdout.flush()


def read_spec(text: str):
    """``--spec``'s JSON: inline, ``@path`` or ``@env`` (SPEC_ENV, then removed); BadInput when unreadable."""
    try:
        if text == "@env":
            if SPEC_ENV not in os.environ:
                raise BadInput(f"bad spec: --spec @env, but {SPEC_ENV} is not set")
            return json.loads(os.environ.pop(SPEC_ENV))
        return json.loads(Path(text[1:]).read_text() if text.startswith("@") else text)
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"bad spec: {exc}") from None
