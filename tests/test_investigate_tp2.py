"""Issue #14's Must show: the dsv4-flash investigation at TP2 over gloo on the CPU (target dsv4-flash-tp2): two
trace files from two rank processes, per-rank and merged tables, a communication share, the critical rank, the
EP and TP-degree levers measured, the NCCL levers listed as not applicable to gloo; and its replay byte for byte."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import agent, finding, only_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tp2_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs-tp2")
    out = agent("investigate", "dsv4-flash-tp2", "--runs-dir", runs, "--decide", "stop")
    assert out.returncode == 0, out.stderr[-3000:]
    return only_run(runs)


def test_profile_has_a_trace_per_rank_process_and_the_ranks_tables(tp2_run):
    profile = finding(tp2_run, "profile")
    files = profile["data"]["summary"]["files"]
    assert [f["ranks"] for f in files] == [["0"], ["1"]]
    pids = []
    for f in files:
        with gzip.open(tp2_run / f["path"], "rt") as fh:
            trace = json.load(fh)
        assert trace["distributedInfo"]["backend"] == "gloo"
        pids.append({e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("pid"), int)})
        assert any(e["name"].startswith("gloo:") for e in trace["traceEvents"])
    assert pids[0].isdisjoint(pids[1])
    titles = [t["title"] for t in profile["tables"]]
    assert "Ranks" in titles and "Rank 0: top kernels" in titles and "Rank 1: top kernels" in titles
    assert titles[0].startswith("Top ")  # the merged table
    numbers = profile["numbers"]
    assert 0 < numbers["communication_share"]["value"] < 1
    assert numbers["critical_rank"]["value"] in (0, 1) and numbers["rank_imbalance"]["value"] >= 0
    parallel = profile["data"]["parallel"]
    assert [r["rank"] for r in parallel["ranks"]] == ["0", "1"]
    assert "critical" in profile["headline"]


def test_ep_and_tp_levers_measured_and_nccl_levers_not_applicable_to_gloo(tp2_run):
    levers = {lever["name"]: lever for lever in finding(tp2_run, "levers")["data"]["levers"]}
    for name in ("ep-2", "tp-1"):
        assert levers[name]["status"] != "not tried", levers[name]
        assert levers[name]["ratio"] > 0 and levers[name]["output"]["ok"], levers[name]
    for name in ("nccl-proto-simple", "nccl-proto-ll", "nccl-algo-ring", "nccl-algo-tree"):
        assert levers[name]["status"] == "not tried" and "not applicable to gloo" in levers[name]["reason"]


def test_tp2_run_replays_byte_for_byte(tp2_run, tmp_path):
    out = agent("replay", tp2_run, "--out", tmp_path / "replay")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "replay" / "PROFILE_FINDINGS.md").read_bytes() == (tp2_run / "PROFILE_FINDINGS.md").read_bytes()
    for path in (tp2_run / "findings").iterdir():
        assert (tmp_path / "replay" / "findings" / path.name).read_bytes() == path.read_bytes()
    assert "replay identical" in out.stdout
