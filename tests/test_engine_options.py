"""Reference-engine options (compile, moe, steps_per_graph, delay_frac), the planted delay's arithmetic
and the in-process sweep (``python -m tools.engines.reference sweep``), on the CPU at tiny shapes."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from agent.config import load_target
from test_reference_engine import TINY, only_json, run_engine, tiny_spec
from tools.engines.reference import bench, model, planted, spec as spec_mod
from tools.engines.reference.attention import load_backend

# The lever sweep's output tolerance: a lever whose sketch differs by more "changes the output".
RTOL = load_target("dsv4-flash")[0].thresholds.noise.output_rtol


def _measure(**changes) -> dict:
    spec = spec_mod.BenchSpec.model_validate(tiny_spec(batch_sizes=[3], steps=1, warmup=0, **changes))
    device = torch.device("cpu")
    with torch.inference_mode():
        shapes, weights = bench.build_weights(spec, device)
        return bench.measure(spec, shapes, weights, 3, device, load_backend(spec.attention))


def _error(a: dict, b: dict) -> float:
    from agent.stats import output_error

    return output_error(a["output_sketch"], b["output_sketch"])


def test_the_per_expert_loop_computes_what_the_grouped_gemm_does():
    shapes = spec_mod.rank_shapes(spec_mod.BenchSpec.model_validate(tiny_spec()))
    gen = torch.Generator().manual_seed(2)
    weights = model.make_layer_weights(shapes, 4, gen, "cpu")
    x = model.random_tensor((7, shapes.hidden), gen, "cpu")
    args = (x, weights.ffn_norm, weights.gate, weights.gate_bias, weights.w13, weights.w2, weights.shared_w13,
            weights.shared_w2, shapes.experts_per_token)
    grouped, loop = model.moe_grouped(*args), model.moe_loop(*args)
    routed = (grouped - x).float()
    assert routed.abs().max() > 0.1  # the experts contribute: equal outputs are not both just the residual
    assert (loop.float() - grouped.float()).abs().max() <= 2 ** -6 * routed.abs().max()
    # an engine step with either gives the same output sketch within the lever sweep's tolerance
    assert _error(_measure(), _measure(moe="loop")) <= RTOL


def test_the_step_reports_the_distinct_experts_its_routing_picked():
    row = _measure()
    spec = spec_mod.BenchSpec.model_validate(tiny_spec())
    shapes = spec_mod.rank_shapes(spec)
    assert len(row["moe_distinct_experts"]) == shapes.layers_run
    # 3 tokens x 2 experts each over 8 experts: between 2 and 6 distinct a layer
    assert all(shapes.experts_per_token <= n <= min(6, shapes.experts_run) for n in row["moe_distinct_experts"])
    assert row["planted_delay"] is None


@pytest.mark.slow
def test_compile_gives_the_baselines_output():
    """torch.compile of the non-attention part on the CPU (inductor, C++): the same function. Without
    bf16 rounding emulated (model._compiled) a near tie in the router flipped an expert here: 19%."""
    base, compiled = _measure(), _measure(compile=True)
    assert _error(base, compiled) <= RTOL
    impl = model.step_impl("grouped", compile=True)
    assert impl.compiled and impl.pre_attention is not model.pre_attention
    assert model.step_impl("loop", compile=True).moe is model.moe_loop  # the loop's host read stays eager


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({"steps_per_graph": 4}, "steps_per_graph 4 needs cuda_graph"),
        ({"moe": "loop", "cuda_graph": True, "device": "cuda"}, "cannot be captured"),
        ({"delay_frac": 0.03}, "GPU spin"),
        ({"delay_frac": 0.6, "device": "cuda"}, "delay_frac"),
        ({"moe": "scatter"}, "moe"),
    ],
)
def test_option_combinations_the_engine_cannot_run_are_refused(changes, expected):
    with pytest.raises(Exception) as err:
        spec_mod.BenchSpec.model_validate(tiny_spec(**changes))
    assert expected in str(err.value)


def test_planted_delay_arithmetic():
    # 3% of a 6.5 ms step at 1.98e6 cycles a ms (1.98 GHz)
    assert planted.sleep_cycles(6.5, 0.03, 1.98e6) == round(0.03 * 6.5 * 1.98e6)
    assert planted.sleep_cycles(6.5, 0.0, 1.98e6) == 0 and planted.sleep_cycles(1e-9, 0.01, 1.0) == 1
    with pytest.raises(ValueError):
        planted.sleep_cycles(0.0, 0.03, 1e6)
    assert planted.expected_ratio(0.195, 6.5) == pytest.approx(1 / 1.03)
    report = planted.delay_report(0.03, 6.5, 1.98e6, 386100, 0.2)
    assert report["frac"] == pytest.approx(0.2 / 6.5) and report["expected_ratio"] == pytest.approx(6.5 / 6.7)
    # a spin of 386100 cycles that added 0.18 ms where 0.195 ms was wanted grows by 0.195 / 0.18
    assert planted.corrected_cycles(386100, 0.195, 0.18) == round(386100 * 0.195 / 0.18)
    assert planted.corrected_cycles(386100, 0.195, 0.0) == 386100  # nothing measured: no basis to correct
    assert planted.corrected_cycles(386100, 0.195, -0.01) == 386100


def _sweep(runs: list[dict], **base_changes):
    spec = {"base": tiny_spec(batch_sizes=[3], steps=2, warmup=1, **base_changes), "runs": runs}
    return run_engine("sweep", "--spec", json.dumps(spec))


def test_sweep_runs_in_order_each_with_its_own_samples_and_failures_as_results():
    runs = [{"label": "baseline#warmup"}, {"label": "baseline#r1"},
            {"label": "moe-loop#r1", "changes": {"moe": "loop"}},
            {"label": "null#r1", "env": {"PERF_INVESTIGATOR_PLANTED_NULL": "1"}},
            {"label": "flashmla#r1", "changes": {"attention": "flashmla"}},  # not on this box: that run fails
            {"label": "baseline#r2"},
            {"label": "flashmla#r2", "changes": {"attention": "flashmla"}}]  # failed before: not run again
    proc = _sweep(runs)
    assert proc.returncode == 0, proc.stderr
    out = only_json(proc.stdout)
    assert out["ok"] is True and out["sweep"] is True and out["interpreter"] is False
    assert [r["label"] for r in out["runs"]] == [r["label"] for r in runs]
    assert [line.split(":")[0] for line in proc.stderr.splitlines() if "] run " in line] == [
        f"[reference] run {i + 1}/{len(runs)} {r['label']}" for i, r in enumerate(runs)]
    failed, again = out["runs"][4], out["runs"][6]
    assert failed["ok"] is False and failed["kind"] == "missing_dependency" and "sgl-flash-mla" in failed["error"]
    assert again["ok"] is False and again["kind"] == "missing_dependency"
    assert again["error"].startswith("not run: the same setting failed in run 5 of this sweep")
    ok = [r for r in out["runs"] if r["ok"]]
    assert len(ok) == 5
    for r in ok:
        (row,) = r["results"]
        assert row["batch"] == 3 and len(row["step_ms_samples"]) == 2 and row["step_ms"] == statistics.median(row["step_ms_samples"])
        assert r["interpreter"] is False and r["wall_s"] > 0
    assert out["runs"][2]["moe"] == "loop" and out["runs"][1]["moe"] == "grouped"
    assert out["runs"][3]["env"] == {"PERF_INVESTIGATOR_PLANTED_NULL": "1"}
    base = ok[0]["results"][0]["output_sketch"]
    from agent.stats import output_error

    # the same setting twice in one process: the same output; the loop and the null lever within rounding
    assert output_error(base, ok[-1]["results"][0]["output_sketch"]) == 0.0
    assert all(output_error(base, r["results"][0]["output_sketch"]) <= 0.005 for r in ok)
    assert out["extrapolation"]["layers_run"] == 2 and out["extrapolation"]["layer_ratios"] == [4, 128]
    assert any("one process" in note for note in out["notes"])


@pytest.mark.parametrize(
    "runs,expected",
    [
        ([{"label": "a", "changes": {"layers": 1}}], "not per-run fields"),
        ([{"label": "a", "changes": {"steps_per_graph": 2}}], "runs[0] (a): steps_per_graph 2 needs cuda_graph"),
        ([{"label": "a", "changes": {"cuda_graph": True}}], "cuda_graph: needs a CUDA device"),
        ([], "runs"),
    ],
)
def test_a_bad_sweep_is_one_line_and_exit_2(runs, expected):
    proc = _sweep(runs)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and expected in proc.stderr
    assert only_json(proc.stdout)["kind"] == "bad_input"


def test_the_sweep_sets_each_runs_environment_and_restores_it(monkeypatch):
    from tools.engines.reference.sweep import _environment

    monkeypatch.setenv("PERF_INVESTIGATOR_KEEP", "before")
    monkeypatch.delenv("PERF_INVESTIGATOR_PLANTED_NULL", raising=False)
    import os

    with _environment({"PERF_INVESTIGATOR_PLANTED_NULL": "1", "PERF_INVESTIGATOR_KEEP": "during"}):
        assert os.environ["PERF_INVESTIGATOR_PLANTED_NULL"] == "1" and os.environ["PERF_INVESTIGATOR_KEEP"] == "during"
    assert "PERF_INVESTIGATOR_PLANTED_NULL" not in os.environ and os.environ["PERF_INVESTIGATOR_KEEP"] == "before"


def test_the_engine_reads_no_planted_null_variable():
    """The planted null lever is honest only if nothing in the engine reads its variable."""
    from pathlib import Path

    root = Path(spec_mod.__file__).parents[2]
    sources = [p for p in root.rglob("*.py") if "PERF_INVESTIGATOR_PLANTED_NULL" in p.read_text()]
    assert sources == [], sources
    assert TINY  # the tiny shapes module loaded: this test sees the same engine


def test_a_run_that_runs_out_of_memory_is_that_runs_result_and_the_sweep_goes_on(monkeypatch):
    """One run of a one-process sweep running out of memory (as torch raises it) fails alone, with its
    kind and error; the next runs, of the same setting too, are measured."""
    from tools.engines.reference import sweep as sweep_mod

    measure, calls = bench.measure, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return measure(*args, **kwargs)

    monkeypatch.setattr(bench, "measure", flaky)
    spec = spec_mod.SweepSpec.model_validate({"base": tiny_spec(batch_sizes=[2], steps=2, warmup=1),
                                              "runs": [{"label": f"baseline#r{i}"} for i in range(1, 4)]})
    result = sweep_mod.run(spec)
    ok = [r["ok"] for r in result["runs"]]
    assert ok == [True, False, True]
    failed = result["runs"][1]
    assert failed["kind"] == "oom" and "out of memory" in failed["error"]
