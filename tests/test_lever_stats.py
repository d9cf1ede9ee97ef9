"""Lever statistics (agent/stats.py) and the levers step's judgement, on real recorded step samples.

Resampling model (the sweeps below): a sweep is a warm-up run then ``rounds`` rounds of
``A null slow`` (A the baseline; the levers' order rotated each round, as levers.sweep_plan orders them). The warm-up draws the first
recorded run of the journal (on the H200 the cold one, ~17.7 ms against ~12 ms warm; it must be
discarded or it would bias the baseline). Every other run picks one recorded warm run of the setting
uniformly at random, then resamples that run's step samples with replacement (as many as it has):
the pick carries the run-to-run spread, the resampling the spread within a run. The "null" lever
draws from the baseline's own warm runs (it changes nothing); the "slow" lever does too, with every
step sample multiplied by 1.05 (5% slower: true throughput ratio 1/1.05). Seeded, so each test is
deterministic.

Rounds are the target's own (agent/targets/dsv4-flash.yaml), as the sweep runs on each box: on the
H200 the baseline runs with CUDA graphs (thresholds.noise.rounds; the graph runs vary well under 1%, so
few rounds suffice), on the CPU Triton runs interpreted (thresholds.noise.rounds_cpu; runs vary a few %, and
a 5% change needs that many rounds to be detected in >= 95% of sweeps with a 3% minimum effect).
The minimum effect is the device's (thresholds.noise.min_effect_for): 1% on the GPU, 3% on the CPU.
"""

from __future__ import annotations

import json
import math
import random
from statistics import median
from pathlib import Path

import pytest

from agent import stats
from agent.config import load_target
from agent.engine_runs import applicability, baseline, best_setting, with_lever
from agent.stats import BASELINE, Run, analyze_sweep, speed_verdict
from agent.steps import levers as levers_step
from agent.steps.measurements import output_check
from schema.finding import Finding

DATA = Path(__file__).parent / "data" / "lever-samples"
SWEEPS = 1000
TARGET, _ = load_target("dsv4-flash")
RULES = TARGET.thresholds.noise


def recorded(name: str) -> dict[int, list[float]]:
    return {r["seq"]: r["step_ms_samples"] for r in json.loads((DATA / f"{name}.json").read_text())["runs"]}


H200, CPU = recorded("h200"), recorded("cpu")
# (first recorded run = the sweep's warm-up, the warm runs of the baseline as the sweep runs it, rounds)
SAMPLE_SETS = {
    "h200-cuda-graph": (H200[10], [H200[18], H200[23]], "cuda"),
    "cpu-interpreted": (CPU[10], [CPU[12], CPU[14], CPU[21]], "cpu"),
}


def draw(rng: random.Random, pool: list[list[float]], factor: float = 1.0) -> tuple[float, ...]:
    run = rng.choice(pool)
    return tuple(factor * rng.choice(run) for _ in run)


def resampled_sweep(rng, cold, pool, rounds, levers: dict[str, tuple[list[list[float]], float]]) -> list[Run]:
    """Runs in the order levers.sweep_plan gives, each drawn as the module docstring says."""
    runs = []
    for entry in levers_step.sweep_plan(list(levers), rounds, 1):
        if entry["warmup"]:  # every setting's first run is cold
            runs.append(Run(entry["setting"], draw(rng, [cold]), 0, warmup=True))
        elif entry["setting"] == BASELINE:
            runs.append(Run(BASELINE, draw(rng, pool), entry["round"]))
        else:
            lever_pool, factor = levers[entry["setting"]]
            runs.append(Run(entry["setting"], draw(rng, lever_pool, factor), entry["round"]))
    return runs


def _detection(name: str, slower: float, min_effect: float, seed: int = 20261201) -> tuple[float, float, float]:
    """Over SWEEPS resampled sweeps: how often the null lever moved, the slow one (step x ``slower``)
    moved down, and the slow one's interval covered its true ratio."""
    cold, pool, device = SAMPLE_SETS[name]
    rng = random.Random(seed)
    moved_null = moved_slow = covered = 0
    for _ in range(SWEEPS):
        sweep = analyze_sweep(resampled_sweep(rng, cold, pool, RULES.rounds_for(device),
                                              {"null": (pool, 1.0), "slow": (pool, slower)}),
                              RULES.confidence, min_effect)
        moved_null += speed_verdict(sweep.levers["null"].interval, min_effect) != "no change detected"
        slow = sweep.levers["slow"].interval
        moved_slow += speed_verdict(slow, min_effect) == "moves down"
        covered += slow.covers(1 / slower)
    return moved_null / SWEEPS, moved_slow / SWEEPS, covered / SWEEPS


@pytest.mark.parametrize("name", sorted(SAMPLE_SETS))
def test_resampled_sweeps_detect_5_percent_and_not_nothing(name):
    null, slow, covered = _detection(name, 1.05, RULES.min_effect_for(SAMPLE_SETS[name][2]))
    assert null <= 0.02, f"{name}: a lever that changes nothing moved in {null:.1%} of sweeps"
    assert slow >= 0.95, f"{name}: a 5% slower lever moved down in only {slow:.1%}"
    assert 0.90 <= covered <= 0.98, f"{name}: the interval covered the true 5% in {covered:.1%}"


def test_on_the_h200_graph_runs_a_planted_3_percent_is_detected_at_the_gpu_minimum():
    """The planted levers' case: on CUDA-graph runs, with the GPU's min_effect, a null lever stays
    "no change detected" and a 3% delay (ratio 1/1.03) moves down with its interval covering it."""
    min_effect = RULES.min_effect_for("cuda")
    assert min_effect < 0.03 <= RULES.min_effect_for("cpu")
    null, slow, covered = _detection("h200-cuda-graph", 1.03, min_effect, seed=3)
    assert null <= 0.02 and slow >= 0.95 and 0.90 <= covered <= 0.98, (null, slow, covered)
    # the CPU's minimum would have hidden it no better than chance: the GPU minimum is what makes 3% visible
    _, slow_at_cpu_minimum, _ = _detection("h200-cuda-graph", 1.03, RULES.min_effect_for("cpu"), seed=3)
    assert slow_at_cpu_minimum < 0.95


def test_the_torch_fallback_the_old_band_called_noise_moves_down():
    """H200, eager: the torch fallback's one recorded run (seq 16, ~16.5 ms) against the two warm eager
    baseline runs (~11.9 and ~12.7 ms). The old (max-min)/median band, cold run included, was +/-35%
    doubled to 70.9%, and called this -23% "within noise"; interleaved rounds call it a move down."""
    rng = random.Random(9)
    eager = [H200[12], H200[14]]
    down = 0
    for _ in range(SWEEPS):
        runs = resampled_sweep(rng, H200[10], eager, RULES.rounds_for("cuda"), {"torch": ([H200[16]], 1.0)})
        min_effect = RULES.min_effect_for("cuda")
        down += speed_verdict(analyze_sweep(runs, RULES.confidence, min_effect).levers["torch"].interval,
                              min_effect) == "moves down"
    assert down / SWEEPS >= 0.95


def test_the_cold_warm_up_is_discarded_and_would_bias_the_baseline():
    rng = random.Random(3)
    runs = resampled_sweep(rng, H200[10], [H200[12], H200[14]], 4, {"lever": ([H200[12], H200[14]], 1.0)})
    with_warmup = analyze_sweep(runs, 0.95, 0.03)
    without = analyze_sweep([r for r in runs if not r.warmup], 0.95, 0.03)
    assert [r.setting for r in runs if r.warmup] == [BASELINE, "lever"]  # one cold run of each setting
    assert with_warmup.baseline == without.baseline and with_warmup.levers == without.levers
    assert with_warmup.smallest_detectable_effect == without.smallest_detectable_effect
    assert with_warmup.warmup_ms == [median(r.samples) for r in runs if r.warmup]
    kept = analyze_sweep([Run(BASELINE, runs[0].samples, 1)] + runs[1:], 0.95, 0.03)
    assert kept.baseline.run_ms[0] > 1.3 * max(without.baseline.run_ms)  # the cold run, had it been kept
    assert kept.run_log_sd > 2 * without.run_log_sd


def test_t_quantile_against_published_tables():
    # two-sided 95% and one-sided 95% critical values of Student's t (any statistics table)
    for df, value in [(1, 12.706), (2, 4.303), (4, 2.776), (8, 2.306), (30, 2.042)]:
        assert stats.t_quantile(0.975, df) == pytest.approx(value, abs=5e-4)
    assert stats.t_quantile(0.95, 7) == pytest.approx(1.895, abs=5e-4)
    assert stats.t_quantile(0.025, 4) == pytest.approx(-stats.t_quantile(0.975, 4))
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)


def test_one_round_gives_no_interval_and_no_verdict():
    runs = [Run(BASELINE, (10.0,), 0, True), Run(BASELINE, (10.0, 10.2), 1), Run("fast", (5.0, 5.1), 1)]
    sweep = analyze_sweep(runs, 0.95, 0.03)
    interval = sweep.levers["fast"].interval
    assert interval.ratio == pytest.approx(10.1 / 5.05) and interval.low is None and "one round" in interval.note
    assert speed_verdict(interval, 0.03) == "no change detected"
    assert sweep.run_log_sd is None and sweep.smallest_detectable_effect is None


def test_zero_spread_gives_a_point_interval():
    runs = []
    for r in (1, 2, 3):
        runs += [Run(BASELINE, (10.0,), r), Run("same", (10.0,), r), Run(BASELINE, (10.0,), r), Run("half", (5.0,), r)]
    sweep = analyze_sweep(runs, 0.95, 0.03)
    same, half = sweep.levers["same"].interval, sweep.levers["half"].interval
    assert (same.low, same.ratio, same.high) == (1.0, 1.0, 1.0) and "zero spread" in same.note
    assert speed_verdict(same, 0.03) == "no change detected"
    assert half.low == pytest.approx(2.0) and half.high == pytest.approx(2.0)
    assert speed_verdict(half, 0.03) == "moves up"
    assert sweep.run_log_sd == 0.0 and sweep.smallest_detectable_effect == 0.03  # the minimum is all that is left


def test_failed_runs_are_counted_and_unpair_their_neighbour():
    runs = [Run(BASELINE, (10.0,), 1), Run("l", (8.0,), 1),
            Run(BASELINE, None, 2), Run("l", (8.2,), 2),     # baseline failed: that lever run has no pair
            Run(BASELINE, (10.1,), 3), Run("l", None, 3),    # lever failed
            Run(BASELINE, (9.9,), 4), Run("l", (8.1,), 4)]
    sweep = analyze_sweep(runs, 0.95, 0.03)
    lever = sweep.levers["l"]
    assert sweep.baseline.failed == 1 and sweep.baseline.run_ms == [10.0, 10.1, 9.9]
    assert lever.failed == 1 and lever.unpaired == 1 and lever.run_ms == [8.0, 8.2, 8.1]
    assert lever.interval.n == 2 and lever.median_ms == 8.1


def test_a_lever_whose_runs_all_failed_has_no_median_or_interval():
    runs = [Run(BASELINE, (10.0,), r) if i % 2 == 0 else Run("broken", None, r)
            for r in (1, 2) for i in range(2)]
    lever = analyze_sweep(runs, 0.95, 0.03).levers["broken"]
    assert lever.median_ms is None and lever.failed == 2 and lever.interval.ratio is None


def test_an_interval_that_excludes_one_but_misses_the_minimum_is_no_change():
    small = stats.Interval(1.01, 1.005, 1.015, 5, 0.95)
    assert small.excludes_no_change() and speed_verdict(small, 0.03) == "no change detected"
    assert speed_verdict(stats.Interval(1.04, 1.02, 1.06, 5, 0.95), 0.03) == "moves up"
    assert speed_verdict(stats.Interval(1 / 1.04, 0.94, 0.98, 5, 0.95), 0.03) == "moves down"
    assert speed_verdict(stats.Interval(1.2, 0.9, 1.5, 5, 0.95), 0.03) == "no change detected"


def test_smallest_detectable_effect_shrinks_with_rounds_until_the_minimum():
    sd = 0.02
    sizes = [stats.smallest_detectable_effect(sd, r, 0.95, 0.0) for r in (2, 4, 8, 16)]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[2] == pytest.approx(math.expm1(stats.t_quantile(0.975, 7) * math.sqrt(2) * sd / math.sqrt(8)))
    assert stats.smallest_detectable_effect(sd, 1000, 0.95, 0.03) == 0.03
    assert stats.smallest_detectable_effect(sd, 1, 0.95, 0.03) is None


def test_unpaired_ratio_interval_for_a_prediction_check():
    # the H200 baseline with graphs (two runs) against the split-K run (one): needs a spread from elsewhere
    graph = [median(H200[18]), median(H200[23])]
    splitk = [median(H200[57])]
    alone = stats.ratio_interval(graph, splitk, 0.95)
    assert alone.low is None and "no run-to-run spread" in alone.note
    assert alone.ratio == pytest.approx(math.exp(sum(math.log(g) for g in graph) / 2 - math.log(splitk[0])))
    given = stats.ratio_interval(graph, splitk, 0.95, log_sd=0.01, df=8)
    assert given.low < given.ratio < given.high
    assert given.high / given.low == pytest.approx(math.exp(2 * stats.t_quantile(0.975, 8) * 0.01 * math.sqrt(1.5)))
    both = stats.ratio_interval([median(H200[12]), median(H200[14])], graph, 0.95)
    assert both.low < 12.2 / 6.5 < both.high and both.n == 4  # Welch on the log run medians
    wider = stats.ratio_interval([median(H200[12]), median(H200[14])], graph, 0.99)
    assert wider.low < both.low and wider.high > both.high


SKETCHES = json.loads((DATA / "cpu-output-sketches.json").read_text())["sketches"]


def test_output_check_passes_backends_that_compute_the_same_function():
    base = SKETCHES["sglang-triton"]
    for other in ("torch", "splitk"):
        assert stats.output_error(base, SKETCHES[other]) <= RULES.output_rtol
    assert stats.output_error(base, base) == 0.0


def test_output_check_catches_a_wrong_answer():
    base = SKETCHES["sglang-triton"]
    assert stats.output_error(base, SKETCHES["attention-zeroed"]) > 5 * RULES.output_rtol
    check = output_check(base, [SKETCHES["torch"], SKETCHES["attention-zeroed"]], RULES.output_rtol)
    assert check["ok"] is False  # the worst run decides
    assert output_check(base, [SKETCHES["torch"], None], RULES.output_rtol)["ok"] is None
    fewer_rows = {**base, "projections": base["projections"][:2], "row_norms": base["row_norms"][:2]}
    with pytest.raises(ValueError):
        stats.output_error(base, fewer_rows)


def test_sweep_plan_runs_the_baseline_then_each_lever_rotated_every_round():
    plan = levers_step.sweep_plan(["b", "c"], 3, 1)
    assert [(p["setting"], p["repeat"]) for p in plan] == [
        (BASELINE, "warmup"), ("b", "warmup"), ("c", "warmup"), (BASELINE, "r1"), ("b", "r1"), ("c", "r1"),
        (BASELINE, "r2"), ("c", "r2"), ("b", "r2"), (BASELINE, "r3"), ("b", "r3"), ("c", "r3")]
    assert [p["setting"] for p in levers_step.sweep_plan([], 2, 0)] == [BASELINE, BASELINE]
    # every lever run is paired with its own round's baseline run
    ms = {BASELINE: 10.0, "b": 8.0, "c": 12.5}
    runs = [Run(p["setting"], (ms[p["setting"]] * (1 + 0.01 * p["round"]),), p["round"], p["warmup"]) for p in plan]
    sweep = analyze_sweep(runs, 0.95, 0.01)
    assert sweep.levers["b"].interval.n == 3 and sweep.levers["b"].interval.ratio == pytest.approx(10 / 8)
    assert sweep.levers["c"].interval.ratio == pytest.approx(10 / 12.5) and sweep.levers["c"].unpaired == 0


def test_the_baseline_runs_as_the_deployment_with_graphs_off_a_lever():
    off = next(lever for lever in TARGET.levers if lever.name == "cuda-graph-off")
    assert baseline(TARGET, "cuda").options["cuda_graph"] is True
    assert baseline(TARGET, "cpu").options["cuda_graph"] is False
    assert applicability(TARGET, off, "cuda") is None
    assert with_lever(TARGET, off, "cuda").options["cuda_graph"] is False
    assert "no GPU" in applicability(TARGET, off, "cpu")


def _result(name, status, ratio, comparable=True, output_ok=True):
    return {"name": name, "status": status, "ratio": ratio, "comparable": comparable, "output": {"ok": output_ok},
            "interval": [ratio * 0.99, ratio * 1.01], "tok_s": 100 * ratio, "seqs": [1]}


def test_best_setting_is_a_measured_comparable_mover_with_the_same_output():
    torch_lever, graph_off = "attention-torch-fallback", "cuda-graph-off"
    assert best_setting(TARGET, {"levers": []}) == []
    assert [lv.name for lv in best_setting(TARGET, {"levers": [_result(torch_lever, "moves up", 1.5),
                                                                _result(graph_off, "moves up", 1.2)]})] == [torch_lever]
    assert best_setting(TARGET, {"levers": [_result(torch_lever, "not comparable", 150.0, comparable=False)]}) == []
    assert best_setting(TARGET, {"levers": [_result(torch_lever, "changes the output", 2.0, output_ok=False)]}) == []
    assert best_setting(TARGET, {"levers": [_result(torch_lever, "moves up", 1.5, output_ok=None)]}) == []
    assert best_setting(TARGET, {"levers": [_result(torch_lever, "moves up", 1.5)]}, what_if={"torch"}) == []
    assert best_setting(TARGET, {"levers": [_result(torch_lever, "moves down", 0.8)]}) == []


class FakeSweep:
    """engine.sweep answered from the recorded CPU runs: baseline runs cycle through the recorded warm
    runs round by round, the torch lever returns its recorded run, any other lever its round's
    baseline run (it changes nothing), each with the recorded output sketches."""

    def __init__(self, torch_sketch: str, fail: set[str] = frozenset()):
        self.calls, self.seq, self.torch_sketch, self.fail = [], 100, torch_sketch, fail
        self.base = [CPU[12], CPU[14], CPU[21]]

    def call(self, tool, args):
        assert tool == "engine.sweep"
        self.calls.append(args)
        self.seq += 2
        base = args["spec"]["base"]
        runs = []
        for run in args["spec"]["runs"]:
            attention = run["changes"].get("attention", base["attention"])
            torch = attention == "torch"
            repeat = run["label"].split("#")[1]
            samples = CPU[16] if torch else self.base[0 if repeat == "warmup" else int(repeat[1:]) % 3]
            sketch = SKETCHES[self.torch_sketch if torch else "sglang-triton"]
            step = median(samples)
            row = {"batch": 4, "step_ms": step, "step_ms_samples": samples, "layer_ms": step, "tok_s": 4e3 / step,
                   "tok_s_projected": 4e3 / (43 * step), "output_sketch": sketch, "planted_delay": None}
            if run["label"] in self.fail:
                runs.append({"label": run["label"], "ok": False, "error": "RuntimeError: boom", "kind": "error"})
            else:
                runs.append({"label": run["label"], "ok": True, "results": [row], "interpreter": not torch,
                             "attention": attention, "wall_s": 1.0})
        extrapolation = {"layers_run": 1, "layer_ids": [2], "layer_ratios": [4], "run_mix": {"4": 1},
                         "model_mix": {"0": 2, "4": 21, "128": 20}, "layers_model": 43, "rule": "x 43"}
        return {"ok": True, "seq": self.seq, "call_seq": self.seq - 1, "artifacts": [],
                "data": {"runs": runs, "interpreter": True, "extrapolation": extrapolation, "notes": ["one process"],
                         "wall_s": 9.0, "weights_s": 0.1}}


def _state():
    survey = Finding(index=1, step="survey", headline="cpu", verdict="ok",
                     data={"box": {"device": "cpu"}, "stand_in": True})
    return {"findings": [survey.model_dump()]}


def test_the_levers_step_on_recorded_cpu_runs():
    bench = FakeSweep("torch")
    finding = levers_step.sweep_levers(_state(), bench, TARGET)
    rounds = RULES.rounds_for("cpu")
    assert len(bench.calls) == 1  # the whole sweep is one engine call
    runs = bench.calls[0]["spec"]["runs"]
    labels = [r["label"] for r in runs]
    assert labels[:6] == ["baseline#warmup", "attention-torch-fallback#warmup", "baseline#r1",
                          "attention-torch-fallback#r1", "baseline#r2", "attention-torch-fallback#r2"]
    # flashinfer not in the reference engine, graph options moot on a CPU, compile, moe-loop and planted skipped
    assert len(runs) == 2 + 2 * rounds
    assert runs[0]["changes"] == {} and runs[3]["changes"] == {"attention": "torch"}
    assert runs[3]["env"]["SGLANG_SM120_FLASHMLA_BACKEND"] == "torch"
    results = {r["name"]: r for r in finding.data["levers"]}
    torch_result = results["attention-torch-fallback"]
    assert torch_result["status"] == "not comparable" and torch_result["output"]["ok"] is True
    assert torch_result["runs"] == rounds
    assert results["cuda-graph-off"]["status"] == "not tried" and results["attention-flashinfer"]["status"] == "not tried"
    for name in ("compile", "moe-loop", "planted-null", "planted-delay-3pct"):
        assert results[name]["status"] == "not tried" and results[name]["reason"] == \
            next(lv for lv in TARGET.levers if lv.name == name).skip_on["cpu"]
    assert "CUDA graphs" in results["steps-per-graph-4"]["reason"]
    assert finding.evidence == [bench.seq] and torch_result["seqs"] == [bench.seq]
    assert finding.data["sweep"]["one_process"] and finding.data["sweep"]["seq"] == bench.seq
    assert f"log line {bench.seq}" in finding.tables[0].note and "one engine process" in finding.tables[0].note
    assert finding.data["extrapolation"]["layer_ms"] == pytest.approx(finding.number("baseline_step_ms"))
    assert "x 43 = " in finding.data["extrapolation"]["text"]
    assert finding.data["best"]["levers"] == [] and finding.data["baseline_options"] == {"cuda_graph": False}
    rows = {row[0]: row for row in finding.tables[0].rows}
    assert rows["baseline (warm-up, discarded)"][5] == "warm-up"
    assert "not comparable" in rows["attention-torch-fallback"][3] and rows["attention-torch-fallback"][4] == str(rounds)
    assert finding.number("min_effect") == RULES.min_effect_for("cpu")
    assert finding.number("smallest_detectable_effect") >= RULES.min_effect_for("cpu")
    low, high = torch_result["interval"]
    assert finding.number("attention-torch-fallback_ratio_low") == low and low < torch_result["ratio"] < high
    base_ms = [median(s) for s in (CPU[12], CPU[14], CPU[21])]
    assert min(base_ms) <= finding.number("baseline_step_ms") <= max(base_ms)


def test_a_lever_that_changes_the_output_is_reported_so_whatever_its_speed():
    finding = levers_step.sweep_levers(_state(), FakeSweep("attention-zeroed"), TARGET)
    torch_result = next(r for r in finding.data["levers"] if r["name"] == "attention-torch-fallback")
    assert torch_result["status"] == "changes the output" and torch_result["output"]["error"] > RULES.output_rtol
    assert torch_result["ratio"] > 10  # far faster, and still not a candidate
    assert best_setting(TARGET, finding.data) == []
