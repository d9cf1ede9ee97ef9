"""The reference engine across processes (issue #14): TP2 and EP2 over gloo on the CPU give TP1's outputs,
each rank process writes its own trace with the gloo collectives in it, and the shards are SGLang's cuts."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
import torch

from tests.test_reference_engine import REPO, only_json, run_engine, tiny_spec
from tools.engines.reference import attention, bench, collective, model, shard, spec as spec_mod
from tools.engines.reference.spawn import merge_rows

# Norm-relative distance of two output sketches: bf16 rounding of partial sums added in another order
# is ~0.7% at these shapes (measured: TP2 0.69%, EP2 0.62%); a wrong shard (a head, group or expert
# cut in the wrong place) gives tens of %.
SKETCH_RTOL = 0.02


def _tp1_sketches(batch_sizes: list[int]) -> dict[int, torch.Tensor]:
    """TP1's output sketches, run in this process (the code path of an engine.bench at tp 1)."""
    spec = spec_mod.BenchSpec.model_validate(tiny_spec(tp=1, pad_heads_to=None, batch_sizes=batch_sizes))
    with torch.inference_mode():
        shapes, weights = bench.build_weights(spec, torch.device("cpu"))
        rows = [bench.measure(spec, shapes, weights, b, torch.device("cpu"), attention.load_backend("torch"))
                for b in batch_sizes]
    return {r["batch"]: torch.tensor(r["output_sketch"]["projections"]) for r in rows}


def _distance(sketch: dict, reference: torch.Tensor) -> float:
    got = torch.tensor(sketch["projections"])
    return float((got - reference).norm() / reference.norm())


@pytest.mark.slow
def test_tp2_ep2_and_tp1_in_one_distributed_sweep_equal_tp1(tmp_path):
    """One sweep in two gloo rank processes: TP2, EP2 (batch 1 leaves rank 1 no token to dispatch) and a
    TP1 run on rank 0 alone; every run's outputs are TP1's within rounding."""
    base = tiny_spec(distributed=True, batch_sizes=[1, 3], steps=2, warmup=0)
    runs = [{"label": "tp2", "changes": {}}, {"label": "ep2", "changes": {"ep": 2}},
            {"label": "tp1", "changes": {"tp": 1}}]
    proc = run_engine("sweep", "--spec", json.dumps({"base": base, "runs": runs}), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = only_json(proc.stdout)
    assert out["ok"] and out["parallel"]["backend"] == "gloo" and out["parallel"]["world"] == 2
    assert out["parallel"]["env"] == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                                      "NVSHMEM_DISABLE_NVLS": "1"}
    pids = {r["pid"] for r in out["parallel"]["ranks"]}
    assert len(pids) == 2
    reference = _tp1_sketches([1, 3])
    by_label = {run["label"]: run for run in out["runs"]}
    assert [(by_label[k]["tp"], by_label[k]["ep"]) for k in ("tp2", "ep2", "tp1")] == [(2, 1), (2, 2), (1, 1)]
    for label, run in by_label.items():
        assert run["ok"], run
        for row in run["results"]:
            assert _distance(row["output_sketch"], reference[row["batch"]]) <= SKETCH_RTOL, (label, row["batch"])
            ranks = 1 if label == "tp1" else 2
            assert [r["rank"] for r in row["ranks"]] == list(range(ranks))
            assert row["critical_rank"] in range(ranks) and row["imbalance"] >= 0
            assert all(0 < r["comm_ms"] < r["step_ms"] for r in row["ranks"]) or label == "tp1"


@pytest.mark.slow
def test_tp2_bench_writes_one_trace_per_rank_process_with_gloo_collectives(tmp_path):
    spec = tiny_spec(distributed=True, batch_sizes=[2], steps=2, warmup=0, profile={"batch": 2, "steps": 2})
    proc = run_engine("bench", "--spec", json.dumps(spec), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = only_json(proc.stdout)
    names = ["reference-b2-TP-0.trace.json.gz", "reference-b2-TP-1.trace.json.gz"]
    assert out["trace"]["files"] == names and out["trace"]["file"] == names[0]
    row = out["results"][0]
    assert row["step_ms_samples"] == [max(a, b) for a, b in zip(*(r["step_ms_samples"] for r in row["ranks"]))]
    assert any("TP2: 2 processes" in note for note in out["notes"])
    pids = []
    for rank, name in enumerate(names):
        with gzip.open(tmp_path / name, "rt") as fh:
            trace = json.load(fh)
        assert trace["distributedInfo"]["rank"] == rank and trace["distributedInfo"]["backend"] == "gloo"
        events = trace["traceEvents"]
        pids.append({e["pid"] for e in events if e.get("ph") == "X" and isinstance(e.get("pid"), int)})
        # two all-reduces a layer (attention output, MoE block) x 2 layers x 2 profiled steps
        assert sum(e["name"] == "gloo:all_reduce" for e in events) == 2 * 2 * 2
    assert pids[0].isdisjoint(pids[1]) and {r["pid"] for r in out["trace"]["ranks"]} == pids[0] | pids[1]
    # the trace tool reads them per rank and merged, with the collectives in their own category
    tables = subprocess.run([sys.executable, "-m", "tools.trace", "--by-rank", *(str(tmp_path / n) for n in names)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert tables.returncode == 0, tables.stderr
    summary = json.loads(tables.stdout)
    assert sorted(summary["ranks"]) == ["0", "1"]
    assert summary["merged"]["categories"]["communication"] > 0


def test_shards_put_back_together_are_the_whole_layer():
    """TP: heads, groups and FFN columns cut into contiguous slices (gate and up halves each); EP: experts."""
    shapes = spec_mod.rank_shapes(spec_mod.BenchSpec.model_validate(tiny_spec(tp=1, pad_heads_to=None)))
    full = model.make_layer_weights(shapes, 4, torch.Generator().manual_seed(0), "cpu")
    parts = [shard.shard_layer(full, r, 2, 1, kernel_heads=8) for r in range(2)]
    assert torch.equal(torch.cat([p.wq_b for p in parts]), full.wq_b)
    assert torch.equal(torch.cat([p.wo_a for p in parts]), full.wo_a)
    assert torch.equal(torch.cat([p.wo_b for p in parts], dim=1), full.wo_b)
    assert torch.equal(torch.cat([p.attn_sink[:4] for p in parts]), full.attn_sink)
    assert all(p.attn_sink[4:].abs().sum() == 0 for p in parts)  # padded heads: no sink
    gates = torch.cat([p.w13.chunk(2, dim=1)[0] for p in parts], dim=1)
    assert torch.equal(torch.cat([gates, torch.cat([p.w13.chunk(2, dim=1)[1] for p in parts], dim=1)], dim=1), full.w13)
    assert torch.equal(torch.cat([p.w2 for p in parts], dim=2), full.w2)
    assert all(p.wkv is full.wkv and p.gate is full.gate and p.index_wq_b is full.index_wq_b for p in parts)
    experts = [shard.shard_layer(full, r, 2, 2, kernel_heads=8) for r in range(2)]
    assert torch.equal(torch.cat([p.w13 for p in experts]), full.w13) and experts[0].w13.shape[0] == 4
    assert all(p.shared_w13 is full.shared_w13 for p in experts)


def test_token_slices_cover_the_batch():
    assert [collective.token_slice(3, r, 2) for r in range(2)] == [(0, 2, 2), (2, 3, 2)]
    assert [collective.token_slice(1, r, 2) for r in range(2)] == [(0, 1, 1), (1, 1, 1)]


@pytest.mark.parametrize("changes, expected", [
    ({"ep": 2}, "needs distributed"),
    ({"ep": 2, "tp": 4, "distributed": True}, "must be 1 or tp"),
    ({"ep": 2, "distributed": True, "experts": 3}, "not divisible by ep"),
])
def test_bad_parallel_specs(changes, expected):
    with pytest.raises(ValueError, match=expected):
        spec_mod.BenchSpec.model_validate(tiny_spec(**changes))


def test_tp_and_ep_are_per_run_fields_only_of_a_distributed_sweep():
    runs = [{"label": "a", "changes": {"ep": 2}}]
    with pytest.raises(ValueError, match="not per-run fields"):
        spec_mod.SweepSpec.model_validate({"base": tiny_spec(), "runs": runs})
    sweep = spec_mod.SweepSpec.model_validate({"base": tiny_spec(distributed=True, tp=1),
                                               "runs": runs[:0] + [{"label": "b", "changes": {"tp": 2}}]})
    assert sweep.world() == 2


def test_merged_row_takes_the_slowest_rank_step_by_step():
    def row(rank, steps, comm):
        return {"batch": 2, "output_sketch": {}, "step_ms": 0, "rank": {"rank": rank, "pid": 10 + rank,
                "step_ms_samples": steps, "comm_ms_samples": comm}}

    merged = merge_rows([row(0, [10.0, 12.0, 11.0], [6.0, 7.0, 6.0]), row(1, [11.0, 11.0, 11.0], [2.0, 3.0, 2.0])], 2, 4)
    assert merged["step_ms_samples"] == [11.0, 12.0, 11.0] and merged["step_ms"] == 11.0
    assert merged["projected_step_ms"] == pytest.approx(22.0) and "rank" not in merged
    assert [r["busy_ms"] for r in merged["ranks"]] == [5.0, 9.0]
    assert merged["critical_rank"] == 1 and merged["imbalance"] == pytest.approx(9.0 / 7.0 - 1)
