"""Issue #15's Must show, locally: ``python -m agent investigate dsv4-flash-sglang --stand-in --decide auto``
against the stand-in server (tools/engines/sglang_standin, launched and loaded by tools/engines/sglang with
SGLang's own client) runs every step: levers from server arguments with intervals, each number naming its
server; a lever that crashes the stand-in is a failed lever with its server log's excerpt, and the sweep goes
on; a profile with one trace per rank; gates from the box's installed SGLang; the ceiling, the options (split-K
not tried on a live server, said), the report; the run replays byte for byte; and killing the agent mid-sweep
leaves no server process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, agent_here, finding, findings, only_run

pytestmark = pytest.mark.slow

STANDIN = "tools.engines.sglang_standin"
CRASHES = {"mem-fraction-0.95": "out of memory", "attn-dp-2": "the stand-in has no DP attention"}


def test_every_step_ran_and_auto_stopped_at_the_options(sglang_run):
    steps = [f["step"] for f in findings(sglang_run)]
    assert steps[:3] == ["survey", "levers", "profile"], steps
    assert {"ceiling", "gates", "options", "report"} <= set(steps), steps
    assert "splitk" not in steps and "round2" not in steps  # split-K cannot be dropped into a live server
    options = finding(sglang_run, "options")
    splitk = next(o for o in options["data"]["options"] if o["name"] == "splitk")
    assert not splitk["can_try_here"]
    if splitk["offered"]:
        assert "live SGLang server" in splitk["try_note"] and "live SGLang server" in options["headline"]
    assert (sglang_run / "PROFILE_FINDINGS.md").is_file()


def test_levers_are_server_arguments_with_intervals_each_number_naming_its_server(sglang_run):
    levers = finding(sglang_run, "levers")
    assert "stand-in-server" in levers["labels"]
    results = {r["name"]: r for r in levers["data"]["levers"]}
    measured = [r for r in results.values() if r.get("interval")]
    assert measured, results
    for result in measured:
        assert result["output"]["ok"] is None and "not sketched" in result["output"]["note"]
    for key, number in levers["numbers"].items():
        if number["seqs"]:
            assert "stand-in server" in number["label"], (key, number["label"])
    for name in ("continuous-decode-4", "cuda-graph-off", "ep-4"):  # server flags, each run a launch of its own
        assert results[name]["runs"] == levers["data"]["sweep"]["rounds"] and results[name]["interval"], results[name]
    assert levers["data"]["server"].startswith("the stand-in server")
    for name in ("nccl-proto-simple", "nccl-algo-ring"):
        assert results[name]["status"] == "not tried" and "not applicable to gloo" in results[name]["reason"]


def test_the_planted_flags_come_out_the_way_they_were_planted(sglang_run):
    """The stand-in plants a 30 ms scheduler overhead per iteration (shared by four decode steps under
    --num-continuous-decode-steps 4) and 15 ms per eager decode step (planted.py; their amounts are measured in
    tests/test_sglang_adapter.py): the sweep must see the first faster and the second slower, never reversed."""
    results = {r["name"]: r for r in finding(sglang_run, "levers")["data"]["levers"]}
    shared, eager = results["continuous-decode-4"], results["cuda-graph-off"]
    assert shared["ratio"] > 1 and shared["status"] != "moves down", shared
    assert eager["ratio"] < 1 and eager["status"] != "moves up", eager


def test_a_lever_that_crashes_the_stand_in_is_failed_with_its_log_excerpt_and_the_sweep_goes_on(sglang_run):
    levers = finding(sglang_run, "levers")
    results = {r["name"]: r for r in levers["data"]["levers"]}
    for name, logged in CRASHES.items():
        assert results[name]["status"] == "failed", results[name]
        assert logged in results[name]["log_excerpt"], results[name]
    crash_table = next(t for t in levers["tables"] if t["title"].startswith("Failed levers"))
    assert {row[0] for row in crash_table["rows"]} >= set(CRASHES)
    # the sweep completed: every run of every other setting was measured, those after a crash too
    runs = levers["data"]["runs"]
    failing = set(CRASHES) | {"attention-flashinfer"}  # the stand-in has no FlashInfer: its start fails
    assert all(r["ok"] for r in runs if r["setting"] not in failing), [r for r in runs if not r["ok"]]
    first_crash = min(i for i, r in enumerate(runs) if r["setting"] in CRASHES)
    assert any(r["ok"] for r in runs[first_crash + 1:])
    assert results["attention-flashinfer"]["status"] == "failed"


def test_the_profile_is_one_trace_per_rank_with_communication_its_own_category(sglang_run):
    profile = finding(sglang_run, "profile")
    files = profile["data"]["summary"]["files"]
    assert len(files) == 4, files  # --tp-size 4: four rank processes, a trace each
    assert sorted(r for f in files for r in f["ranks"]) == ["0", "1", "2", "3"]
    assert all("-TP-" in Path(f["path"]).name for f in files)
    assert profile["data"]["parallel"]["communication_share"] > 0
    assert "stand-in server" in profile["numbers"]["setting_tok_s"]["label"]
    # the setting's tok/s and step are the sweep's, timed without the profiler; the profiled load's own beside them
    levers = finding(sglang_run, "levers")
    if profile["data"]["setting"]["label"] == "baseline":
        assert profile["numbers"]["setting_tok_s"]["value"] == levers["data"]["baseline"]["tok_s"]
        assert profile["numbers"]["setting_tok_s"]["seqs"] == levers["data"]["baseline"]["seqs"]
    assert "the profiler on" in profile["numbers"]["profiled_load_tok_s"]["label"]
    assert profile["data"]["server"]["args"][:2] == ["--model-path", "/models/DeepSeek-V4-Flash"]


def test_gates_read_the_boxs_installed_sglang(sglang_run):
    gates = finding(sglang_run, "gates")
    survey = finding(sglang_run, "survey")
    assert gates["data"]["source"]["dir"] == survey["data"]["software"]["sglang_dir"] is not None


def test_the_sglang_run_replays_byte_for_byte(sglang_run, tmp_path):
    out = agent_here("replay", sglang_run, "--out", tmp_path / "replay")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "replay" / "PROFILE_FINDINGS.md").read_bytes() == (sglang_run / "PROFILE_FINDINGS.md").read_bytes()


def _marked(marker: str) -> list[int]:
    """The processes whose environment carries ``marker`` (the ones this test's agent started), by pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry.name))
    return found


def _servers(marker: str) -> list[int]:
    servers = []
    for pid in _marked(marker):
        try:
            if STANDIN.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                servers.append(pid)
        except OSError:
            continue
    return servers


def test_killing_the_agent_mid_sweep_leaves_no_server(tmp_path):
    marker = f"PERF_INVESTIGATOR_TEST_MARK={uuid.uuid4().hex}"
    name, value = marker.split("=")
    proc = subprocess.Popen([sys.executable, "-m", "agent", "investigate", "dsv4-flash-sglang", "--stand-in",
                             "--runs-dir", str(tmp_path), "--decide", "stop"], cwd=ROOT,
                            env={**os.environ, name: value}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while not _servers(marker) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert _servers(marker), "no stand-in server was launched within 600 s"
        os.kill(proc.pid, signal.SIGKILL)  # the agent alone, as a crash or kill -9 would
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _servers(marker) == [], "a stand-in server outlived the agent"
        assert _marked(marker) == [], "a process the agent started outlived it"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _marked(marker):  # only what this test's agent started, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
