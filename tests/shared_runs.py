"""The investigations a test session shares (conftest.py's ``dsv4_run``, ``other_run``, ``sglang_run``,
``tp2_run``): each runs once per session, in a directory every pytest-xdist worker sees, under a file
lock; whoever asks first runs it (a worker's fixture, or the builder started in the background as the
session begins, ``python tests/shared_runs.py DIR NAME``) and the others wait for it and take its run.
A run a test only reads; tests that change one work on copies. A run that failed fails every test that
asks for it, with its stderr, and is not tried again.

Starting them in the background when the session begins keeps both cores of a 2-core machine busy: the
investigations run beside the unit tests instead of each worker stopping at the first test that needs one.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / "tests" / "data" / "targets"

# name -> (fixture, investigate's arguments, timeout in seconds)
RUNS: dict[str, tuple[str, list[str], int]] = {
    "dsv4": ("dsv4_run", ["dsv4-flash", "--decide", "auto"], 1800),
    "other": ("other_run", [str(TARGETS / "other-shapes.yaml"), "--decide", "stop"], 1800),
    "sglang": ("sglang_run", ["dsv4-flash-sglang", "--stand-in", "--decide", "auto"], 3600),
    "tp2": ("tp2_run", ["dsv4-flash-tp2", "--decide", "stop"], 1800),
}
# Scheduling priority (nice) of each run's processes. The SGLang run's tests hold its lever sweep to the stand-in's
# planted effects (host sleeps of 15 and 22.5 ms a token against a step of some 60 ms): the suite's own heavier
# work beside it (the other worker, these builders) runs at a lower priority than that sweep, so that the sweep's
# rounds see the same machine. The others' tests read no timing as a fact (their timings are masked or checked
# only for consistency with themselves), so they give way. Negative values need root; elsewhere nice says
# so and runs the command at its own priority.
NICE = {"dsv4": 5, "other": 5, "tp2": 5, "sglang": -5}
# Started in the background as the session begins. Not the SGLang run: its tests and the adapter's timed sweeps
# run on one worker (tests/conftest.py GROUPS), so that no two timed sweeps of the suite share the machine.
BACKGROUND = ("dsv4", "other", "tp2")


def _only_run(runs: Path) -> Path:
    found = [p for p in runs.iterdir() if (p / "log.jsonl").exists()]
    if len(found) != 1:
        raise AssertionError(f"expected one run in {runs}, found {found}")
    return found[0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _investigate(argv: list[str], runs: Path, timeout: int, watch: int | None, nice: int) -> dict:
    """The investigation as a process group of its own at priority ``nice``; stopped (and nothing recorded:
    None) when the process ``watch`` (the test session that asked for it) is gone."""
    cpu0, wall0 = _children_cpu(), time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-m", "agent", "investigate", *argv,
                                 "--runs-dir", str(runs)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err, text=True, start_new_session=True)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if (watch is not None and not _alive(watch)) or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if watch is not None and not _alive(watch):
                    return None
                err.seek(0)
                return {"rc": None, "stderr": f"timed out after {timeout} s: {err.read()[-3000:]}", "run": None}
            time.sleep(0.2)
        err.seek(0)
        stderr = err.read()[-3000:]
    # What the run cost (the suite's time is the machine's cores: tests/suite_cpu.py reads it beside the tests')
    cost = {"cpu_s": round(_children_cpu() - cpu0, 1), "wall_s": round(time.monotonic() - wall0, 1)}
    try:
        return {"rc": proc.returncode, "stderr": stderr, "run": str(_only_run(runs)) if proc.returncode == 0 else None,
                **cost}
    except AssertionError as exc:
        return {"rc": None, "stderr": f"{exc}: {stderr}", "run": None, **cost}


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for children (and theirs), user and system."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def get(shared: Path, name: str, watch: int | None = None) -> dict | None:
    """The record of shared run ``name`` ({"rc", "stderr", "run"}), running it first if nobody has.
    None only when ``watch`` went away while it ran."""
    _, argv, timeout = RUNS[name]
    record = shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not record.exists():
            runs = shared / f"runs-{name}"
            shutil.rmtree(runs, ignore_errors=True)  # what a builder stopped midway left
            runs.mkdir()
            outcome = _investigate(argv, runs, timeout, watch, NICE[name])
            if outcome is None:
                return None
            # a test's fixture that built it counts its CPU in that test's too (tests/conftest.py): said, not summed twice
            outcome["built_by"] = "builder" if watch is not None else "test"
            tmp = record.with_name(record.name + ".tmp")
            tmp.write_text(json.dumps(outcome))
            os.replace(tmp, record)
        return json.loads(record.read_text())


# The builders started in the background, held so that they are never reaped while the session runs: a child
# reaped is added to this process's RUSAGE_CHILDREN, and a Popen dropped is reaped by the next Popen anywhere in
# the process, which put a whole investigation's CPU into whichever test started a process next (tests/conftest.py
# logs each test's CPU; the runs' own CPU is logged apart, as "shared").
_BUILDERS: list[subprocess.Popen] = []


def start_in_background(shared: Path, names: list[str], watch: int) -> None:
    """A builder process for each run not yet recorded, stopped with its investigation when the process
    ``watch`` is gone; a builder that finds the run taken waits for it and exits."""
    for name in names:
        if not (shared / f"{name}.json").exists():
            with open(shared / f"{name}.builder.log", "ab") as log:
                _BUILDERS.append(subprocess.Popen([sys.executable, str(Path(__file__)), str(shared), name, str(watch)],
                                                  cwd=ROOT, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                                  start_new_session=True))


if __name__ == "__main__":
    get(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
