"""The defects an outside audit found in the H100 example (runs/examples/dsv4-flash-h100-20261207, 2026-12-07:
the investigation with the declared sm_120 GPU's kernels), each checked on that run as shipped: its findings,
its report and its artifacts. Each test failed on the run as first shipped (commit cf32236). The last section's
items (citations and labels, a later audit of the same run) are checked on the run the current code regenerates
from its journal, and failed on it before their fixes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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


# -- the audit's citation and label items, on the run the current code regenerates from the recorded journal -------


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    """The H100 example regenerated by the current code (agent.regenerate: every tool result served from its
    journal, every finding and the report drawn anew; about 14 s)."""
    from agent.regenerate import regenerate

    out = tmp_path_factory.mktemp("h100-regen") / RUN.name
    outcome = regenerate(RUN, out)
    assert outcome.exit_code == 0, outcome.message
    return out


def _regen_finding(run: Path, stem: str) -> dict:
    return json.loads((run / "findings" / f"{stem}.json").read_text())


def _results(run: Path) -> dict[int, dict]:
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    return {e["seq"]: e for e in events if e["kind"] == "tool_result"}


def test_the_rounds_figures_cite_only_the_sweep_they_were_computed_from(regenerated):
    """Audit: the split-K tok/s (413.7 and 196.7) cited log 47-61, the engine's profiled run and every kernel check
    and bench among them; they, the ratio, its interval and round 2's step time come from the alternating rounds'
    engine.sweep (log 61) alone."""
    splitk, round2 = _regen_finding(regenerated, "08-splitk"), _regen_finding(regenerated, "09-round2")
    sweep = splitk["data"]["runs_ms"]["sweep_seq"]
    assert _results(regenerated)[sweep]["tool"] == "engine.sweep"
    for key in ("splitk_tok_s", "rounds_reference_tok_s", "measured_x", "measured_low_x", "measured_high_x"):
        assert splitk["numbers"][key]["seqs"] == [sweep], key
    for key in ("baseline_tok_s", "timed_step_ms", "projected_step_ms", "goal_gap_x"):
        assert round2["numbers"][key]["seqs"] == [sweep], key
    first = (regenerated / "PROFILE_FINDINGS.md").read_text().splitlines()[1]
    link = f"([08-splitk](findings/08-splitk.md); log [{sweep}](log.jsonl#L{sweep}))"
    assert f"**{splitk['numbers']['splitk_tok_s']['value']:.4g} tok/s** {link}" in first
    assert f"**{splitk['numbers']['rounds_reference_tok_s']['value']:.4g} tok/s** {link}" in first


def test_the_call_tables_configs_and_splits_cite_the_run_that_recorded_them(regenerated):
    """Audit: "compressed splits 4" (the split count chosen for the compressed cache) cited the call's check and
    bench (log 49, 51; 53 the what-if's), none of which holds it; it is read from the engine's record of its calls."""
    table = next(t for t in _regen_finding(regenerated, "08-splitk")["tables"] if t["title"].startswith("The engine's attention calls"))
    col = {name: i for i, name in enumerate(table["columns"])}
    results = _results(regenerated)
    for row in table["rows"]:
        cited = [int(s) for s in row[col["log"]].split(", ")]
        recorded = [c for s in cited for r in (results[s].get("data") or {}).get("results") or []
                    for c in r.get("attention_calls") or []]
        assert any((c["calls_per_step"], c["config"], c["splits"], c.get("extra_config"), c.get("extra_splits"))
                   == (row[col["calls a step"]], row[col["config"]], row[col["splits"]], row[col["compressed config"]],
                       row[col["compressed splits"]]) for c in recorded), (row, cited)


def test_the_users_declared_inputs_are_labelled_declared(regenerated):
    """Audit: the goal (1000 tok/s), its step budget and the declared GPU's 188 SMs were labelled "derived",
    which is arithmetic on measurements; they are the target's inputs."""
    report = (regenerated / "PROFILE_FINDINGS.md").read_text()
    lines = report.splitlines()
    assert "below the goal, **1000 tok/s** ([02-levers](findings/02-levers.md); declared)" in lines[1]
    assert "(a **16 ms** ([02-levers](findings/02-levers.md); declared) step budget)" in lines[1]
    assert "**188 SMs** ([01-survey](findings/01-survey.md); declared)" in lines[2]
    declared = {(stem, key) for stem in ("01-survey", "02-levers", "05-ceiling", "09-round2")
                for key, n in _regen_finding(regenerated, stem)["numbers"].items() if n.get("declared")}
    assert {("01-survey", "declared_sm_count"), ("02-levers", "goal_tok_s"), ("02-levers", "step_budget_ms"),
            ("02-levers", "min_effect"), ("05-ceiling", "goal_tok_s"), ("09-round2", "step_budget_ms")} <= declared
    survey = _regen_finding(regenerated, "01-survey")["numbers"]
    assert "declared" not in survey["copy_gb_s"]  # a measured number's record is as before: no field for it
    for stem, key in declared:  # each finding's own table says so too
        assert re.search(rf"^\| {key} \| [^|]+ \| [^|]+ \| declared \|$", (regenerated / "findings" / f"{stem}.md").read_text(), re.M)


def test_a_ratio_beside_its_interval_is_shown_to_the_intervals_digits(regenerated):
    """Audit: "2.1 x" beside "[2.069, 2.124]" (the point to its spread's digits, its ends to four): the point is
    shown to the digits of the interval beside it, in the first screen, its table and the closing summary."""
    from agent import summary

    report = (regenerated / "PROFILE_FINDINGS.md").read_text()
    # a bold ratio, its links (no other bold number between), then its interval
    beside = re.findall(r"\*\*(\d[\d.]*) x\*\* \((?:(?!\*\*).)*?\) \[(\d[\d.]*), (\d[\d.]*)\]", report)
    block = summary.block(summary.result(regenerated), RUN.name)
    beside += re.findall(r"Measured speedup: +(\d[\d.]*) x \[(\d[\d.]*), (\d[\d.]*)\]", block)
    assert len(beside) >= 3, (beside, block)  # the recommendation, the goal table's row, the summary
    measured = _regen_finding(regenerated, "08-splitk")["numbers"]["measured_x"]["value"]
    for point, low, high in beside:
        decimals = {len(x.split(".")[1]) if "." in x else 0 for x in (point, low, high)}
        assert len(decimals) == 1, (point, low, high)
        assert float(point) == pytest.approx(measured, abs=0.6 * 10 ** -decimals.pop())
