"""Issue #14's Must show: the dsv4-flash investigation at TP2 over gloo on the CPU (target dsv4-flash-tp2): two
trace files from two rank processes, per-rank and merged tables, a communication share, the critical rank, the
EP and TP-degree levers measured, the NCCL levers listed as not applicable to gloo; and its replay byte for byte."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import agent_here, finding

pytestmark = pytest.mark.slow


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
    out = agent_here("replay", tp2_run, "--out", tmp_path / "replay")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "replay" / "PROFILE_FINDINGS.md").read_bytes() == (tp2_run / "PROFILE_FINDINGS.md").read_bytes()
    for path in (tp2_run / "findings").iterdir():
        assert (tmp_path / "replay" / "findings" / path.name).read_bytes() == path.read_bytes()
    assert "replay identical" in out.stdout


def test_ceiling_shares_and_window_come_from_one_ranks_trace(tp2_run):
    """Audit of the TP2 report: W, t_k and t_op from the critical rank's trace alone (the merged trace sums the
    ranks' windows and kernels), that rank named with why; the merged tables labelled as the overview."""
    profile, ceiling = finding(tp2_run, "profile"), finding(tp2_run, "ceiling")
    critical = profile["data"]["critical"]
    assert critical["rank"] == str(profile["numbers"]["critical_rank"]["value"]) and critical["why"]
    assert ceiling["data"]["rank"]["rank"] == critical["rank"] and f"rank {critical['rank']}" in ceiling["headline"]
    rank = profile["data"]["summary"]["ranks"][critical["rank"]]
    numbers = ceiling["numbers"]
    t_k, window = numbers["kernel_ms"]["value"], numbers["window_ms"]["value"]
    t_op = numbers["operation_ms"]["value"] if "operation_ms" in numbers else t_k
    assert t_k <= t_op <= window
    assert window == pytest.approx(rank["in_step_window_us"] / 1000)
    assert t_k == pytest.approx(rank["kernels"][0]["total_us"] / 1000)
    operation = profile["data"]["operation"]
    if operation and operation.get("status") == "attributed":
        assert operation["trace"] == critical["trace"]
        assert sum(k["total_us"] for k in operation["kernels"]) / 1000 <= t_op * (1 + 1e-9)
        assert operation["kernel_total_us"] == pytest.approx(t_k * 1000)
    assert "merged" in profile["tables"][0]["title"] and "overview" in profile["tables"][0]["title"]


def test_grid_reads_no_source_for_a_collective(tp2_run):
    """A dominant communication collective has no kernel source: the grid step says so and tries no read."""
    profile = finding(tp2_run, "profile")
    dominant = profile["data"]["dominant"]
    if not dominant or dominant["category"] != "communication":
        pytest.skip(f"the dominant kernel is not a collective here: {dominant}")
    grid = finding(tp2_run, "grid")
    assert grid["verdict"] == "collective" and not grid["data"].get("failures")
    assert "no kernel source" in grid["headline"] and "NCCL_PROTO" in grid["headline"]
    assert "no definition of kernel" not in grid["headline"] and "failed" not in grid["labels"]
