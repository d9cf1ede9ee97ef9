"""The local box: this machine runs the box-side tools itself, each under a guard that kills the
command's process group when the agent dies, with this repository on PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from agent.box.interface import OUT_DIR, CommandResult

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runs the command as its child in the same process group and waits; when the agent that started it
# dies (kill -9 leaves no handler to run), the guard kills the group: no orphaned engine goes on
# measuring beside the resumed run. Exit status: the command's, a signal re-raised as itself.
_GUARD = '''
import os, signal, subprocess, sys, time
parent = os.getppid()
child = subprocess.Popen(sys.argv[1:])
while child.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    time.sleep(0.2)
if child.returncode < 0:
    try:
        signal.signal(-child.returncode, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL and SIGSTOP keep their default anyway
        pass
    os.kill(os.getpid(), -child.returncode)
sys.exit(child.returncode)
'''


class LocalBox:
    """This machine. Box-side tools are run with ``python`` and this repository on PYTHONPATH."""

    name = "local"
    # A command's output folder can be looked at while it runs (``run``'s ``watch``): here, the folder
    # itself; an SSH box brings over, while the command runs, the files the watch names in ``reads``.
    watches_output = True

    def __init__(self, python: str | None = None, scratch_root: Path | None = None):
        self.python = python or sys.executable
        self.scratch_root = scratch_root

    def describe(self) -> dict:
        return {"kind": "local", "python": self.python}

    def run(self, argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None,
            watch: Callable[[Path], None] | None = None) -> CommandResult:
        """``watch(output folder)`` is called every WATCH_EVERY_S while the command runs (a sweep's
        runs done, for the progress view); what it raises is ignored, it only shows."""
        scratch = Path(tempfile.mkdtemp(prefix="box-", dir=self.scratch_root)) if OUT_DIR in argv else None
        argv = [str(scratch) if a == OUT_DIR else a for a in argv]
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
        full_env.update(env or {})
        started = time.perf_counter()
        program = shutil.which(argv[0], path=full_env.get("PATH")) if argv else None
        if program is None:  # checked here: behind the guard it would be the guard's error, not a result
            return CommandResult(argv, None, "", "", 0.0, error=f"cannot start {argv[0] if argv else '(empty)'}: "
                                 "no such executable", scratch=scratch)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _GUARD, program, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=full_env, cwd=REPO_ROOT, start_new_session=True, text=True, errors="replace",
            )
        except OSError as exc:
            return CommandResult(argv, None, "", "", 0.0, error=f"cannot start {argv[0]}: {exc.strerror}", scratch=scratch)
        timed_out = False
        try:
            stdout, stderr = _wait(proc, timeout_s, scratch, watch)
        except subprocess.TimeoutExpired as exc:
            timed_out = True
            _kill_group(proc)
            stdout, stderr = _drain(proc, exc)
        except BaseException:
            _kill_group(proc)
            _drain(proc, None)
            raise
        duration = time.perf_counter() - started
        files = {}
        if scratch is not None:
            files = {str(p.relative_to(scratch)): p for p in sorted(scratch.rglob("*")) if p.is_file()}
        return CommandResult(argv, proc.returncode, stdout, stderr, duration, timed_out, None, files, scratch)


WATCH_EVERY_S = 0.5


def _wait(proc: subprocess.Popen, timeout_s: float, scratch: Path | None,
          watch: Callable[[Path], None] | None) -> tuple[str, str]:
    """The command's output once it ends, looking at its output folder meanwhile when watched
    (communicate goes on where its timeout left it: nothing read is lost); TimeoutExpired at timeout_s."""
    if watch is None or scratch is None:
        return proc.communicate(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return proc.communicate(timeout=max(0.0, min(WATCH_EVERY_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
            try:
                watch(scratch)
            except Exception:  # a progress view's failure must not end a measurement
                pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the command's whole process group (it was started as a session leader): its children too."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _drain(proc: subprocess.Popen, expired: subprocess.TimeoutExpired | None, grace_s: float = 10.0) -> tuple[str, str]:
    """What a killed command printed. A descendant that left the group can hold its pipes open for
    ever: after ``grace_s`` the pipes are closed and what was read is kept, so a hang never hangs the run."""
    try:
        return proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired as again:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        got = again if again.output or again.stderr else expired
        out = got.output if got is not None else None
        err = got.stderr if got is not None else None
        text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
        return text(out), text(err) + "\n[box: a process the command left behind held its output open; stopped reading]\n"
