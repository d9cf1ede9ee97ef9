"""What every box-side tool's command line shares: one JSON object on stdout, JSON-safe (NaN and inf
become null); a usage error is BadInput (one line, exit 2), never argparse's own exit."""

from __future__ import annotations

import argparse
import json
import math
import sys


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
