"""Progress as "step 3/10": each step's line says where it stands among the run's steps, the total
being the path the evidence so far leads through, "+" while the decision may still add steps (issue 31)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from agent import routes
from agent.progress import LiveProgress, PlainProgress
from agent.steps import as_node

from conftest import DATA, ROOT

RUNS = [ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b", DATA / "sglang-pd-standin-run"]


def _findings(run):
    return [e["finding"] for e in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if e["kind"] == "finding"]


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_each_step_is_numbered_among_the_steps_its_run_took(run):
    findings = _findings(run)
    decided = [f["step"] for f in findings].index("options")
    for i, finding in enumerate(findings):
        shown = routes.position({"findings": findings[:i]}, finding["step"])
        number, total = shown.rstrip("+").split("/")
        assert int(number) == finding["index"] == i + 1
        if i <= decided:  # before the decision: the main line's steps, more may come
            assert shown.endswith("+") and int(total) == decided + 2  # the options step, then the report
        else:  # after it the path is known: the total is what the run took
            assert not shown.endswith("+") and int(total) == len(findings), shown


def test_a_goal_met_by_a_lever_goes_straight_to_the_report_and_says_so():
    findings = _findings(RUNS[0])[:2]  # survey, levers: as if the levers met the goal
    assert routes.position({"findings": findings}, "report") == f"{len(findings) + 1}/{len(findings) + 1}"


def test_the_step_lines_carry_the_position():
    lines = io.StringIO()
    progress = PlainProgress(lines)
    progress.step_started("profile", "3/8+")
    progress.tool_started("profile", "engine.bench", "")
    progress.step_finished("profile", "one kernel dominates")
    shown = lines.getvalue().splitlines()
    assert shown[0].endswith("] [3/8+] profile: started") and shown[-1].endswith("] [3/8+] profile: one kernel dominates")
    assert shown[1].endswith("] profile: engine.bench")

    screen = io.StringIO()
    live = LiveProgress(Console(file=screen, force_terminal=True, width=100))
    try:
        live.step_started("grid", "4/8+")
        assert "[4/8+] grid" in str(live.status.__rich__())
    finally:
        live.close()


def test_a_step_node_tells_its_session_its_position():
    class Started(Exception):
        pass

    class Session:
        def begin_step(self, step, position=""):
            raise Started(step, position)

    findings = _findings(RUNS[0])[:5]
    node = as_node("gates", lambda state, session, target: None)
    runtime = SimpleNamespace(context=SimpleNamespace(session=Session(), target=None))
    with pytest.raises(Started) as began:
        node({"findings": findings}, runtime)
    assert began.value.args == ("gates", routes.position({"findings": findings}, "gates"))


# -- the step's own progress: a sweep's runs done --------------------------------------------------

_SWEEP = """
import json, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def line(record):
    with open(out / "sweep_runs.jsonl", "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\\n")
line({"meta": {}})
line({"run": {"label": "baseline#0"}})
deadline = time.monotonic() + 60
while not (out / "seen").exists() and time.monotonic() < deadline:  # until the watch has seen the first run
    time.sleep(0.05)
line({"run": {"label": "baseline#1"}})
print(json.dumps({"ok": (out / "seen").exists()}))
"""


def test_the_local_box_lets_a_watch_see_a_sweep_while_it_runs():
    import sys

    from agent.box.interface import OUT_DIR
    from agent.box.local import LocalBox
    from agent.engine_runs import sweep_watch

    seen = []

    def report(done, total, unit):
        seen.append((done, total, unit))

    watch = sweep_watch("engine.sweep", {"spec": {"runs": [{}, {}]}}, report)

    def looking(out):
        watch(out)
        if seen:
            (out / "seen").touch()  # the command goes on only once its first run was seen

    result = LocalBox().run([sys.executable, "-c", _SWEEP, OUT_DIR], timeout_s=120, watch=looking)
    try:
        assert result.rc == 0 and json.loads(result.stdout) == {"ok": True}, result.stderr
        assert seen[0] == (1, 2, "runs")
    finally:
        result.cleanup()
    assert sweep_watch("engine.bench", {}, report) is None


def test_a_live_session_shows_its_sweeps_runs_done(tmp_path):
    from agent.box.interface import CommandResult
    from agent.rundir import RunDir
    from agent.runlog import RunLog
    from agent.session.live import LiveSession

    class SweepBox:
        """Runs nothing: writes what a sweep process writes as its runs end, watched as LocalBox watches."""
        name, python, watches_output = "fake", "python", True

        def describe(self):
            return {"kind": "fake"}

        def run(self, argv, *, timeout_s, env=None, watch=None):
            out = tmp_path / "out"
            out.mkdir(exist_ok=True)
            with open(out / "sweep_runs.jsonl", "a") as handle:
                handle.write(json.dumps({"meta": {}}) + "\n")
                for label in ("baseline#0", "lever#0"):
                    handle.write(json.dumps({"run": {"label": label}}) + "\n")
                    handle.flush()
                    watch(out)
            return CommandResult(argv, 0, json.dumps({"ok": True, "runs": []}), "", 0.1)

    lines = io.StringIO()
    run = RunDir.create(tmp_path / "runs", "r1")
    session = LiveSession(run, RunLog.create(run.log_path), SweepBox(), PlainProgress(lines))
    session.begin_step("levers", "2/8+")
    spec = {"runs": [{"label": "baseline#0"}, {"label": "lever#0"}]}
    session.call("engine.sweep", {"spec": spec})
    shown = [line.split("] ", 1)[1] for line in lines.getvalue().splitlines()]
    assert "levers: engine.sweep 1/2 runs" in shown and "levers: engine.sweep 2/2 runs" in shown
    # shown, never journaled: a replay serves the same journal and shows no runs done
    assert [e["kind"] for e in map(json.loads, run.log_path.read_text().splitlines())] == ["step_start", "tool_call", "tool_result"]

    screen = io.StringIO()
    live = LiveProgress(Console(file=screen, force_terminal=True, width=120))
    try:
        live.tool_started("levers", "engine.sweep", "2 runs in one process")
        live.tool_progress("levers", "engine.sweep", 1, 2, "runs")
        assert "engine.sweep 2 runs in one process  1/2 runs" in str(live.status.__rich__())
    finally:
        live.close()
