"""The defects an outside audit found in the H100 example (runs/examples/dsv4-flash-h100-20261207, 2026-12-07:
the investigation with the declared sm_120 GPU's kernels), each checked on that run as shipped: its findings,
its report and its artifacts. Each test failed on the run as first shipped (commit cf32236)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import ROOT

RUN = ROOT / "runs" / "examples" / "dsv4-flash-h100-20261207"


def _finding(stem: str) -> dict:
    return json.loads((RUN / "findings" / f"{stem}.json").read_text())


def _report() -> str:
    return (RUN / "PROFILE_FINDINGS.md").read_text()


def _next_steps() -> dict:
    return _finding("10-report")["data"]["next_steps"]


def test_the_dominant_kernels_part_of_its_category_is_of_that_category():
    """Audit D6: "gemm/moe 55% (the dominant kernel 45% of it)", where 45% was its share of all kernel time."""
    round2 = _finding("09-round2")
    share = re.search(r"(\S+) (\d+)% \(the dominant kernel (\d+)% of it\)", round2["headline"])
    assert share, round2["headline"]
    category_pct, of_it = int(share.group(2)), int(share.group(3))
    top = round2["numbers"]["dominant_share"]["value"]  # of all kernel time
    assert abs(of_it - 100 * top / (category_pct / 100)) <= 1.5  # of the category, to the rounding of its two shares
    assert of_it > category_pct  # 81% of gemm/moe here, not the 45% of everything


def test_fusions_the_engine_already_runs_are_not_ranked_as_next_steps():
    """Audit D4: rms_norm, grouped_experts and apply_rope were ranked though SGLang's source runs them fused."""
    ns = _next_steps()
    fused_ops = {c["operation"] for c in ns["fusion"]["candidates"] if c["engine_fused"]}
    assert fused_ops, "the run names fused ops from the engine's source"
    ranked = [s for s in ns["steps"] if s["kind"] == "fusion"]
    assert all(not s["engine_fused"] for s in ranked)
    assert not any(s["what"] == f"fuse {op}'s kernel sequence" for s in ranked for op in fused_ops)
    assert fused_ops <= set(ns["already_fused"])  # each named in the sentence that says why it is not ranked
    assert "the stand-in's own overhead, not a step for the deployment" in _report()


def test_the_weight_gemm_step_bounds_at_the_checkpoints_lowest_precision():
    """Audit D3: "at most 1.35x" from halving the GEMMs' time, while FP4 experts read a quarter: no bound."""
    (step,) = [s for s in _next_steps()["steps"] if s["kind"] == "fp8"]
    gemm_us = float(re.search(r"kernels: ([\d.]+) us a step \(measured\)", step["detail"]).group(1))
    assert abs(step["bound_us"] - 0.75 * gemm_us) <= 0.75 * 0.5  # three quarters, to the detail's rounding
    assert "not measured here" in step["detail"]  # the deployment's precision on sm_120 is not the stand-in's


def test_the_rewrites_own_kernels_are_a_next_step():
    """Audit D9: the rewrite's kernels, 7.6% of W, outranked every fusion step and were not listed."""
    steps = _next_steps()["steps"]
    (mine,) = [s for s in steps if s["kind"] == "rewrite"]
    assert "_split_kernel_sm120" in mine["detail"] and mine["basis"] == "measured"
    assert mine["bound_us"] > max(s["bound_us"] for s in steps if s["kind"] == "fusion")


def test_the_recommendation_says_the_rewrite_changes_output_rows():
    """Audit D10: the first screen said the best lever changes 2 of 16 rows, not that the recommended rewrite does."""
    out = _finding("08-splitk")["data"]["output"]
    assert out["rows_beyond"] > 0
    first = _report().splitlines()[1]
    assert first.startswith("- **Recommendation:** take the split-K rewrite")
    assert f"changes {out['rows_beyond']} of {out['rows']} rows beyond" in first


def test_the_estimates_miss_is_not_blamed_on_pooling():
    """Audit D2: "the profiles measured 13.9x pooled over the calls" while pooling the benched calls gives 35.5x:
    the kernels ran slower in the engine than in their bench."""
    report = _report()
    splitk = _finding("08-splitk")
    benched = [c["bench"]["speedup_vs_upstream"] for c in splitk["data"]["calls"] if (c.get("bench") or {}).get("speedup_vs_upstream")]
    assert splitk["numbers"]["kernel_speedup"]["value"] < min(benched)
    assert "pooled over the calls" not in report
    assert "ran slower in the engine than alone" in report


def test_the_further_candidates_are_not_said_to_be_in_a_table_that_lacks_them():
    """Audit D7: "9 more operations' fusion candidates ... are in the table below", which held 2 of them."""
    assert "are in the table below" not in _report()
