"""The options step's floors: each fallback kernel's time against bytes / bandwidth and FLOPs / matmul
rate, and the Amdahl bound with that kernel at its floor, on the shipped runs' real findings.

The CPU example (recorded with the floors) gives the measured rates and the engine's work model;
the H200 example's profile (a real GPU capture, recorded before the floors existed) gives real
kernel times, with the work model recomputed from its own reported shapes."""

import json
import math
from pathlib import Path

import pytest

from agent.state import Finding
from agent.steps import options
from agent.steps.ceiling import amdahl
from conftest import ROOT
from tools.engines.reference import work
from tools.engines.reference.spec import RankShapes

CPU = ROOT / "runs" / "examples" / "dsv4-flash-cpu-20261130"
H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261130"
KERNEL = "_tiled_sparse_decode_kernel"


def _state(run: Path, through: str = "gates") -> dict:
    """The graph's state as the options step saw it: the initial state and the findings up to ``through``."""
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    state = dict(next(e for e in events if e["kind"] == "initial_state")["state"])
    found = [json.loads(p.read_text()) for p in sorted((run / "findings").glob("*.json"))]
    last = next(f["index"] for f in found if f["step"] == through)
    state["findings"] = [f for f in found if f["index"] <= last]
    return state


def _finding(state: dict, step: str) -> dict:
    return next(f for f in state["findings"] if f["step"] == step)


def _with_rates(state: dict, gb_s: float, tflop_s: float, seq: int) -> dict:
    """The state with the survey carrying the given rates (for the H200 run, recorded without them)."""
    survey = _finding(state, "survey")
    numbers = {**survey["numbers"], "copy_gb_s": {"value": gb_s, "unit": "GB/s", "label": "", "seqs": [seq]},
               "matmul_tflop_s": {"value": tflop_s, "unit": "TFLOP/s", "label": "", "seqs": [seq]}}
    data = {**survey["data"], "survey": {**survey["data"]["survey"], "rates": {"matmul": {"dtype": "bfloat16"}}}}
    findings = [{**f, "numbers": numbers, "data": data} if f is survey else f for f in state["findings"]]
    return {**state, "findings": findings}


def _with_work(state: dict, attention_work: dict | None) -> dict:
    profile = _finding(state, "profile")
    changed = {**profile, "data": {**profile["data"], "attention_work": attention_work}}
    return {**state, "findings": [changed if f is profile else f for f in state["findings"]]}


def _h200_work(state: dict) -> dict:
    """The work model at the H200 profile's own shapes and batch (what the engine now reports)."""
    profile = _finding(state, "profile")
    shapes = RankShapes.model_validate(profile["data"]["shapes"])
    return work.attention_work(shapes, profile["data"]["batch"], "sglang-triton")


def test_floor_is_the_larger_of_memory_and_compute_time():
    # 1 GB at 1000 GB/s is 1 ms; 1 TFLOP at 100 TFLOP/s is 10 ms: compute sets the floor
    assert options.kernel_floor_ms(1e9, 1e12, 1000.0, 100.0) == (pytest.approx(10.0), "compute")
    assert options.kernel_floor_ms(1e9, 1e9, 1000.0, 100.0) == (pytest.approx(1.0), "memory")


def test_a_kernel_at_its_floor_bounds_at_one_and_no_floor_is_the_instant_bound():
    profile = Finding.model_validate(_finding(_state(H200), "profile"))
    total, t = profile.number("total_ms"), profile.data["dominant"]["total_us"] / 1000
    assert options.floor_bound(total, [(t, t)]) == pytest.approx(1.0)
    assert options.floor_bound(total, [(t, None)]) == pytest.approx(amdahl(total, t))
    # a floor above the measured time (data cached between steps) is no slowdown
    assert options.floor_bound(total, [(t, 2 * t)]) == pytest.approx(1.0)
    # half the kernel's time left: T / (T - t/2), as Amdahl with a 2x kernel
    assert options.floor_bound(total, [(t, t / 2)]) == pytest.approx(amdahl(total, t, 2.0))
    with pytest.raises(ValueError):
        options.floor_bound(t / 2, [(t, None)])


def test_h200_kernel_at_its_floor_gives_one_x():
    """Rates chosen so that the H200's real kernel time is exactly its memory floor: the option's
    floor bound is 1.0x while its instant bound stays the ceiling's T / (T - t)."""
    state = _with_work(_state(H200), None)
    state = _with_work(state, _h200_work(state))
    profile = Finding.model_validate(_finding(state, "profile"))
    t = profile.data["dominant"]["total_us"] / 1000
    steps = profile.number("steps")
    window_bytes = profile.data["attention_work"]["kernels"][KERNEL]["bytes_per_step"] * steps
    gb_s = window_bytes / (t / 1e3) / 1e9  # the bandwidth at which the measured time is the floor
    flops = profile.data["attention_work"]["kernels"][KERNEL]["flops_per_step"] * steps
    tflop_s = 10 * flops / (t / 1e3) / 1e12  # compute 10x under the memory floor
    floors = options.fallback_floors(_with_rates(state, gb_s, tflop_s, 4), profile.number("total_ms"))
    (row,) = floors["kernels"]
    assert row["floor_from"] == "memory" and row["floor_ms"] == pytest.approx(t)
    assert row["headroom"] == pytest.approx(1.0) and floors["bound_x"] == pytest.approx(1.0)
    assert floors["instant_x"] == pytest.approx(amdahl(profile.number("total_ms"), t))


def test_h200_profile_calls_match_the_work_model():
    """The work model's calls a step x the steps profiled are the kernel launches the H200 trace holds."""
    state = _state(H200)
    profile = _finding(state, "profile")
    model = _h200_work(state)["kernels"][KERNEL]
    assert model["calls_per_step"] * profile["numbers"]["steps"]["value"] == profile["data"]["dominant"]["calls"]


def test_cpu_example_floor_and_headroom_against_a_hand_calculation():
    state = _state(CPU)
    survey, profile = (Finding.model_validate(_finding(state, s)) for s in ("survey", "profile"))
    shapes = profile.data["shapes"]
    batch, heads, steps = profile.data["batch"], shapes["kernel_heads"], profile.number("steps")
    # valid tokens a request per call of the one layer run (a c4 layer): the window, then the indexer's top-k
    (ratio,) = shapes["layer_compress_ratios"]
    assert ratio == 4
    tokens = [min(shapes["sliding_window"], shapes["context_len"] + 1), min(shapes["topk"], shapes["context_len"] // 4)]
    window_bytes = steps * sum(batch * n * 584 + 2 * batch * heads * 512 * 2 for n in tokens)
    window_flops = steps * sum(4 * batch * heads * n * 512 for n in tokens)
    floor_ms = 1e3 * max(window_bytes / (survey.number("copy_gb_s") * 1e9),
                         window_flops / (survey.number("matmul_tflop_s") * 1e12))
    t = next(k for k in profile.data["summary"]["merged"]["kernels"] if k["name"] == KERNEL)["total_us"] / 1000
    total = profile.number("total_ms")

    floors = options.fallback_floors(state, total)
    (row,) = floors["kernels"]
    assert (row["bytes"], row["flops"]) == (window_bytes, window_flops)
    assert row["floor_ms"] == pytest.approx(floor_ms)
    assert row["headroom"] == pytest.approx(t / floor_ms)
    assert floors["bound_x"] == pytest.approx(total / (total - t + floor_ms))
    assert floors["bound_x"] < floors["instant_x"]

    # the recorded options finding holds the same numbers, in its data and its floors table
    recorded = Finding.model_validate(_finding(_state(CPU, "options"), "options"))
    own = next(o for o in recorded.data["options"] if o["name"] == "own-fallbacks")
    assert own["upper_x"] == pytest.approx(total / (total - t + floor_ms))
    assert own["instant_x"] == pytest.approx(total / (total - t))
    table = next(tb for tb in recorded.tables if tb.title == "Fallback kernels against their floors")
    assert table.rows[0][:5] == [KERNEL, row["calls"], pytest.approx(t), window_bytes, window_flops]
    assert "measured on the box by box.survey" in table.note


def test_a_fallback_kernel_without_a_work_model_is_said_to_have_no_floor():
    state = _with_work(_state(CPU), None)
    total = Finding.model_validate(_finding(state, "profile")).number("total_ms")
    floors = options.fallback_floors(state, total)
    (row,) = floors["kernels"]
    assert row["floor_ms"] is None and row["note"] == "no floor (no bytes/FLOPs model)"
    assert floors["bound_x"] == pytest.approx(floors["instant_x"])
    assert floors["without_floor"] == [KERNEL]
    finding = options.propose_options(state, session=None)
    table = next(tb for tb in finding.tables if tb.title == "Fallback kernels against their floors")
    assert table.rows[0][6] == "no floor (no bytes/FLOPs model)"
    own = next(o for o in finding.data["options"] if o["name"] == "own-fallbacks")
    assert f"{KERNEL} without one, counted as instant" in own["bound_from"]


def test_work_that_does_not_account_for_the_profiled_calls_gives_no_floor():
    state = _state(CPU)
    profile = _finding(state, "profile")
    attention_work = json.loads(json.dumps(profile["data"]["attention_work"]))
    attention_work["kernels"][KERNEL]["calls_per_step"] += 1
    floors = options.fallback_floors(_with_work(state, attention_work), profile["numbers"]["total_ms"]["value"])
    assert floors["kernels"][0]["floor_ms"] is None and "profiled calls" in floors["kernels"][0]["note"]


def test_a_box_without_rates_bounds_as_instant_and_says_so():
    state = _state(CPU)
    survey = _finding(state, "survey")
    numbers = {k: v for k, v in survey["numbers"].items() if k not in ("copy_gb_s", "matmul_tflop_s")}
    data = {**survey["data"], "survey": {**survey["data"]["survey"], "rates": {"error": "torch is not installed on the box"}}}
    state = {**state, "findings": [{**f, "numbers": numbers, "data": data} if f is survey else f for f in state["findings"]]}
    finding = options.propose_options(state, session=None)
    table = next(tb for tb in finding.tables if tb.title == "Fallback kernels against their floors")
    assert "no floor (no measured rates (torch is not installed on the box))" == table.rows[0][6]
    own = next(o for o in finding.data["options"] if o["name"] == "own-fallbacks")
    assert own["upper_x"] == pytest.approx(own["instant_x"]) and not math.isinf(own["upper_x"])


def test_move_hardware_keeps_the_instant_bound_and_says_so():
    finding = Finding.model_validate(_finding(_state(CPU, "options"), "options"))
    by_name = {o["name"]: o for o in finding.data["options"]}
    move, own = by_name["move-hardware"], by_name["own-fallbacks"]
    assert move["upper_x"] == pytest.approx(own["instant_x"])
    assert "instant" in move["bound_from"] and "instant bound is kept" in move["estimate_basis"]

