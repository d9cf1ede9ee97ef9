"""A run's own repository, journal and name hold up (issue 11): git status and fsck pass and the last
commit holds the final journal; a journal cut short neither renders a traceback nor resumes into a
loop; replays say what they replay and whether they diverged; runs are named safely; the journal's
format is recorded and an unknown one is refused in one line.

The whole-run tests share the session's other-shapes run (tests/conftest.py ``other_run``) and work
on copies of it."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import git
import pexpect
import pytest

from agent import runner
from agent.rundir import RunDir, RunDirError, check_run_id, resolve_run
from agent.runlog import FORMAT, LOG_NAME, journal_format, read_events
from conftest import DATA, agent, agent_here, agent_on_terminal, events, findings, screen_lines

TARGET = DATA / "targets" / "other-shapes.yaml"


def _git(run: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=run, capture_output=True, text=True)


def _assert_sound_repository(run: Path) -> None:
    status = _git(run, "status", "--porcelain")
    assert status.returncode == 0 and not status.stderr, status.stderr
    assert status.stdout == "", status.stdout  # nothing modified, nothing untracked (checkpoints are excluded)
    fsck = _git(run, "fsck", "--strict")
    assert fsck.returncode == 0, fsck.stderr
    assert not list((run / ".git").glob("tmp*")), "index files left behind"
    assert git.Repo(run).head.commit.tree[LOG_NAME].data_stream.read() == (run / LOG_NAME).read_bytes()


def _copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("run.lock"))
    return dest


def _cut_before(run: Path, predicate) -> int:
    """Cut the journal just before the first event matching ``predicate``; returns the lines kept."""
    lines = (run / LOG_NAME).read_bytes().split(b"\n")[:-1]
    keep = next(i for i, line in enumerate(lines) if predicate(json.loads(line)))
    (run / LOG_NAME).write_bytes(b"".join(line + b"\n" for line in lines[:keep]))
    return keep


def _one_line(out: subprocess.CompletedProcess, code: int) -> str:
    assert out.returncode == code, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    return out.stderr


# -- defect 1: the run's own repository --------------------------------------------------------------


@pytest.mark.slow
def test_the_runs_repository_is_sound_and_its_last_commit_holds_the_final_journal(other_run):
    _assert_sound_repository(other_run)
    log = events(other_run)
    assert log[-1]["kind"] == "run_end" and log[-1]["status"] == "done"
    commits = list(git.Repo(other_run).iter_commits("main"))
    assert len(commits) == len(findings(other_run))  # still one commit per finding


@pytest.mark.slow
def test_a_replay_reproduces_the_commit_ids_and_its_repository_is_sound(other_run, tmp_path):
    outcome = runner.replay(other_run, tmp_path / "replay")
    assert outcome.exit_code == 0, outcome.message
    assert outcome.details["commits"] == RunDir.open(other_run).history()
    status = _git(tmp_path / "replay", "status", "--porcelain")
    assert status.returncode == 0 and status.stdout == "", status.stdout + status.stderr
    assert _git(tmp_path / "replay", "fsck", "--strict").returncode == 0


# -- defect 2: report of a cut journal ------------------------------------------------------------------


@pytest.mark.slow
def test_report_of_a_cut_journal_is_one_line_saying_what_it_proves(other_run, tmp_path):
    run = _copy(other_run, tmp_path / "cut")
    _cut_before(run, lambda e: e["kind"] == "finding" and e["step"] == "gates")
    err = _one_line(agent("report", run), 2)
    assert "no report finding" in err and "05-ceiling" in err, err
    # cut inside a line: the torn line is not read as an event either
    with open(run / LOG_NAME, "ab") as handle:
        handle.write(b'{"seq": 99, "kind": "fin')
    assert "no report finding" in _one_line(agent_here("report", run), 2)


# -- defect 3: resume of a cut journal --------------------------------------------------------------------


@pytest.mark.slow
def test_resume_of_a_cut_journal_goes_on_from_the_last_step_it_proves(other_run, tmp_path):
    run = _copy(other_run, tmp_path / "runs" / other_run.name)
    steps = [f["step"] for f in findings(other_run)]
    _cut_before(run, lambda e: e["kind"] == "finding" and e["step"] == "options")
    # killed as the redone steps begin: by then nothing the journal does not prove is left as evidence. No
    # resume here gives --decide: the run was started with one, and keeps it (issue 31)
    killed = agent("investigate", "--resume", run, env={"PERF_INVESTIGATOR_FAULT": "step_start:options"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (run / "PROFILE_FINDINGS.md").exists()
    assert [f["step"] for f in findings(run)] == steps[:steps.index("options")]
    rolled = [e for e in events(run) if e["kind"] == "rolled_back"]
    assert rolled and rolled[0]["dropped"] == [f"{i:02d}-{s}" for i, s in enumerate(steps, start=1)
                                               if i > steps.index("options")]
    assert json.loads(agent_here("runs", "--runs-dir", run.parent, "--json").stdout)[0]["status"] == "interrupted"
    # on a terminal, where a run without a --decide of its own would ask
    done = agent_on_terminal("investigate", "--resume", run)
    asked = done.expect([pexpect.EOF, r"decide \["])
    done.close(force=True)
    shown = done.logfile_read.getvalue()
    assert asked == 0 and done.exitstatus == 0, shown[-3000:]
    assert [f["step"] for f in findings(run)] == steps
    decision = [e for e in events(run) if e["kind"] == "decision"][-1]
    assert (decision["choice"], decision["source"]) == ("stop", "--decide")  # the run's own, from its start
    _assert_result_block(run, screen_lines(shown))
    assert [c.message[:2] for c in reversed(list(git.Repo(run).iter_commits("main")))] == \
        [f"{i:02d}" for i in range(1, len(steps) + 1)]
    _assert_sound_repository(run)
    replayed = runner.replay(run, tmp_path / "replay")
    assert replayed.exit_code == 0, replayed.message


def _report_value(run: Path, row: str) -> str:
    """The first bold value of a row of the report's "Goal against measurement" table."""
    line = next(line for line in (run / "PROFILE_FINDINGS.md").read_text().splitlines() if line.startswith(f"| {row}"))
    return re.search(r"\*\*(.+?)\*\*", line).group(1)


def _assert_result_block(run: Path, shown: list[str]) -> None:
    """The run ended with one result block (issue 31), last on screen: the report's own numbers, the
    findings `runs` counts, and "not reached" where the run did not go (it stopped at the ceiling)."""
    titled = [i for i, line in enumerate(shown) if line.startswith("=") and "Investigation Result" in line]
    assert len(titled) == 1 and set(shown[-1]) == {"="}, shown[-20:]
    assert not any("written from" in line for line in shown[titled[0]:]), shown[-20:]  # said once, by the progress
    rows = {label: value.strip() for label, value in (line.split(":", 1) for line in shown[titled[0] + 1:-1])}
    listed = json.loads(agent_here("runs", "--runs-dir", run.parent, "--json").stdout)[0]
    assert rows["Findings"] == str(listed["findings"])
    assert rows["Goal"].startswith(_report_value(run, "goal |"))
    assert rows["Baseline"].startswith(_report_value(run, "baseline tok/s"))
    assert rows["Ceiling"].startswith(_report_value(run, "ceiling ("))
    assert rows["Chosen option"].startswith("accept-ceiling")  # --decide stop
    assert rows["Measured speedup"] == "not reached"  # stopped at the ceiling: no rewrite was measured
    assert rows["Report"] == str(run / "PROFILE_FINDINGS.md")
    # --json carries the block's values beside its documented keys
    obj = json.loads(agent_here("investigate", "--resume", run, "--json").stdout)
    levers = next(f for f in findings(run) if f["step"] == "levers")
    assert obj["findings"] == listed["findings"] == obj["result"]["findings"]
    assert obj["result"]["baseline_tok_s"] == levers["numbers"]["baseline_tok_s"]["value"]
    assert obj["result"]["measured_x"] is None and obj["result"]["chosen_option"] == "accept-ceiling"


# -- defects 4 and 12: replays in `runs` ---------------------------------------------------------------


@pytest.mark.slow
def test_runs_lists_a_replay_as_a_replay_of_its_run_and_a_diverged_one_as_diverged(other_run, tmp_path, monkeypatch):
    import agent.stats as stats

    runs = tmp_path / "runs"
    assert runner.replay(other_run, runs / "same").exit_code == 0
    original = stats.t_quantile
    monkeypatch.setattr(stats, "t_quantile", lambda p, df: 2 * original(p, df))  # moves the levers finding
    diverged = runner.replay(other_run, runs / "moved")
    assert diverged.status == "diverged"
    assert events(runs / "moved")[-1]["status"] == "done"  # the recorded run's journal, copied: not the replay's end
    rows = {row["run"]: row for row in runner.list_runs(runs)}
    assert rows["same"]["status"] == "done" and rows["same"]["replay_of"] == other_run.name
    assert rows["moved"]["status"] == "diverged" and rows["moved"]["replay_of"] == other_run.name
    listed = agent("runs", "--runs-dir", runs)
    line = next(line for line in listed.stdout.splitlines() if f"(replay of {other_run.name})" in line
                and "moved" in line)
    assert line.startswith("diverged")
    assert {r["run"]: r["replay_of"] for r in json.loads(agent_here("runs", "--runs-dir", runs, "--json").stdout)} == \
        {"same": other_run.name, "moved": other_run.name}


# -- defect 5: --resume by id, and a TARGET beside it -----------------------------------------------------


@pytest.mark.slow
def test_resume_takes_a_run_id_and_refuses_another_target(other_run, tmp_path):
    runs = tmp_path / "runs"
    run = _copy(other_run, runs / other_run.name)
    by_id = agent("investigate", "--resume", run.name, "--runs-dir", runs)
    assert by_id.returncode == 0 and "already finished" in by_id.stdout, by_id.stderr
    from_env = agent_here("investigate", "--resume", run.name, cwd=tmp_path, env={"PERF_INVESTIGATOR_RUNS": str(runs)})
    assert from_env.returncode == 0 and "already finished" in from_env.stdout, from_env.stderr
    assert "no run 'nope'" in _one_line(agent_here("investigate", "--resume", "nope", "--runs-dir", runs), 2)
    # what the recorded target fixed is not changed halfway (issue 31: it was silently ignored)
    budget = _one_line(agent_here("investigate", "--resume", run.name, "--runs-dir", runs, "--budget", "quick"), 2)
    assert "--budget quick" in budget and "keeps it" in budget
    other = _one_line(agent_here("investigate", "dsv4-flash", "--resume", run.name, "--runs-dir", runs), 2)
    assert "investigates target other-shapes, not dsv4-flash" in other
    same = agent_here("investigate", TARGET, "--resume", run.name, "--runs-dir", runs)
    assert same.returncode == 0 and "already finished" in same.stdout, same.stderr
    changed = tmp_path / "changed.yaml"
    changed.write_text(TARGET.read_text().replace("output_tok_s: 1000", "output_tok_s: 1001", 1))
    assert "changed since run" in _one_line(agent_here("investigate", changed, "--resume", run.name, "--runs-dir", runs), 2)


def test_resolve_run_by_path_or_id(tmp_path):
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    assert resolve_run(tmp_path / "runs" / "r1") == tmp_path / "runs" / "r1"
    assert resolve_run("r1", tmp_path / "runs") == tmp_path / "runs" / "r1"
    for bad in ("r2", "../runs/r1x", "a/b"):
        with pytest.raises(RunDirError, match="no run"):
            resolve_run(bad, tmp_path / "runs")


# -- defect 6: run ids and symlinks -------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["../../escape", "..", "a/b", "/tmp/abs", ".hidden", "a\\b", "x" * 201, ""])
def test_run_ids_that_are_not_plain_names_are_refused(run_id, tmp_path):
    with pytest.raises(RunDirError, match="not a plain name"):
        check_run_id(run_id)
    with pytest.raises(RunDirError):
        RunDir.create(tmp_path / "a" / "b" / "runs", run_id)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "a" / "escape").exists()


def test_cli_refuses_an_escaping_run_id_before_touching_the_box(tmp_path):
    runs = tmp_path / "a" / "b" / "runs"
    err = _one_line(agent_here("investigate", TARGET, "--run-id", "../../escape", "--runs-dir", runs), 2)
    assert "not a plain name" in err
    assert not (tmp_path / "a" / "escape").exists() and not (tmp_path / "escape").exists()


def test_writes_through_a_symlink_out_of_the_run_are_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    run = RunDir.create(tmp_path / "runs", "r1")
    shutil.rmtree(run.root / "findings")
    os.symlink(outside, run.root / "findings")
    with pytest.raises(RunDirError, match="outside run"):
        run.write_file("findings/01-survey.json", b"{}")
    os.symlink(outside / "trace.json", run.root / "artifacts" / "link")
    with pytest.raises(RunDirError, match="outside run"):
        run.write_file("artifacts/link", b"x")
    assert not any(outside.iterdir())
    os.symlink(outside, tmp_path / "runs" / "r2")  # a run id that names a symlink: never written through
    with pytest.raises(RunDirError, match="already exists"):
        RunDir.create(tmp_path / "runs", "r2")


# -- defect 13: the journal's format ---------------------------------------------------------------------


def _set_format(run: Path, value) -> None:
    lines = (run / LOG_NAME).read_text().splitlines(keepends=True)
    start = json.loads(lines[0])
    assert start["kind"] == "run_start"
    if value is None:
        start.pop("format", None)
    else:
        start["format"] = value
    lines[0] = json.dumps(start, ensure_ascii=False, separators=(",", ":")) + "\n"
    (run / LOG_NAME).write_text("".join(lines))


@pytest.mark.slow
def test_a_run_records_its_journal_format_and_an_unknown_one_is_refused_whole(other_run, tmp_path):
    assert events(other_run)[0]["format"] == FORMAT == journal_format(events(other_run))
    run = _copy(other_run, tmp_path / "newer")
    _set_format(run, FORMAT + 1)
    before = (run / LOG_NAME).read_bytes()
    for argv in (("replay", run, "--out", tmp_path / "replay"), ("report", run), ("investigate", "--resume", run)):
        err = _one_line(agent_here(*argv), 2)
        assert f"journal format {FORMAT + 1}" in err and f"its own is {FORMAT}" in err, err
    assert not (tmp_path / "replay").exists()  # refused before anything was replayed
    assert (run / LOG_NAME).read_bytes() == before  # nor appended to


@pytest.mark.slow
def test_a_journal_without_a_format_replays_as_format_1(other_run, tmp_path):
    """The shipped examples predate recorded formats: their last commit's journal ends at the report
    finding's line. A format-1 run built from this run's own journal replays to the same commits."""
    run = _copy(other_run, tmp_path / "old")
    _set_format(run, None)
    state = [e["finding"] for e in read_events(run / LOG_NAME) if e["kind"] == "finding"]
    ids = runner.sync_commits(run=RunDir.open(run), finding_dicts=state)
    head = git.Repo(run).head.commit.tree[LOG_NAME].data_stream.read().decode().splitlines()
    assert json.loads(head[-1])["kind"] == "finding"  # format 1: no tail in the last commit
    outcome = runner.replay(run, tmp_path / "replay")
    assert outcome.exit_code == 0, outcome.message
    assert outcome.details["commits"] == ids


# -- battery: a replay against an edited or cut journal -------------------------------------------------------


@pytest.mark.slow
def test_a_replay_of_an_edited_or_cut_journal_diverges_naming_the_line(other_run, tmp_path):
    edited = _copy(other_run, tmp_path / "edited")
    lines = (edited / LOG_NAME).read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, start=1) if json.loads(line)["kind"] == "tool_result")
    event = json.loads(lines[number - 1])
    event["duration_s"] = event["duration_s"] + 1
    lines[number - 1] = json.dumps(event, separators=(",", ":")) + "\n"
    (edited / LOG_NAME).write_text("".join(lines))
    outcome = runner.replay(edited, tmp_path / "r1")
    assert outcome.status == "diverged" and f"line {number} differs" in outcome.message, outcome.message

    cut = _copy(other_run, tmp_path / "cut")
    kept = _cut_before(cut, lambda e: e["kind"] == "finding" and e["step"] == "report")
    outcome = runner.replay(cut, tmp_path / "r2")
    assert outcome.status == "diverged" and f"cut short after line {kept}" in outcome.message, outcome.message


def test_a_branch_synced_back_to_no_finding_is_empty_and_sound(tmp_path):
    from agent.rundir import CommitSpec
    from agent.runlog import RunLog

    run = RunDir.create(tmp_path, "r1")
    log = RunLog.create(run.log_path)
    event = log.append("finding", index=1)
    run.write_file("findings/01.json", b"{}")
    assert len(run.sync_commits([CommitSpec("01 step: a", {"findings/01.json": b"{}"}, event["seq"], event["ts"])])) == 1
    assert run.sync_commits([]) == [] and run.history() == []  # a resume that went back before finding 1
    assert _git(run.root, "status").returncode == 0 and _git(run.root, "fsck", "--strict").returncode == 0
