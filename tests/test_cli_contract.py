"""The CLI's contract with scripts: one exit code per outcome in every subcommand (tools/exitcodes.py,
docs/usage.md "Exit codes and errors"), every error one ``error: ...`` line on stderr, ``--json`` one JSON
object on stdout with the documented keys; the grid and gates commands refuse what they would otherwise
ignore; the decision prompt lists what it accepts and is not drawn over while the user types."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import time

import pexpect
import pytest
from rich.console import Console

from agent import runner
from tools import exitcodes
from agent.cli import decision_prompt, make_ask, valid_choices
from agent.progress import LiveProgress, PlainProgress

from conftest import DATA, ROOT, agent, agent_here, agent_in_process, agent_on_terminal, events, only_run, screen_lines

FORMS = DATA / "kernel-source-launch-forms"
GATES_TREE = DATA / "gates-synthetic" / "fakeengine"
GRID = ["grid", "--source", str(FORMS), "--kernel", "attend_rows", "--launcher", "attend", "--sms", "132"]
SHAPES = ["--shape", "rows=8", "--shape", "N=1000", "--shape", "D=64"]
ENVELOPE = {"command", "status", "exit_code", "message"}


def _one_error_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


# -- exit codes ----------------------------------------------------------------------------------


def test_one_code_per_outcome_and_the_usage_page_lists_them():
    codes = [code for code, _ in exitcodes.TABLE]
    assert codes == [exitcodes.DONE, exitcodes.FAILED, exitcodes.BAD_INPUT, exitcodes.AWAITING_DECISION,
                     exitcodes.INTERRUPTED]
    assert len(set(codes)) == len(codes)
    for status, code in [("done", 0), ("failed", 1), ("diverged", 1), ("bad-input", 2), ("awaiting-decision", 3),
                         ("interrupted", 130), ("something new", 1)]:
        assert exitcodes.for_status(status) == code
        assert runner.Outcome(status, "m", None, 0).exit_code == code  # whatever a caller passes
    usage = (ROOT / "docs" / "usage.md").read_text()
    for code, meaning in exitcodes.TABLE:
        assert f"| {code} | {meaning.split(':')[0]} |" in usage, code


@pytest.mark.parametrize("status, code, stream", [
    ("awaiting-decision", exitcodes.AWAITING_DECISION, "out"),
    ("interrupted", exitcodes.INTERRUPTED, "err"),
    ("failed", exitcodes.FAILED, "err"),
    ("done", exitcodes.DONE, "out"),
])
def test_investigate_exits_with_its_outcomes_code(monkeypatch, capsys, tmp_path, status, code, stream):
    outcome = runner.Outcome(status, f"run x: {status}", tmp_path, 0)  # the CLI's code comes from the status
    monkeypatch.setattr(runner, "investigate", lambda *a, **k: outcome)
    got, out, err = agent_in_process(["investigate", "dsv4-flash", "--runs-dir", str(tmp_path)], capsys)
    assert got == code
    if stream == "out":
        assert f"run x: {status}" in out and err == ""
    else:
        assert _one_error_line(err) == f"error: run x: {status}\n"


def test_ctrl_c_anywhere_exits_interrupted(monkeypatch, capsys, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "replay", interrupted)
    code, out, err = agent_in_process(["replay", str(tmp_path), "--json"], capsys)
    assert code == exitcodes.INTERRUPTED and err == "error: interrupted\n"


def test_ctrl_c_on_a_terminal_keeps_the_step_line_and_ends_in_one_calm_line(tmp_path):
    runs, held = tmp_path / "runs", tmp_path / "held"
    # Under a real pseudo-terminal, so that Ctrl-C is the terminal's: its driver signals the whole foreground
    # process group, git's processes included unless they run apart (a killed `git cat-file` broke the pipe of
    # the commit that records the interrupt). The run holds where the levers step begins (agent.runlog.
    # fault_point's hold mode), after its first commits, until the signal comes: a fast machine cannot finish
    # before it lands, nor a slow one be signalled too early.
    child = agent_on_terminal("investigate", DATA / "targets" / "other-shapes.yaml", "--runs-dir", runs,
                              "--decide", "stop", timeout=120,
                              env={"PERF_INVESTIGATOR_FAULT": "hold:step_start:levers",
                                   "PERF_INVESTIGATOR_FAULT_HELD": str(held)})
    shown = child.logfile_read
    deadline = time.monotonic() + 300
    while not held.exists() and time.monotonic() < deadline and child.isalive():
        child.expect([pexpect.TIMEOUT, pexpect.EOF], timeout=0.1)  # read on: a full terminal would stall the run
    if not held.exists():
        child.close(force=True)
        pytest.fail(f"the run never reached the levers step: {shown.getvalue()[-2000:]}")
    assert int(held.read_text()) == child.pid
    assert events(only_run(runs))[-1]["kind"] == "step_start"  # past the survey's commits, nothing of levers done
    child.sendintr()  # Ctrl-C, as typed
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == exitcodes.INTERRUPTED, shown.getvalue()[-2000:]
    lines = screen_lines(shown.getvalue())
    assert re.fullmatch(r"error: interrupted; resume with: python -m agent investigate --resume \S+( \(.*\))?",
                        lines[-1]), lines[-3:]
    assert lines[-1].endswith("(it keeps the run's --decide stop)")  # what a resume needs no flag for
    assert re.fullmatch(r"\s*[0-9.]+s levers: interrupted", lines[-2]), lines[-3:]  # the step in progress stays
    status = json.loads(agent_here("runs", "--runs-dir", runs, "--json").stdout)
    assert status[0]["status"] == "interrupted"


# -- one error form -------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["investigate", "no-such-target"],
    ["investigate", "dsv4-flash", "--no-such-flag"],
    ["investigate", "dsv4-flash", "--decide", "maybe"],
    ["replay", "/no/such/run"],
    ["report", "/no/such/run"],
    ["validate", "/no/such/target.yaml"],
    ["runs", "--bogus"],
    ["frobnicate"],
    ["grid", "--source", "/no/such/dir", "--kernel", "k", "--sms", "1"],
    ["grid", "--kernel", "k"],
    [*GRID, "--shape", "rows"],
    ["gates", "--source", str(GATES_TREE), "--sm", "121212"],
    ["gates", "--source", "/no/such/dir", "--sm", "120"],
    ["gates", "--sm", "120", "--source", str(GATES_TREE), "--kind", "bogus"],
    ["trace", "/no/such/trace.json"],
    ["trace"],
])
def test_every_error_is_one_error_line_with_the_bad_input_code(argv, capsys, tmp_path):
    code, out, err = agent_in_process(argv + (["--runs-dir", str(tmp_path)] if argv[0] == "investigate" else []), capsys)
    assert code == exitcodes.BAD_INPUT, (code, err)
    _one_error_line(err)
    assert "Traceback" not in err


# -- --json ------------------------------------------------------------------------------------------


def test_validate_json(capsys):
    code, out, err = agent_in_process(["validate", "dsv4-flash", "--json"], capsys)
    assert code == 0 and err == ""
    obj = json.loads(out)
    assert set(obj) == ENVELOPE | {"path", "target", "summary"}
    assert obj["status"] == "done" and obj["exit_code"] == 0 and obj["command"] == "validate"
    assert obj["target"]["deployment"]["sm_count"] == 188
    assert obj["summary"] == {"step_budget_ms": 16.0, "heads_per_rank": 16, "kernel_heads": 64, "levers": 8}


@pytest.mark.parametrize("argv, keys", [
    (["investigate", "no-such-target"], {"run", "report", "findings", "headline", "commits", "result"}),
    (["replay", "/no/such/run"], {"run", "report", "findings", "headline", "commits"}),
    (["report", "/no/such/run"], {"run", "out", "html", "markdown"}),
    (["validate", "/no/such.yaml"], {"path", "target", "summary"}),
])
def test_json_on_bad_input_is_one_object_and_the_error_line(argv, keys, capsys, tmp_path):
    argv = [*argv, "--json"] + (["--runs-dir", str(tmp_path)] if argv[0] == "investigate" else [])
    code, out, err = agent_in_process(argv, capsys)
    assert code == exitcodes.BAD_INPUT
    _one_error_line(err)
    obj = json.loads(out)
    assert set(obj) == ENVELOPE | keys
    assert obj["status"] == "bad-input" and obj["exit_code"] == 2 and obj["command"] == argv[0]
    assert obj["message"] in err


def test_grid_json(capsys):
    code, out, err = agent_in_process([*GRID, *SHAPES, "--no-compile", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["grid"] == [8]


@pytest.mark.slow
def test_report_and_replay_json_on_a_finished_run(dsv4_run, tmp_path, capsys):
    code, out, err = agent_in_process(["report", str(dsv4_run), "--json"], capsys)
    assert code == 0, err
    obj = json.loads(out)
    assert set(obj) == ENVELOPE | {"run", "out", "html", "markdown"}
    assert obj["markdown"] == (dsv4_run / "PROFILE_FINDINGS.md").read_text()
    replayed = agent_here("replay", dsv4_run, "--out", tmp_path / "replay", "--json")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    obj = json.loads(replayed.stdout)
    assert set(obj) == ENVELOPE | {"run", "report", "findings", "headline", "commits"}
    assert obj["status"] == "done" and obj["run"] == str(tmp_path / "replay") and len(obj["commits"]) >= 8


# -- grid and gates refuse what they would ignore -----------------------------------------------


def test_grid_refuses_a_negative_shape(capsys):
    code, out, err = agent_in_process([*GRID, "--shape", "rows=-3", "--shape", "N=1000", "--shape", "D=64", "--no-compile"], capsys)
    assert code == exitcodes.BAD_INPUT and "rows=-3" in _one_error_line(err) and "never negative" in err


def test_grid_refuses_a_symbol_the_kernel_never_names(capsys):
    code, out, err = agent_in_process([*GRID, *SHAPES, "--shape", "B=4", "--no-compile"], capsys)
    assert code == exitcodes.BAD_INPUT
    assert "--shape B:" in _one_error_line(err) and "grid symbols: rows" in err
    ok, out, err = agent_in_process([*GRID, *SHAPES, "--shape", "kv.stride( 0 )=64", "--no-compile"], capsys)
    assert ok == 0, err  # expression text the launcher does contain is a symbol it reads


def test_grid_without_compiling_says_not_compiled_not_error(capsys):
    code, out, err = agent_in_process([*GRID, *SHAPES, "--arch", "sm_90", "--no-compile"], capsys)
    assert code == 0, err
    table = out.split("\n\n")[1]
    assert "error" not in table and table.count("not compiled") == 2
    assert "registers, spills, shared memory, occupancy and waves not measured (--no-compile)" in out
    assert "compile disabled" not in out


def test_gates_kind_is_checked_and_filters(capsys):
    code, out, err = agent_in_process(["gates", "--source", str(GATES_TREE), "--sm", "120", "--kind", "bogus"], capsys)
    assert code == exitcodes.BAD_INPUT and "invalid choice: 'bogus'" in _one_error_line(err)
    code, out, err = agent_in_process(["gates", "--source", str(GATES_TREE), "--sm", "120", "--kind", "env", "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and {r["kind"] for r in rows} == {"env"}


# -- the decision prompt ----------------------------------------------------------------------------


def _question() -> dict:
    def option(name, offered, try_here, why="w"):
        return {"name": name, "offered": offered, "can_try_here": try_here, "upper_x": 2.0, "why": why,
                "try_note": "needs other hardware"}
    return {"options": [option("splitk", True, True), option("move-hardware", True, False),
                        option("accept-ceiling", True, True)], "auto": "splitk", "choices": ["auto", "splitk", "stop"]}


def test_the_prompt_lists_the_answers_it_takes():
    assert list(valid_choices(_question())) == ["auto", "splitk", "stop"]
    assert "chooses splitk" in valid_choices(_question())["auto"]
    text = decision_prompt(_question())
    assert "Answer one of:" in text and "  stop    accept the ceiling and write the report" in text
    question = _question()
    question["options"][0]["can_try_here"] = False  # splitk cannot be tried here: not offered as an answer
    question["auto"] = "stop"
    assert list(valid_choices(question)) == ["auto", "stop"]


def _grows(screen: io.StringIO, within_s: float = 5.0) -> bool:
    start, deadline = len(screen.getvalue()), time.monotonic() + within_s
    while time.monotonic() < deadline:
        if len(screen.getvalue()) > start:
            return True
        time.sleep(0.05)
    return False


def test_the_live_line_is_not_redrawn_while_the_user_types():
    screen = io.StringIO()
    progress = LiveProgress(Console(file=screen, force_terminal=True, width=100))
    try:
        progress.step_started("options")
        assert _grows(screen), "the live line redraws on a terminal"
        seen = []

        def typing(prompt):
            before = len(screen.getvalue())
            time.sleep(1.0)  # four redraws a second would have written here
            seen.append(len(screen.getvalue()) - before)
            return "bogus" if len(seen) == 1 else "stop"

        said = io.StringIO()
        assert make_ask(progress, read=typing, stream=said)(_question()) == "stop"
        assert seen == [0, 0]
        assert "'bogus' is not one of: auto, splitk, stop" in said.getvalue()
        assert _grows(screen), "the live line comes back after the prompt"
    finally:
        progress.close()


def test_without_a_terminal_a_run_cut_short_ends_its_progress_with_the_step_it_was_in():
    # the plain lines' counterpart of the live line left on a terminal (the Ctrl-C test above)
    lines = io.StringIO()
    progress = PlainProgress(lines)
    progress.step_started("survey")
    progress.step_finished("survey", "box: found")
    progress.step_started("levers")
    progress.close("interrupted")
    assert lines.getvalue().splitlines()[-1].endswith("] levers: interrupted")
