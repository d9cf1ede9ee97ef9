"""The box: the machine the investigation measures. Everything that touches it goes through ``Box.run``.

A command is an argument list, never a shell string. An argument equal to ``OUT_DIR`` is replaced by
a fresh scratch directory on the box; the files the command leaves there come back in the result.
A command that cannot start, times out, crashes or is killed for memory is a result, not an error.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

OUT_DIR = "<out-dir>"
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class CommandResult:
    argv: list[str]
    rc: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    error: str | None = None  # the command could not be started
    files: dict[str, Path] = field(default_factory=dict)  # produced files: name in OUT_DIR -> local path
    scratch: Path | None = None

    def cleanup(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


class Box(Protocol):
    """What a step may do with the machine under investigation."""

    name: str
    python: str

    def describe(self) -> dict: ...

    def run(self, argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None) -> CommandResult: ...


class LocalBox:
    """This machine. Box-side tools are run with ``python`` and this repository on PYTHONPATH."""

    name = "local"

    def __init__(self, python: str | None = None, scratch_root: Path | None = None):
        self.python = python or sys.executable
        self.scratch_root = scratch_root

    def describe(self) -> dict:
        return {"kind": "local", "python": self.python}

    def run(self, argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None) -> CommandResult:
        scratch = Path(tempfile.mkdtemp(prefix="box-", dir=self.scratch_root)) if OUT_DIR in argv else None
        argv = [str(scratch) if a == OUT_DIR else a for a in argv]
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
        full_env.update(env or {})
        started = time.perf_counter()
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=REPO_ROOT,
                start_new_session=True, text=True, errors="replace",
            )
        except OSError as exc:
            return CommandResult(argv, None, "", "", 0.0, error=f"cannot start {argv[0]}: {exc.strerror}", scratch=scratch)
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            stdout, stderr = proc.communicate()
        except BaseException:
            _kill_group(proc)
            proc.communicate()
            raise
        duration = time.perf_counter() - started
        files = {}
        if scratch is not None:
            files = {str(p.relative_to(scratch)): p for p in sorted(scratch.rglob("*")) if p.is_file()}
        return CommandResult(argv, proc.returncode, stdout, stderr, duration, timed_out, None, files, scratch)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
