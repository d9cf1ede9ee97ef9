"""Run directories: commits are a pure function of the findings, idempotent, rebuilt when one changes."""

import os
import subprocess

import git
import pytest

from agent.rundir import AUTHOR, CommitSpec, RunDir, RunDirError, check_runs_dir
from agent.runlog import RunLog


def _specs(run: RunDir, log: RunLog, headlines: list[str]) -> list[CommitSpec]:
    specs = []
    for i, headline in enumerate(headlines, start=1):
        event = log.append("finding", index=i, headline=headline)
        specs.append(CommitSpec(f"{i:02d} step: {headline}", {f"findings/{i:02d}.json": headline.encode()},
                                event["seq"], event["ts"]))
    return specs


def test_one_commit_per_finding_with_fixed_author_and_logged_time(tmp_path):
    run = RunDir.create(tmp_path, "r1")
    log = RunLog.create(run.log_path)
    specs = _specs(run, log, ["a", "b", "c"])
    ids = run.sync_commits(specs)
    history = list(git.Repo(run.root).iter_commits("main"))
    assert [c.hexsha for c in reversed(history)] == ids
    assert [c.message for c in reversed(history)] == [s.message for s in specs]
    assert {(c.author.name, c.author.email) for c in history} == {(AUTHOR.name, AUTHOR.email)}
    # the log in each commit ends at that finding's line
    for commit, spec in zip(reversed(history), specs):
        lines = commit.tree["log.jsonl"].data_stream.read().decode().splitlines()
        assert len(lines) == spec.log_through_seq
    out = subprocess.run(["git", "log", "--format=%s"], cwd=run.root, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["03 step: c", "02 step: b", "01 step: a"]


def test_sync_is_idempotent_and_reproducible_elsewhere(tmp_path):
    run = RunDir.create(tmp_path, "r1")
    log = RunLog.create(run.log_path)
    specs = _specs(run, log, ["a", "b"])
    first = run.sync_commits(specs)
    again = run.sync_commits(specs)  # a crash after committing, then the same sync again
    assert first == again
    assert len(list(git.Repo(run.root).iter_commits("main"))) == 2
    other = RunDir.create(tmp_path, "r2")  # a replay: same specs, same log bytes -> same ids
    other.write_file("log.jsonl", run.log_path.read_bytes())
    assert other.sync_commits(specs, log_source=run.log_path) == first


def test_a_redone_finding_replaces_its_commit_not_adds_one(tmp_path):
    run = RunDir.create(tmp_path, "r1")
    log = RunLog.create(run.log_path)
    specs = _specs(run, log, ["a", "b"])
    run.sync_commits(specs)
    redone = specs[:1] + _specs(run, log, ["b redone"])  # finding 2 made again after a crash
    redone[1] = CommitSpec("02 step: b redone", redone[1].files, redone[1].log_through_seq, redone[1].when)
    ids = run.sync_commits(redone)
    messages = [c.message for c in reversed(list(git.Repo(run.root).iter_commits("main")))]
    assert messages == ["01 step: a", "02 step: b redone"]
    assert ids[0] == run.history()[0]


def test_artifacts_are_content_addressed(tmp_path):
    run = RunDir.create(tmp_path, "r1")
    source = tmp_path / "trace.json.gz"
    source.write_bytes(b"abc")
    ref = run.store_artifact(source)
    again = run.store_bytes(b"abc", "trace.json.gz")
    assert ref == again
    assert ref["path"].startswith("artifacts/ba7816bf8f01cfea/")
    assert run.artifact_path(ref).read_bytes() == b"abc"


def test_runs_dir_that_cannot_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RunDirError, match="cannot be created"):
        check_runs_dir(blocker / "runs")


def test_lock_is_exclusive_and_a_dead_holder_is_taken_over(tmp_path):
    run = RunDir.create(tmp_path, "r1")
    RunLog.create(run.log_path)
    run.lock()
    with pytest.raises(RunDirError, match="in use by process"):
        RunDir.open(run.root).lock()
    run.unlock()
    (run.root / "run.lock").write_text("999999999")  # no such process
    RunDir.open(run.root).lock()
    assert (run.root / "run.lock").read_text() == str(os.getpid())
