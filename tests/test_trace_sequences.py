"""Fusion candidates (tools/trace/sequences.py) and communication overlap (tools/trace/overlap.py) on real
captured H200 traces, checked against counts made by hand from the raw events; the report's next steps
(agent/steps/next_steps.py) from the shipped H200 example's findings; `agent trace --sequences/--overlap`."""

import gzip
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT
from schema.finding import Finding
from tools.trace.overlap import intersection_length, overlap, union
from tools.trace.sequences import closed_frequent, count_sequences, fusion_candidates

AUDIT = ROOT / "tests" / "data" / "h200-audit-20261202b" / "artifacts"
EAGER = AUDIT / "b99e814c84b7ae31" / "reference_trace_b16_eager.json.gz"  # round 2's eager twin (after split-K)
GRAPH = AUDIT / "3f19c6519c4f5fe4" / "reference_trace_b16.json.gz"  # round 2's CUDA-graph replay
TP = [ROOT / "tests" / "data" / "h200-traces" / f"dsv4-like-B16-TP-{r}.trace.json.gz" for r in (0, 1)]
H200_RUN = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"


# -- the mining, by itself ---------------------------------------------------------------------------


def test_a_sequence_is_counted_without_overlapping_itself():
    counts = count_sequences([("op", ["a", "a", "a", "a", "a"])])
    assert counts[("op", ("a", "a"))] == 2  # aa|aa|a, not 4 overlapping windows
    assert counts[("op", ("a", "a", "a"))] == 1


def test_closed_sequences_keep_the_whole_call_and_a_pair_it_repeats():
    calls = [("norm", ["cast", "pow", "mean", "mul", "pow", "mean"])] * 3 + [("rope", ["mul", "add"])] * 2
    kept = {(op, gram): n for op, gram, n in closed_frequent(count_sequences(calls), min_count=2)}
    assert kept[("norm", ("cast", "pow", "mean", "mul", "pow", "mean"))] == 3  # the whole call
    assert kept[("norm", ("pow", "mean"))] == 6  # twice a call: more often than any longer sequence holding it
    assert ("norm", ("cast", "pow")) not in kept  # never more often than the whole call: not closed
    assert kept[("rope", ("mul", "add"))] == 2
    assert not any(op == "rope" and len(gram) > 2 for op, gram in kept)
    assert closed_frequent(count_sequences(calls), min_count=7) == []


# -- on the recorded H200 traces, against a hand count -----------------------------------------------


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _hand_calls(path: Path, function: str) -> list[list[list[int]]]:
    """Per ProfilerStep (device ranges), the kernels (positions in the step's device order) of each call of a
    Python function, from the raw events: kernel -> its launch (correlation) -> the innermost user frame
    around the launch on the launch's thread must be that function's."""
    events = [e for e in _events(path) if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#"))
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    frames = [e for e in events if e.get("cat") == "python_function" and "tools/" in e["name"]
              and not e["name"].startswith("<")]
    out = []
    for lo, hi in steps:
        mine = [k for k in kernels if lo - 0.01 <= k["ts"] <= hi + 0.01]
        calls: dict[int, list[int]] = {}
        for position, k in enumerate(mine):
            launch = launches.get(k["args"].get("correlation"))
            if launch is None:
                continue
            around = [f for f in frames if f["tid"] == launch["tid"] and f["ts"] <= launch["ts"] <= f["ts"] + f["dur"]]
            if not around:
                continue
            inner = max(around, key=lambda f: f["ts"])
            if inner["name"].endswith(": " + function):
                calls.setdefault(id(inner), []).append(position)
        out.append(list(calls.values()))
    return out


@pytest.fixture(scope="module")
def mined():
    return fusion_candidates([GRAPH, EAGER])  # either order: the replay is recognised


def test_h200_rms_norm_sequences_match_a_hand_count_of_one_step(mined):
    assert mined.attributed and mined.timing == "graph replay" and mined.steps == 3
    step_one = _hand_calls(EAGER, "rms_norm")[0]
    steps = [e for e in _events(EAGER) if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#")]
    lo = min(e["ts"] for e in steps)
    first = sorted((e for e in _events(EAGER) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                    and e["ts"] >= lo - 0.01), key=lambda e: e["ts"])
    calls = [tuple(first[p]["name"] for p in call) for call in step_one]
    assert len(calls) == 20  # 4 layers x 5 norms, by hand from the raw events
    rows = [c for c in mined.candidates if c.operation == "rms_norm"]
    assert rows
    whole = Counter(calls).most_common(1)[0]
    assert any(r.kernels == whole[0] and r.per_step == whole[1] for r in rows)  # the commonest whole call
    for row in rows:
        n = len(row.kernels)
        by_hand = sum(1 for call in calls if any(call[i:i + n] == row.kernels for i in range(len(call) - n + 1)))
        assert row.per_step == by_hand, row.kernels
        assert row.launches_per_step == n * by_hand and row.boundaries_per_step == (n - 1) * by_hand
        assert row.timed_occurrences == row.occurrences  # every one found back to back in the replay


def test_h200_gaps_and_times_match_the_graph_replay_by_hand(mined):
    """The 8-kernel rms_norm call timed by hand in the replay: the same positions as in the eager steps
    (the replay runs the step's kernels in the same order: the match covers them all)."""
    assert mined.matched == 1.0
    row = max((c for c in mined.candidates if c.operation == "rms_norm"), key=lambda c: len(c.kernels))
    graph = [e for e in _events(GRAPH) if e.get("ph") == "X"]
    spans: dict[str, tuple[float, float]] = {}  # one range a stream: the replay forks onto a second stream
    for e in graph:
        if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#"):
            lo, hi = spans.get(e["name"], (e["ts"], e["ts"] + e["dur"]))
            spans[e["name"]] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    steps = sorted(spans.values())
    assert len(steps) == 3
    kernels = sorted((e for e in graph if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    time_us, gap_us = [], []
    for (lo, hi), calls in zip(steps, _hand_calls(EAGER, "rms_norm")):
        mine = [k for k in kernels if lo - 0.01 <= k["ts"] <= hi + 0.01]
        for call in calls:
            if len(call) != len(row.kernels):
                continue
            seq = [mine[p] for p in call]
            time_us += [k["dur"] for k in seq]
            gap_us += [max(b["ts"] - (a["ts"] + a["dur"]), 0.0) for a, b in zip(seq, seq[1:])]
    assert math.isclose(row.time_us_per_step, math.fsum(time_us) / 3, rel_tol=1e-9)
    assert math.isclose(row.gap_us_per_step, math.fsum(gap_us) / 3, rel_tol=1e-6)
    assert 0 < row.gap_us_per_step < mined.step_window_us - mined.kernel_time_us  # inside the step's idle


def test_a_replay_alone_is_mined_without_operations():
    found = fusion_candidates([GRAPH])
    assert not found.attributed and any("eager profile" in note for note in found.notes)
    assert {c.operation for c in found.candidates} == {"(CUDA graph replay)"}


def test_two_eager_traces_are_refused():
    with pytest.raises(ValueError, match="one rank at a time"):
        fusion_candidates([EAGER, EAGER])


# -- overlap -----------------------------------------------------------------------------------------


def test_interval_union_and_intersection():
    a = union(*map(__import__("numpy").array, ([0.0, 5.0, 30.0], [10.0, 20.0, 40.0])))
    assert a == [(0.0, 20.0), (30.0, 40.0)]
    assert intersection_length(a, [(15.0, 35.0)]) == 10.0


def test_tp2_overlap_is_zero_on_one_stream_and_the_collectives_match_a_hand_sum():
    found = overlap(TP)
    assert [r.rank for r in found.ranks] == ["0", "1"]
    for rank, path in zip(found.ranks, TP):
        events = [e for e in _events(path) if e.get("ph") == "X"]
        nccl = [e["dur"] for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel")]
        assert rank.streams == 1 and rank.overlap_share == 0.0 and rank.overlapped_us == 0.0
        assert math.isclose(rank.communication_us, math.fsum(nccl) / 3, rel_tol=1e-9)  # one stream: union = sum
        assert rank.exposed_us == rank.communication_us and rank.collectives == len(nccl) / 3
    assert found.ranks[0].exposed_us > 10 * found.ranks[1].exposed_us  # rank 0 waits on rank 1 in the all-reduce


def test_overlap_on_two_streams(tmp_path):
    def kernel(name, ts, dur, tid):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid, "args": {}}
    events = [kernel("ncclDevKernel_AllReduce", 100.0, 10.0, 2), kernel("gemm_a", 95.0, 10.0, 1),
              kernel("gemm_b", 120.0, 5.0, 1),
              {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#4", "ts": 95.0, "dur": 30.0, "pid": 0, "tid": 1}]
    path = tmp_path / "two.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (rank,) = overlap([path]).ranks
    assert (rank.communication_us, rank.overlapped_us, rank.exposed_us, rank.computation_outside_us) == (10.0, 5.0, 5.0, 10.0)
    assert rank.overlap_share == 0.5 and rank.streams == 2


# -- the report's next steps, and the CLI ------------------------------------------------------------


def test_next_steps_of_the_h200_example_are_ranked_with_their_evidence():
    from agent.steps.next_steps import next_steps

    findings = [Finding.model_validate_json(p.read_text()) for p in sorted((H200_RUN / "findings").glob("*.json"))]
    found = next_steps(findings, lambda path: H200_RUN / path)
    assert found["finding"] == "09-round2" and found["fusion"]["status"] == "mined"
    bounds = [s["bound_us"] for s in found["steps"] if s["bound_us"] is not None]
    assert bounds == sorted(bounds, reverse=True) and found["steps"][-1]["bound_us"] is None  # untried lever last
    kinds = {s["kind"] for s in found["steps"]}
    assert {"fusion", "fp8", "lever"} <= kinds and "overlap" not in kinds  # one rank: no collective
    for step in found["steps"]:
        assert step["evidence"] and all(e["seqs"] for e in step["evidence"])
        if step["x"] is not None:
            assert step["below_detectable"] == (step["x"] - 1 < found["smallest_detectable"])
    fusion = [s for s in found["steps"] if s["kind"] == "fusion"]
    assert all("(modelled)" in s["detail"] and "(measured" in s["detail"] for s in fusion)


def _agent(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "trace", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_agent_trace_sequences_and_overlap():
    done = _agent(EAGER, GRAPH, "--sequences", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["timing"] == "graph replay" and any(c["operation"] == "rms_norm" for c in data["candidates"])
    done = _agent(*TP, "--overlap")
    assert done.returncode == 0 and "0.0%" in done.stdout and "rank" in done.stdout
    done = _agent(TP[0], "--overlap", "--sequences")
    assert done.returncode == 2 and "choose one of" in done.stderr


def test_the_overlap_step_bounds_the_critical_ranks_exposed_collectives_on_the_tp2_traces():
    from agent.steps.next_steps import overlap_step

    profile = Finding(index=3, step="profile", headline="", verdict="", data={
        "summary": None, "dominant": None, "complete": True,
        "setting": {"label": "baseline", "env": {}, "options": {}},
        "parallel": {"critical_rank": 1, "communication_share": 0.54, "ranks": []}})
    step, table = overlap_step({"profile": profile}, [str(p) for p in TP], 0.0, Path, [(profile, [15])])
    ranks = {r["rank"]: r for r in table["ranks"]}
    assert table["rank"] == "1" and table["critical_rank"] == 1
    critical = ranks["1"]
    assert step["bound_us"] == min(critical["exposed_us"], critical["computation_outside_us"]) > 0
    assert step["basis"] == "measured + modelled" and "modelled from the engine's structure" in step["detail"]
    assert all(r["overlap_share"] == 0.0 for r in table["ranks"])
    one, why = overlap_step({"profile": profile}, [str(TP[0])], 0.0, Path, [])
    assert one is None and why["status"].startswith("one rank")
