"""The journal: append-only lines with sequence numbers and attempts; a torn last line is cut off."""

import json

import pytest

from agent.runlog import CorruptLog, RunLog, prefix_bytes, read_events


def test_events_are_numbered_lines_and_attempts_count_up(tmp_path):
    path = tmp_path / "log.jsonl"
    log = RunLog.create(path)
    log.append("run_start", target="x")
    log.append("tool_call", tool="box.survey", args={})
    again = RunLog.reopen(path)
    again.append("attempt_start")
    events = read_events(path)
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert [e["attempt"] for e in events] == [1, 1, 2]
    assert all(line for line in path.read_text().split("\n")[:-1])
    with pytest.raises(FileExistsError):
        RunLog.create(path)


def test_a_torn_last_line_is_cut_and_the_cut_logged(tmp_path):
    path = tmp_path / "log.jsonl"
    log = RunLog.create(path)
    log.append("run_start")
    with open(path, "ab") as handle:
        handle.write(b'{"seq": 2, "kind": "tool_ca')  # a crash mid-write
    assert len(read_events(path)) == 1
    reopened = RunLog.reopen(path)
    events = read_events(path)
    assert [e["kind"] for e in events] == ["run_start", "log_repaired"]
    assert events[1]["dropped_bytes"] == len(b'{"seq": 2, "kind": "tool_ca')
    assert reopened.next_seq == 3


def test_a_corrupt_middle_line_is_an_error_not_a_guess(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"seq": 1}\nnot json\n{"seq": 3}\n')
    with pytest.raises(CorruptLog, match=":2:"):
        read_events(path)


def test_prefix_is_exact_bytes(tmp_path):
    path = tmp_path / "log.jsonl"
    log = RunLog.create(path)
    for i in range(3):
        log.append("x", i=i)
    first_two = prefix_bytes(path, 2)
    assert first_two.count(b"\n") == 2
    assert [json.loads(line)["i"] for line in first_two.splitlines()] == [0, 1]
    with pytest.raises(CorruptLog):
        prefix_bytes(path, 4)
