"""The levers step on a GPU box: one engine.sweep call, the planted null and 3% levers judged against
what was planted, the budget option. Engine answers are built from the H200's recorded CUDA-graph
runs (tests/data/lever-samples/h200.json); the planted delay adds to each step what the engine's
planted_delay report says it planted."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import pytest

from agent import stats
from agent.cli import build_parser
from agent.config import Target, budget_rounds, load_target, with_budget
from agent.engine_runs import applicability, baseline, bench_spec, sweep_args, with_lever
from agent.steps import levers as levers_step
from agent.steps.measurements import output_check
from schema.finding import Finding
from test_lever_stats import H200, SKETCHES
from tools.engines.reference import planted

TARGET, _ = load_target("dsv4-flash")
GRAPH_RUNS = [H200[18], H200[23]]  # the two recorded CUDA-graph runs of the baseline's setting


class GpuSweep:
    """engine.sweep on an H200 from recorded runs: each round's baseline run is one recorded graph run;
    a lever that changes nothing the engine reads gets the other recorded run (run-to-run spread, no
    effect); the planted delay gets the other run plus a spin of ``delay_frac`` of its step (what
    the engine's planted_delay reports, scaled by ``realised``: 0 when the spin did nothing); every
    other lever its round's run scaled by ``factors``."""

    def __init__(self, realised: float = 1.0, factors: dict[str, float] | None = None):
        self.args, self.seq, self.realised, self.factors = None, 40, realised, factors or {}

    def call(self, tool, args):
        assert tool == "engine.sweep"
        self.args = args
        self.seq += 2
        runs = []
        for run in args["spec"]["runs"]:
            name, repeat = run["label"].split("#")
            index = 0 if repeat == "warmup" else int(repeat[1:]) % 2
            samples, delay = list(GRAPH_RUNS[index]), None
            if name == "planted-null":
                samples = list(GRAPH_RUNS[1 - index])
            elif name == "planted-delay-3pct":
                samples = list(GRAPH_RUNS[1 - index])  # its own run's spread, then the spin on top
                step = median(samples)
                frac = run["changes"]["delay_frac"]
                delay_ms = self.realised * frac * step
                delay = planted.delay_report(frac, step, 1.98e6, planted.sleep_cycles(step, frac, 1.98e6), delay_ms)
                samples = [s + delay_ms for s in samples]
            elif name in self.factors:
                samples = [s * self.factors[name] for s in samples]
            row = {"batch": 16, "step_ms": median(samples), "step_ms_samples": samples, "layer_ms": median(samples) / 4,
                   "tok_s": 16e3 / median(samples), "tok_s_projected": 16e3 / (median(samples) / 4 * 43),
                   "output_sketch": SKETCHES["sglang-triton"], "planted_delay": delay}
            runs.append({"label": run["label"], "ok": True, "results": [row], "interpreter": False, "wall_s": 0.4})
        extrapolation = {"layers_run": 4, "layer_ids": [2, 3, 4, 5], "layer_ratios": [4, 128, 4, 128],
                         "run_mix": {"4": 2, "128": 2}, "model_mix": {"0": 2, "4": 21, "128": 20}, "layers_model": 43,
                         "rule": "x 43"}
        return {"ok": True, "seq": self.seq, "call_seq": self.seq - 1, "artifacts": [],
                "data": {"runs": runs, "interpreter": False, "extrapolation": extrapolation, "notes": [], "wall_s": 30.0}}


def _state():
    survey = Finding(index=1, step="survey", headline="h200", verdict="ok",
                     data={"box": {"device": "cuda"}, "stand_in": True})
    return {"findings": [survey.model_dump()]}


def test_every_engine_lever_applies_on_a_gpu_box_as_declared():
    levers = {lever.name: lever for lever in TARGET.levers}
    for name in ("compile", "moe-loop", "steps-per-graph-4", "planted-null", "planted-delay-3pct", "cuda-graph-off"):
        assert applicability(TARGET, levers[name], "cuda") is None, name
    spec = bench_spec(TARGET, "cuda", with_lever(TARGET, levers["moe-loop"], "cuda"), [16])
    assert (spec["moe"], spec["cuda_graph"]) == ("loop", False) and "compile" not in spec
    assert "delay_frac" not in bench_spec(TARGET, "cuda", with_lever(TARGET, levers["planted-null"], "cuda"), [16])
    # a loop lever that leaves the baseline's graphs on cannot run, and says why
    bad = levers["moe-loop"].model_copy(update={"options": {"moe": "loop"}})
    assert "cannot capture" in applicability(TARGET, bad, "cuda")
    assert "no option" in applicability(TARGET, levers["compile"].model_copy(update={"options": {"fuse": True}}), "cuda")


def test_sweep_args_send_each_run_as_its_changes_from_the_baseline():
    levers = {lever.name: lever for lever in TARGET.levers}
    base = baseline(TARGET, "cuda")
    runs = [("baseline#r1", base), ("planted-delay-3pct#r1", with_lever(TARGET, levers["planted-delay-3pct"], "cuda")),
            ("cuda-graph-off#r1", with_lever(TARGET, levers["cuda-graph-off"], "cuda"))]
    args = sweep_args(TARGET, "cuda", runs, 16)
    assert args["spec"]["base"] == bench_spec(TARGET, "cuda", base, [16])
    assert [r["changes"] for r in args["spec"]["runs"]] == [{}, {"delay_frac": 0.03}, {"cuda_graph": False}]


def test_on_the_h200_the_planted_null_and_3_percent_come_out_as_planted():
    engine = GpuSweep(factors={"cuda-graph-off": 1.85, "attention-torch-fallback": 2.5, "steps-per-graph-4": 0.97})
    finding = levers_step.sweep_levers(_state(), engine, TARGET)
    rounds = TARGET.thresholds.noise.rounds_for("cuda")
    tried = ["attention-torch-fallback", "cuda-graph-off", "compile", "moe-loop", "steps-per-graph-4", "planted-null",
             "planted-delay-3pct"]
    runs = engine.args["spec"]["runs"]
    assert len(runs) == 1 + len(tried) + rounds * (1 + len(tried))  # a warm-up of every setting, then the rounds
    assert [r["label"] for r in runs[:1 + len(tried)]] == [f"{name}#warmup" for name in ["baseline", *tried]]
    assert engine.args["spec"]["base"]["cuda_graph"] is True and runs[0]["label"] == "baseline#warmup"
    results = {r["name"]: r for r in finding.data["levers"]}
    assert finding.number("min_effect") == TARGET.thresholds.noise.min_effect_for("cuda") < 0.03
    assert finding.number("smallest_detectable_effect") <= 0.03

    null, delay = results["planted-null"], results["planted-delay-3pct"]
    assert null["status"] == "no change detected" and null["planted"]["as_expected"] is True
    assert delay["status"] == "moves down" and delay["planted"]["covered"] and delay["planted"]["as_expected"]
    assert delay["planted"]["expected_ratio"] == pytest.approx(1 / 1.03)
    assert delay["interval"][0] <= delay["planted"]["expected_ratio"] <= delay["interval"][1]
    assert results["steps-per-graph-4"]["status"] == "moves up" and results["cuda-graph-off"]["status"] == "moves down"
    assert [p["name"] for p in finding.data["planted"]] == ["planted-null", "planted-delay-3pct"]
    rows = {row[0]: row for row in finding.tables[0].rows}
    assert "planted delay: as expected (expected -2.9%" in rows["planted-delay-3pct"][5]
    assert rows["planted-null"][5].startswith("no change detected; planted null: as expected")
    assert rows["planted-null"][6] == str(engine.seq)  # the log column names the one sweep call


def test_a_planted_delay_that_did_not_land_is_reported_as_not_as_expected():
    finding = levers_step.sweep_levers(_state(), GpuSweep(realised=0.0), TARGET)
    delay = next(r for r in finding.data["levers"] if r["name"] == "planted-delay-3pct")
    assert delay["status"] != "moves down" and delay["planted"]["as_expected"] is False
    assert "NOT as expected" in next(row for row in finding.tables[0].rows if row[0] == "planted-delay-3pct")[5]
    no_reports = levers_step.planted_check("delay", "moves down", stats.Interval(0.97, 0.96, 0.98, 5, 0.95), [None])
    assert no_reports["as_expected"] is False and "no planted delay" in no_reports["note"]


def test_the_quick_budget_halves_the_rounds_and_the_finding_says_so():
    assert [budget_rounds(r, "quick") for r in (2, 3, 5, 9)] == [2, 2, 3, 5]
    assert budget_rounds(5, "normal") == 5
    with pytest.raises(ValueError):
        budget_rounds(5, "slow")
    quick = with_budget(TARGET, "quick")
    assert with_budget(TARGET, None) is TARGET
    # recorded in the target the run journals: a replay that loads it runs the same rounds
    assert Target.model_validate(quick.model_dump(mode="json")).thresholds.noise.rounds_for("cuda") == 3
    engine = GpuSweep()
    finding = levers_step.sweep_levers(_state(), engine, quick)
    assert len(engine.args["spec"]["runs"]) == 8 + 3 * 8
    sweep = finding.data["sweep"]
    assert (sweep["budget"], sweep["rounds"], sweep["rounds_normal"]) == ("quick", 3, 5)
    assert "quick budget" in finding.headline and "3 rounds instead of 5" in finding.tables[0].note


def test_the_cli_takes_a_budget():
    parser = build_parser()
    assert parser.parse_args(["investigate", "dsv4-flash", "--budget", "quick"]).budget == "quick"
    assert parser.parse_args(["investigate", "dsv4-flash"]).budget is None
    with pytest.raises(SystemExit):
        parser.parse_args(["investigate", "dsv4-flash", "--budget", "fast"])


RECORDED = json.loads((Path(__file__).parent / "data" / "lever-samples" / "h200-sweep.json").read_text())


class RecordedSweep:
    """engine.sweep answered with the recorded H200 sweep, after checking the step asks for that sweep."""

    def call(self, tool, args):
        assert tool == "engine.sweep" and args["spec"] == RECORDED["spec"]
        return {"ok": True, "seq": 12, "call_seq": 11, "artifacts": [], "data": RECORDED["result"]}


def test_the_recorded_h200_sweep_judges_the_planted_levers_right():
    finding = levers_step.sweep_levers(_state(), RecordedSweep(), TARGET)
    results = {r["name"]: r for r in finding.data["levers"]}
    assert finding.number("smallest_detectable_effect") <= 0.03
    assert results["planted-null"]["status"] == "no change detected" and results["planted-null"]["planted"]["as_expected"]
    delay = results["planted-delay-3pct"]
    assert delay["status"] == "moves down" and delay["planted"]["as_expected"]
    low, high = delay["interval"]
    assert low <= delay["planted"]["expected_ratio"] <= high
    assert 0.025 < delay["planted"]["frac"] < 0.035  # the spin measured in each run, near the planned 3%
    # one process, one deterministic baseline: its runs give the same output bit for bit
    assert finding.data["baseline"]["output"]["error"] == 0.0
    # fidelity: all 256 experts held; routing at batch 16 reaches ~80 distinct experts a layer, not all
    run = RECORDED["result"]["runs"][1]
    assert RECORDED["result"]["shapes"]["experts_run"] == 256
    assert all(60 <= n <= 96 for n in run["results"][0]["moe_distinct_experts"])


def test_a_near_tie_routing_flip_is_counted_not_called_a_wrong_answer():
    """On the H200 the torch attention fallback rounds differently from the Triton kernel; two of the
    16 requests then pick another expert on a near tie and differ by 10-24%, the rest by ~1%."""
    runs = {r["label"]: r["results"][0]["output_sketch"] for r in RECORDED["result"]["runs"]}
    base, torch_run = runs["baseline#r1"], runs["attention-torch-fallback#r1"]
    rows = stats.row_errors(base, torch_run)
    assert sum(e > 0.02 for e in rows) == 2 and stats.output_error(base, torch_run) > 0.05
    check = output_check(base, [torch_run], 0.02)
    assert check["ok"] is True and check["rows_beyond"] == 2 and "near tie" in check["note"]
    # a wrong answer moves every row: the CPU sketch with the attention output zeroed
    assert output_check(SKETCHES["sglang-triton"], [SKETCHES["attention-zeroed"]], 0.02)["ok"] is False
