"""Regenerating a run from its journal (agent/regenerate.py): the recorded tool results at their
recorded times, the current code's findings, and a refusal wherever the code asks the box something
the recorded run never did."""

import json
import shutil
from pathlib import Path

import git
import pytest

from agent import regenerate, runner
from tools import exitcodes
from agent.runlog import read_events
from conftest import ROOT

H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"
# The journal the 2026-11-30 H200 example shipped with: its levers step made other calls than the code does now.
OLD_H200 = ROOT / "tests" / "data" / "examples-20261130" / "h200"

_ENVELOPE = {"seq", "ts", "attempt", "step_run", "call", "artifacts"}


def _tool_events(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in _ENVELOPE} for e in events if e["kind"] in ("tool_call", "tool_result")]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("regen") / H200.name
    outcome = regenerate.regenerate(H200, out)
    assert outcome.status == "done", outcome.message
    return out


@pytest.mark.slow
def test_the_recorded_tool_results_come_back_at_their_recorded_times(regenerated):
    source, new = read_events(H200 / "log.jsonl"), read_events(regenerated / "log.jsonl")
    assert _tool_events(new) == _tool_events(source)  # every call, argument and result as recorded
    times = lambda events: [e["ts"] for e in events if e["kind"] in ("tool_call", "tool_result")]  # noqa: E731
    assert times(new) == times(source)
    assert new[0]["ts"] == source[0]["ts"] and new[-1]["ts"] <= source[-1]["ts"]
    start = new[0]
    assert start["regenerated_from"]["run"] == H200.name and "current code" in start["regenerated_from"]["note"]
    # the artifacts are the recorded ones, byte for byte
    for event in (e for e in new if e["kind"] == "tool_result"):
        for ref in event["artifacts"]:
            assert (regenerated / ref["path"]).is_file()


@pytest.mark.slow
def test_the_regenerated_report_ranks_the_next_steps_after_round_2(regenerated):
    """Issue 32: computed from the run's own traces, no call the recorded run did not make."""
    report = (regenerated / "PROFILE_FINDINGS.md").read_text()
    section = report.split("## Next steps the traces support", 1)[1].split("## Where the model failed", 1)[0]
    assert report.index("## 9. After the rewrite") < report.index("## Next steps the traces support")
    assert "### Fusion candidates" in section and "graph replay" in section and "(modelled)" in section
    assert "FP8" in section and "attention-flashinfer" in section
    found = json.loads((regenerated / "findings" / "10-report.json").read_text())["data"]["next_steps"]
    bounds = [s["bound_us"] for s in found["steps"] if s["bound_us"] is not None]
    assert bounds == sorted(bounds, reverse=True)


@pytest.mark.slow
def test_a_regenerated_run_replays_identically(regenerated, tmp_path):
    outcome = runner.replay(regenerated, tmp_path / "replay")
    assert outcome.status == "done", outcome.message


def test_a_call_the_recorded_run_never_made_is_refused(tmp_path):
    """A journal whose levers sweep asked for other runs than the code asks for now (one run's label
    edited): no measurement can be made up, so regeneration stops at that call, naming its line."""
    source = tmp_path / "edited"
    shutil.copytree(H200, source)
    git.Repo.init(source)
    lines = (source / "log.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    sweep = next(e for e in events if e["kind"] == "tool_call" and e["tool"] == "engine.sweep")
    sweep["args"]["spec"]["runs"][1]["label"] = "something-else#warmup"
    lines[sweep["seq"] - 1] = json.dumps(sweep, separators=(",", ":"))
    (source / "log.jsonl").write_text("\n".join(lines) + "\n")
    outcome = regenerate.regenerate(source, tmp_path / "new")
    assert outcome.status == "failed"
    assert f"log line {sweep['seq']}" in outcome.message and "engine.sweep" in outcome.message


def test_a_journal_whose_target_the_code_no_longer_reads_is_refused_in_one_line(tmp_path):
    source = tmp_path / "old"
    shutil.copytree(OLD_H200, source)
    git.Repo.init(source)  # the tests/data copy is the journal alone: a run directory needs its repository
    outcome = regenerate.regenerate(source, tmp_path / "new")
    assert outcome.status == "bad-input" and outcome.exit_code == exitcodes.BAD_INPUT
    assert "unknown key" in outcome.message and "\n" not in outcome.message
    assert not (tmp_path / "new").exists()
