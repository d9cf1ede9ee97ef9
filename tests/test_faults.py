"""The fault battery (issue 11): kill -9 at every kind of step boundary and inside a tool call, a tool
that hangs, a box-side process that crashes or runs out of memory, a truncated or corrupt trace, and
a disk that fills while the journal is written.

Kills land where agent.runlog.fault_point puts them (PERF_INVESTIGATOR_FAULT names one point a
process); every other fault is real: real subprocesses, real files, a real full tmpfs."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import git
import pytest

from agent import redact, runner
from agent.box.catalog import CATALOG, run_tool
from agent.box.local import LocalBox
from agent.config import Target
from agent.progress import SilentProgress
from agent.rundir import RunDir
from agent.runlog import LOG_NAME, JournalWriteError, RunLog, read_events
from agent.session.live import LiveSession
from agent.steps.grid import read_grid
from conftest import DATA, ROOT, agent, agent_here, events, findings
from test_secrets import PROCESS_SECRET, TARGET_SECRET, _everything_in, _planted_target
from tools import trace

TARGET = DATA / "targets" / "other-shapes.yaml"


# -- SIGKILL at each boundary, then --resume --------------------------------------------------------------

# One point of each kind, in the order a run meets them; each one stops one process (the first
# invocation, then each resume). Chosen so that what a kill makes the run redo is cheap. A "fault" point
# SIGKILLs the agent where agent.runlog.fault_point names it; "killpg" kills the agent's whole process
# group (the agent and the engine it runs) with -9 while the lever sweep runs, as kill -9 from a shell
# would; "await" resumes without a terminal: no command line of the run gave --decide, so the run stops at
# the decision (exit 3). One resume gives --decide, as a user answers once, and is killed before the answer
# is taken (its first commit sync: the findings up to the question); the ones after it give none and must
# keep it (issue 31: a resume dropped the run's --decide and stopped at the question again).
AT_DECISION = "branch:at-decision"
BATTERY = [
    ("fault", "step_start:survey", []),        # a step begun, nothing done
    ("fault", "tool:box.survey", []),          # inside a tool call: it ran, its result not journaled
    ("fault", "checkpoint:survey_box", []),    # the step checkpointed, its commit not made
    ("killpg", "levers", []),                  # mid-sweep: its call journaled, its result not; the engine dies too
    ("fault", "branch:2", []),                 # inside the commit sync: objects written, the branch not moved
    ("fault", "finding:ceiling", []),          # a finding journaled, not checkpointed: the step is redone
    ("fault", "step_end:options", []),         # the step's end journaled, not checkpointed: redone
    ("await", None, []),                       # no terminal, no --decide ever: the run waits, it does not guess
    ("fault", AT_DECISION, ["--decide", "stop"]),  # the answer given, the resume killed before it is taken
    ("fault", "step_start:report", []),        # the question answered by the --decide the run keeps
    ("fault", "run_end", []),                  # run_end journaled, its final commit not made
]


def _sound(run: Path) -> None:
    status = subprocess.run(["git", "status", "--porcelain"], cwd=run, capture_output=True, text=True)
    assert status.returncode == 0 and status.stdout == "" and not status.stderr, status.stdout + status.stderr
    assert subprocess.run(["git", "fsck", "--strict"], cwd=run, capture_output=True).returncode == 0
    assert git.Repo(run).head.commit.tree[LOG_NAME].data_stream.read() == (run / LOG_NAME).read_bytes()


def _status(runs: Path) -> str:
    return json.loads(agent_here("runs", "--runs-dir", runs, "--json").stdout)[0]["status"]


def _kill_mid_levers(argv: list, run: Path, env: dict, said: Path) -> str:
    """The run killed with its whole process group while its lever sweep runs; what it printed."""
    with open(said, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "agent", *map(str, argv)], cwd=ROOT, start_new_session=True,
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})
    deadline = time.monotonic() + 600
    seen = len(events(run))
    while time.monotonic() < deadline and proc.poll() is None:
        if any(e["kind"] == "tool_call" and e["step"] == "levers" for e in events(run)[seen:]):
            time.sleep(1.0)  # the sweep is one engine call: killed while it runs
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"the resumed run never reached the lever sweep (exit {proc.poll()})")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return said.read_text()


@pytest.mark.slow
def test_kill_9_at_every_boundary_then_resume_loses_and_duplicates_nothing(other_run, tmp_path):
    """The battery above, on other-shapes with tests/test_secrets.py's planted secrets (one in the target's
    environment and pasted into a lever's note, one in the process environment pasted into the description):
    besides losing and duplicating nothing, the run, killed and resumed at every boundary, leaks neither secret
    anywhere (its files, its whole git history, what each process printed, its replay) and still replays byte
    for byte (the whole-run secrets check, tests/test_secrets.py's before, holds on this run)."""
    runs = tmp_path / "runs"
    run = runs / "k"
    target, secret = _planted_target(tmp_path / "secret-shapes.yaml"), {"SERVICE_API_KEY": PROCESS_SECRET}
    said = []  # what every process of the run printed
    for attempt, (how, point, given) in enumerate(BATTERY, start=1):
        argv = (["investigate", target, "--runs-dir", runs, "--run-id", "k"] if attempt == 1 else
                ["investigate", "--resume", "k", "--runs-dir", runs]) + given
        if how == "killpg":
            said.append(_kill_mid_levers(argv, run, secret, tmp_path / "killed.out"))
            assert _status(runs) == "interrupted" and not (run / "PROFILE_FINDINGS.md").exists()
            calls = [e for e in events(run) if e["kind"] in ("tool_call", "tool_result") and e["step"] == "levers"]
            assert [e["kind"] for e in calls] == ["tool_call"]  # killed inside the call
        elif how == "await":
            paused = agent(*argv, env=secret)
            said.append(paused.stdout + paused.stderr)
            assert paused.returncode == 3, paused.stderr[-3000:]  # awaiting a decision (tools/exitcodes.py)
            assert "awaits a decision" in paused.stdout and "auto would choose" in paused.stdout
            assert _status(runs) == "awaiting-decision"
        else:
            point = f"branch:{len(findings(run))}" if point == AT_DECISION else point
            out = agent(*argv, env={"PERF_INVESTIGATOR_FAULT": point, **secret})
            said.append(out.stdout + out.stderr)
            assert out.returncode == -9, (point, out.returncode, out.stdout[-2000:], out.stderr[-3000:])
        assert read_events(run / LOG_NAME)  # whole lines only, every time
    done = agent("investigate", "--resume", "k", "--runs-dir", runs, "--json", env=secret)
    said.append(done.stdout + done.stderr)
    assert done.returncode == 0 and "already finished" in done.stdout, done.stderr[-3000:]
    assert _status(runs) == "done" and (run / "PROFILE_FINDINGS.md").is_file()
    result = json.loads(done.stdout)  # investigate --json: one object, the README's keys
    assert result["status"] == "done" and result["exit_code"] == 0 and result["run"] == str(run)
    assert result["report"] == str(run / "PROFILE_FINDINGS.md") and result["findings"] >= 8

    log = events(run)
    assert max(e["attempt"] for e in log) == len(BATTERY)  # the last resume found it finished: no new attempt
    # the same steps as the uninterrupted run of this target, each once, one commit each, in order
    steps = [f["step"] for f in findings(run)]
    assert steps == [f["step"] for f in findings(other_run)]
    assert [f["index"] for f in findings(run)] == list(range(1, len(steps) + 1))
    commits = list(reversed(list(git.Repo(run).iter_commits("main"))))
    assert [c.message[:2] for c in commits] == [f"{i:02d}" for i in range(1, len(steps) + 1)]
    assert sum(1 for e in log if e["kind"] == "tool_call" and e["tool"] == "box.survey") == 2  # the kill inside it, then once
    sweeps = [e["kind"] for e in log if e["kind"] in ("tool_call", "tool_result") and e.get("tool") == "engine.sweep"]
    assert sweeps == ["tool_call", "tool_call", "tool_result"]  # the killed sweep, then the one that finished; never again
    # answered once, by the --decide a resume gave and the next one kept
    answered = [(e["attempt"], e["choice"], e["source"]) for e in log if e["kind"] == "decision"]
    assert answered == [(BATTERY.index(("fault", "step_start:report", [])) + 1, "stop", "--decide")]
    _sound(run)  # the run_end kill left the final commit to the last resume
    # the report the resumed run wrote is the one an uninterrupted replay of it writes
    outcome = runner.replay(run, tmp_path / "replay")
    assert outcome.exit_code == 0, outcome.message
    assert outcome.status == "done", outcome.message
    assert (tmp_path / "replay" / "PROFILE_FINDINGS.md").read_bytes() == (run / "PROFILE_FINDINGS.md").read_bytes()
    # no planted secret anywhere: the run, its history, what it printed, its replay
    everything = _everything_in(run)
    assert b"PROFILE_FINDINGS.md" in everything and len(everything) > 100_000  # the grep saw the run
    assert TARGET_SECRET.encode() not in everything
    assert PROCESS_SECRET.encode() not in everything
    assert redact.PLACEHOLDER.encode() in (run / "log.jsonl").read_bytes()
    assert not [text for text in said if PROCESS_SECRET in text or TARGET_SECRET in text]
    assert TARGET_SECRET.encode() not in _everything_in(tmp_path / "replay")


def test_a_held_fault_point_writes_its_pid_and_fails_when_nothing_signals_it(tmp_path, monkeypatch):
    """The hold mode the Ctrl-C test stops a run with (agent.runlog.fault_point): the pid is written whole,
    other points pass, and a hold nobody ends is an error, not a hang."""
    from agent import runlog

    held = tmp_path / "held"
    monkeypatch.setenv(runlog.FAULT_ENV, "hold:tool:box.survey")
    monkeypatch.setenv(runlog.HELD_ENV, str(held))
    monkeypatch.setattr(runlog, "HOLD_S", 0.2)
    runlog.fault_point("tool:engine.sweep")  # not the point named: passes
    assert not held.exists()
    with pytest.raises(RuntimeError, match="held 0 s and nothing signalled"):
        runlog.fault_point("tool:box.survey")
    assert held.read_text() == f"{os.getpid()}\n"


# -- a tool that hangs, a tool that crashes ----------------------------------------------------------------


def _grid_session(other_run: Path, tmp_path: Path) -> tuple[dict, LiveSession]:
    """The grid step's input state, taken from a real run, and a live session on a new run."""
    log = read_events(other_run / LOG_NAME)
    state = next(e for e in log if e["kind"] == "initial_state")["state"]
    latest = {e["step"]: e["finding"] for e in log if e["kind"] == "finding"}
    state = {**state, "findings": [latest["survey"], latest["levers"], latest["profile"]]}
    run = RunDir.create(tmp_path / "runs", "grid")
    return state, LiveSession(run, RunLog.create(run.log_path), LocalBox(), SilentProgress())


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status  # killed, not yet reaped by its new parent


HANG = ("import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "print('child', child.pid, flush=True)\n"
        "sys.stderr.write('waiting for the source lock\\n'); sys.stderr.flush()\n"
        "time.sleep(300)\n")


def _grid_runs(monkeypatch, script: str) -> None:
    """kernel.grid, as the catalog runs it, replaced by ``script`` with a 1 s timeout."""
    monkeypatch.setitem(CATALOG, "kernel.grid", replace(CATALOG["kernel.grid"], command=lambda py, a: [py, "-c", script],
                                                        timeout_s=lambda a: 1.0))


def test_a_hanging_tool_times_out_and_its_process_group_is_killed(monkeypatch):
    _grid_runs(monkeypatch, HANG)
    started = time.monotonic()
    record, raw = run_tool(LocalBox(), "kernel.grid", {"kernel": "k", "sms": 1})
    raw.cleanup()
    assert time.monotonic() - started < 15
    assert record["ok"] is False and record["timed_out"] is True
    assert record["error"] == ("timed out after 1 s (its process group was killed); "
                               "stderr ends: waiting for the source lock")
    grandchild = int(record["stdout_tail"].split()[1])
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), "the tool's child outlived the timeout"


def test_a_tool_dies_with_the_agent_that_was_running_it(tmp_path):
    # kill -9 of the agent alone (its tool runs in a session of its own, out of reach of the agent's
    # process group): the tool must not go on measuring beside the run that resumes
    pidfile = tmp_path / "tool.pid"
    tool = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              "from agent.box.local import LocalBox\n"
              f"LocalBox().run([sys.executable, '-c', {tool!r}], timeout_s=600)\n")
    agent_proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    tool_pid = int(pidfile.read_text())
    os.kill(agent_proc.pid, 9)
    agent_proc.wait()
    deadline = time.monotonic() + 5
    while not _gone(tool_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = _gone(tool_pid)
    if not gone:
        os.kill(tool_pid, 9)
    assert gone, "the tool outlived the agent that ran it"


@pytest.mark.parametrize("number, name", [(9, "SIGKILL"), (11, "SIGSEGV"), (6, "SIGABRT")])
def test_a_tool_killed_by_a_signal_reads_as_that_signal(number, name):
    script = f"import os, sys; sys.stderr.write('last words\\n'); sys.stderr.flush(); os.kill(os.getpid(), {number})"
    result = LocalBox().run([sys.executable, "-c", script], timeout_s=60)
    assert result.rc == -number and not result.timed_out and result.stderr.endswith("last words\n")


def test_a_tool_whose_child_keeps_its_pipes_open_does_not_hang_the_run(monkeypatch):
    # the child leaves the process group (its own session) and holds stdout: the kill cannot reach it
    escape = HANG.replace("subprocess.Popen(['sleep', '300'])", "subprocess.Popen(['sleep', '30'], start_new_session=True)")
    _grid_runs(monkeypatch, escape)
    started = time.monotonic()
    record, raw = run_tool(LocalBox(), "kernel.grid", {"kernel": "k", "sms": 1})
    raw.cleanup()
    assert record["timed_out"] and time.monotonic() - started < 20
    os.kill(int(record["stdout_tail"].split()[1]), 9)


@pytest.mark.slow
def test_a_hanging_tool_is_recorded_in_the_finding(other_run, tmp_path, monkeypatch):
    _grid_runs(monkeypatch, HANG)
    state, session = _grid_session(other_run, tmp_path)
    finding = read_grid(state, session, Target.model_validate(state["target"]))
    assert "failed" in finding.labels and "could not be read" in finding.headline
    assert all("timed out after 1 s (its process group was killed)" in f for f in finding.data["failures"])
    results = [e for e in session.log.events() if e["kind"] == "tool_result"]
    assert results and all(r["timed_out"] and not r["ok"] for r in results)
    assert set(finding.evidence) >= {r["seq"] for r in results}


CRASH = ("import os, sys\n"
         "sys.stderr.write('allocating the cache\\ntorch.OutOfMemoryError: out of memory\\n'); sys.stderr.flush()\n"
         "os.kill(os.getpid(), 9)\n")


@pytest.mark.slow
def test_a_crashed_box_process_is_a_failed_measurement_with_its_stderr_and_the_rest_goes_on(other_run, tmp_path,
                                                                                            monkeypatch):
    spec = CATALOG["kernel.grid"]
    crashed = []

    def command(py, args):
        if not crashed:  # the first point's process dies as the OOM killer would kill it
            crashed.append(args)
            return [py, "-c", CRASH]
        return spec.command(py, args)

    monkeypatch.setitem(CATALOG, "kernel.grid", replace(spec, command=command))
    state, session = _grid_session(other_run, tmp_path)
    finding = read_grid(state, session, Target.model_validate(state["target"]))
    results = [e for e in session.log.events() if e["kind"] == "tool_result"]
    assert len(results) >= 2 and not results[0]["ok"] and all(r["ok"] for r in results[1:])
    assert results[0]["rc"] == -9 and "torch.OutOfMemoryError" in results[0]["stderr_tail"]
    [failure] = finding.data["failures"]
    assert "killed by SIGKILL (out of memory? the OOM killer sends it); stderr ends: torch.OutOfMemoryError" in failure
    assert "failed" in finding.labels and finding.tables  # the other points were read and tabled


# Planted on the box's PYTHONPATH: the Nth measurement of the engine process raises MemoryError, as
# an allocation the box cannot serve would (the process itself lives on, as after a CUDA OOM).
OOM_HOOK = '''import os
if os.environ.get("PLANT_OOM_ON_CALL"):
    from tools.engines.reference import bench
    real, calls = bench.measure, []
    def measure(*args, **kwargs):
        calls.append(1)
        if len(calls) == int(os.environ["PLANT_OOM_ON_CALL"]):
            raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (planted)")
        return real(*args, **kwargs)
    bench.measure = measure
'''


@pytest.mark.slow
def test_a_run_that_runs_out_of_memory_in_the_sweep_fails_alone_and_the_sweep_goes_on(other_run, tmp_path,
                                                                                       monkeypatch):
    from agent.steps.levers import sweep_levers

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(OOM_HOOK)
    log = read_events(other_run / LOG_NAME)
    runs = next(e for e in log if e["kind"] == "tool_call" and e["tool"] == "engine.sweep")["args"]["spec"]["runs"]
    monkeypatch.setenv("PYTHONPATH", str(hook))
    monkeypatch.setenv("PLANT_OOM_ON_CALL", str(len(runs)))  # the last run: a lever's, in the last round
    state = next(e for e in log if e["kind"] == "initial_state")["state"]
    state = {**state, "findings": [next(e["finding"] for e in log if e["kind"] == "finding" and e["step"] == "survey")]}
    run = RunDir.create(tmp_path / "runs", "oom")
    session = LiveSession(run, RunLog.create(run.log_path), LocalBox(), SilentProgress())
    finding = sweep_levers(state, session, Target.model_validate(state["target"]))
    [result] = [e for e in session.log.events() if e["kind"] == "tool_result"]
    assert result["ok"], result["error"]  # one process, still whole
    measured = result["data"]["runs"]
    assert [r["ok"] for r in measured] == [True] * (len(runs) - 1) + [False]
    assert measured[-1]["kind"] == "oom" and "MemoryError: CUDA out of memory" in measured[-1]["error"]
    assert "MemoryError: CUDA out of memory" in result["stderr_tail"]  # the traceback, in the record
    lever = runs[-1]["label"].split("#")[0]
    [row] = [r for r in finding.data["levers"] if r["name"] == lever]
    assert row["failed_runs"] == 1  # counted against the lever, not hidden, not the whole sweep


# -- a truncated or corrupt trace ------------------------------------------------------------------------

TRACE = DATA / "h200-traces" / "dsv4-like-B1-topk512.trace.json.gz"


def _trace_doc() -> dict:
    return json.loads(gzip.open(TRACE).read())


def _write(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _edit_kernels(doc: dict, edit) -> dict:
    events = [edit(e) if e.get("cat") == "kernel" and i % 3 == 0 else e for i, e in enumerate(doc["traceEvents"])]
    return {**doc, "traceEvents": events}


@pytest.mark.parametrize("name, edit, message", [
    ("no-name", lambda e: {k: v for k, v in e.items() if k != "name"}, "has no name"),
    ("no-dur", lambda e: {k: v for k, v in e.items() if k != "dur"}, "lacks a numeric ts/dur"),
    ("no-ts", lambda e: {k: v for k, v in e.items() if k != "ts"}, "lacks a numeric ts/dur"),
    ("text-dur", lambda e: {**e, "dur": "12"}, "lacks a numeric ts/dur"),
    ("negative-dur", lambda e: {**e, "dur": -5.0e6}, "negative or NaN dur"),
])
def test_kernel_events_with_missing_or_bad_fields_are_refused_not_ranked(tmp_path, name, edit, message):
    path = _write(tmp_path, f"{name}.json", _edit_kernels(_trace_doc(), edit))
    with pytest.raises(trace.TraceFormatError, match=message):
        trace.summarize([path])


def test_a_trace_without_kernel_events_ranks_nothing(tmp_path):
    doc = _trace_doc()
    assert trace.dominant(trace.summarize([TRACE]), 0.0) is not None  # the whole trace ranks its kernels
    only_copies = {**doc, "traceEvents": [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]}
    summary = trace.summarize([_write(tmp_path, "no-kernels.json", only_copies)])
    assert summary.merged.kernels  # the copies are still tabled...
    assert trace.dominant(summary, 0.0) is None  # ...but no copy is called the dominant kernel
    assert trace.NO_KERNELS_NOTE in summary.notes


def test_cut_gzip_cut_json_and_an_empty_trace_are_trace_format_errors(tmp_path):
    data = TRACE.read_bytes()
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(data[: len(data) // 2])
    text = gzip.decompress(data)
    cut_json = tmp_path / "cut.json"
    cut_json.write_bytes(text[: len(text) // 2])
    empty = _write(tmp_path, "empty.json", {"traceEvents": []})
    for path in (cut_gz, cut_json, empty):
        with pytest.raises(trace.TraceFormatError):
            trace.summarize([path])


def test_the_trace_cli_reports_a_corrupt_trace_in_one_line(tmp_path):
    path = _write(tmp_path, "no-name.json", _edit_kernels(_trace_doc(), lambda e: {k: v for k, v in e.items() if k != "name"}))
    out = agent("trace", path)
    assert out.returncode != 0 and "has no name" in out.stderr and "Traceback" not in out.stderr, out.stderr


# -- disk full while the journal is written -----------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(where: Path, leave: int = 0) -> None:
    """Fill the file system, then free ``leave`` bytes again."""
    filler = where / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
        except OSError:
            pass
    if leave:
        with open(filler, "r+b") as handle:
            handle.truncate(max(filler.stat().st_size - leave, 0))


def test_a_full_disk_cuts_no_journal_line_in_half(small_disk):
    log = RunLog.create(small_disk / LOG_NAME)
    log.append("run_start", format=2)
    _fill(small_disk, leave=4096)
    with pytest.raises(JournalWriteError, match="No space left on device") as caught:
        for i in range(1000):
            log.append("tool_result", stdout_tail="x" * 700, i=i)
    assert "\n" not in str(caught.value)
    data = (small_disk / LOG_NAME).read_bytes()
    assert data.endswith(b"\n")
    written = read_events(small_disk / LOG_NAME)
    assert [e["seq"] for e in written] == list(range(1, len(written) + 1)) and len(written) > 1
    assert f"line {len(written) + 1}" in str(caught.value)
    os.remove(small_disk / "filler")
    assert log.append("run_end", status="failed")["seq"] == len(written) + 1  # numbering goes on unbroken


class _FillsTheDisk(SilentProgress):
    def __init__(self, where: Path):
        self.where = where

    def step_started(self, step, position=""):
        _fill(self.where)


@pytest.mark.slow
def test_a_run_whose_disk_fills_stops_with_a_clear_error_and_a_whole_journal(small_disk):
    runs = small_disk / "runs"
    outcome = runner.investigate(str(TARGET), runs, LocalBox(), "stop", progress=_FillsTheDisk(small_disk), run_id="full")
    assert outcome.status == "failed" and outcome.exit_code == 1
    assert "the journal cannot be written" in outcome.message and "No space left on device" in outcome.message
    assert "\n" not in outcome.message
    run = runs / "full"
    data = (run / LOG_NAME).read_bytes()
    assert data.endswith(b"\n")
    log = read_events(run / LOG_NAME)  # the disk filled as the survey began: the journal stops inside it
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert any(e["kind"] == "step_start" and e["step"] == "survey" for e in log)
    assert not any(e["kind"] == "step_end" for e in log)
    assert f"holds {len(log)} whole lines" in outcome.message
    assert not (run / "run.lock").exists()
