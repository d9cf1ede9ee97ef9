"""The box: the machine the investigation measures. Everything that touches it goes through ``Box.run``.

A command is an argument list, never a shell string. An argument equal to ``OUT_DIR`` is replaced by
a fresh scratch directory on the box; the files the command leaves there come back in the result.
A command that cannot start, times out, crashes or is killed for memory is a result, not an error.
Every box (this machine: agent.box.local) keeps this contract.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

OUT_DIR = "<out-dir>"


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
