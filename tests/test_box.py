"""The local box: real subprocesses, timeouts, exit codes, produced files, commands that cannot start."""

import sys

from agent.box.catalog import run_tool
from agent.box.interface import OUT_DIR
from agent.box.local import LocalBox


def test_runs_an_argument_list_and_collects_files():
    box = LocalBox()
    script = "import pathlib, sys; pathlib.Path(sys.argv[1], 'x.txt').write_text('hi'); print('{\"ok\": true}')"
    result = box.run([sys.executable, "-c", script, OUT_DIR], timeout_s=60)
    try:
        assert result.rc == 0 and not result.timed_out
        assert list(result.files) == ["x.txt"] and result.files["x.txt"].read_text() == "hi"
        assert result.duration_s > 0
    finally:
        result.cleanup()
    assert not result.scratch.exists()


def test_timeout_kills_the_process_group():
    box = LocalBox()
    result = box.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    assert result.timed_out and result.rc is not None and result.duration_s < 10


def test_a_missing_program_is_a_result():
    result = LocalBox().run(["/nonexistent/program"], timeout_s=5)
    assert result.rc is None and "cannot start" in result.error


def test_survey_tool_result_record():
    record, raw = run_tool(LocalBox(), "box.survey", {})
    raw.cleanup()
    assert record["ok"] and record["rc"] == 0 and record["error"] is None
    assert set(record["data"]) >= {"host", "gpus", "software"}
    assert record["data"]["software"]["sglang"] == "0.5.23"  # CI installs it; the investigation needs it


def test_a_failing_tool_is_reported_with_its_reason():
    box = LocalBox(python=sys.executable)
    record, raw = run_tool(box, "engine.bench", {"spec": {"device": "cpu"}, "env": {}, "timeout_s": 60})
    raw.cleanup()
    assert not record["ok"] and record["rc"] == 2 and "exit 2" in record["error"]
