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
