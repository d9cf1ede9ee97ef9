"""The options step's floors: each fallback kernel's time against bytes / bandwidth and FLOPs / matmul
rate, and the Amdahl bound with that kernel at its floor, on the shipped runs' real findings.

Both examples (the CPU one and the H200 one, a real GPU capture) carry the survey's measured rates and
the engine's work model; the tests recompute the work by hand from each profile's own shapes and set
it against the recorded rates and against rates chosen apart from any measurement, so that the
expected floor, headroom and bound are computed independently of the step."""

import json
import math
from pathlib import Path

import pytest

from agent.config import Target
from agent.steps import options
from agent.steps.amdahl import amdahl
from schema.finding import Finding
from conftest import ROOT
from tools.engines.reference import work
from tools.engines.reference.spec import RankShapes

CPU = ROOT / "runs" / "examples" / "dsv4-flash-cpu-20261202"
H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"
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


def test_h200_profile_calls_match_the_work_model():
    """The work model's calls a step x the steps profiled are the kernel launches the H200 trace holds."""
    state = _state(H200)
    profile = _finding(state, "profile")
    model = _h200_work(state)["kernels"][KERNEL]
    assert model["calls_per_step"] * profile["numbers"]["steps"]["value"] == profile["data"]["dominant"]["calls"]


def _operation_rest_ms(profile: Finding) -> float:
    """The dominant kernel's operation less the kernel, from the profile's own numbers (0 without one)."""
    if "operation_ms" not in profile.numbers:
        return 0.0
    return max(profile.number("operation_ms") - profile.data["dominant"]["total_us"] / 1000, 0.0)


def _hand_window(profile: Finding) -> tuple[int, int, int]:
    """Calls, bytes and FLOPs of the dominant kernel over the profiled window, by hand from the
    profile's shapes: each layer run makes a window-cache call over min(window, P + 1) valid tokens
    and, on a c4 / c128 layer, a compressed-cache call over min(top-k, P // 4) / P // 128 tokens (P
    the context length); a call reads B x T tokens of 584 bytes plus q and out (B x H x 512 bf16 each)
    and does 4 x B x H x T x 512 FLOPs (QK and PV, a multiply-add per dim)."""
    shapes, batch = profile.data["shapes"], profile.data["batch"]
    heads, position = shapes["kernel_heads"], shapes["context_len"]
    tokens = []
    for ratio in shapes["layer_compress_ratios"]:
        tokens.append(min(shapes["sliding_window"], position + 1))
        if ratio == 4:
            tokens.append(min(shapes["topk"], position // 4))
        elif ratio == 128:
            tokens.append(position // 128)
    steps = profile.number("steps")
    window_bytes = steps * sum(batch * n * 584 + 2 * batch * heads * 512 * 2 for n in tokens)
    window_flops = steps * sum(4 * batch * heads * n * 512 for n in tokens)
    return steps * len(tokens), window_bytes, window_flops


# Rates for the floor: the survey's own, and each of them 10^4 times slower (chosen, not measured), so
# that both the memory and the compute side set a floor and one lies above the measured time.
RATES = {"recorded": (1.0, 1.0), "slow-copy": (1e-4, 1.0), "slow-matmul": (1.0, 1e-4)}


@pytest.mark.parametrize("rates", sorted(RATES))
@pytest.mark.parametrize("run", [CPU, H200], ids=["cpu", "h200"])
def test_floor_headroom_and_bound_against_a_hand_calculation(run, rates):
    state = _state(run)
    survey, profile = (Finding.model_validate(_finding(state, s)) for s in ("survey", "profile"))
    copy_scale, matmul_scale = RATES[rates]
    gb_s, tflop_s = copy_scale * survey.number("copy_gb_s"), matmul_scale * survey.number("matmul_tflop_s")
    if rates != "recorded":
        state = _with_rates(state, gb_s, tflop_s, survey.numbers["copy_gb_s"].seqs[0])
    calls, window_bytes, window_flops = _hand_window(profile)
    memory_ms, compute_ms = 1e3 * window_bytes / (gb_s * 1e9), 1e3 * window_flops / (tflop_s * 1e12)
    floor_ms = max(memory_ms, compute_ms)
    t = next(k for k in profile.data["summary"]["merged"]["kernels"] if k["name"] == KERNEL)["total_us"] / 1000
    total = profile.number("total_ms")

    floors = options.fallback_floors(state, total)
    row, *rest_rows = floors["kernels"]
    rest_ms = _operation_rest_ms(profile)
    if rest_ms:  # the kernel's operation (merge, sink, fill) goes with it, counted as instant
        (rest,) = rest_rows
        assert rest["ms"] == pytest.approx(rest_ms) and rest["floor_ms"] is None and rest["calls"] is None
    else:
        assert not rest_rows
    assert (row["calls"], row["bytes"], row["flops"]) == (calls, window_bytes, window_flops)
    assert row["floor_ms"] == pytest.approx(floor_ms)
    assert row["floor_from"] == ("memory" if memory_ms >= compute_ms else "compute")
    assert row["headroom"] == pytest.approx(t / floor_ms)
    # a floor above the measured time bounds the kernel as it is, never as a slowdown
    assert floors["bound_x"] == pytest.approx(total / (total - t - rest_ms + min(t, floor_ms)))
    assert floors["instant_x"] == pytest.approx(total / (total - t - rest_ms))
    assert floors["bound_x"] < floors["instant_x"]
    assert ("measured under its floor" in row["note"]) is (floor_ms > t)
    if rates != "recorded":
        return

    # the recorded options finding holds the same numbers over W, the profiled steps' GPU window with
    # the profiler's own gaps between steps kept out (what the ceiling uses), in its data and its table
    recorded = Finding.model_validate(_finding(_state(run, "options"), "options"))
    own = next(o for o in recorded.data["options"] if o["name"] == "own-fallbacks")
    w = profile.number("in_step_window_ms")
    assert w <= total
    assert own["upper_x"] == pytest.approx(w / (w - t - rest_ms + min(t, floor_ms)))
    assert own["instant_x"] == pytest.approx(w / (w - t - rest_ms))
    table = next(tb for tb in recorded.tables if tb.title == "Fallback kernels against their floors")
    assert table.rows[0][:5] == [KERNEL, calls, pytest.approx(t), window_bytes, window_flops]
    assert "measured on the box by box.survey" in table.note


def test_a_fallback_kernel_without_a_work_model_is_said_to_have_no_floor():
    state = _with_work(_state(CPU), None)
    total = Finding.model_validate(_finding(state, "profile")).number("total_ms")
    floors = options.fallback_floors(state, total)
    row = floors["kernels"][0]
    assert row["floor_ms"] is None and row["note"] == "no floor (no bytes/FLOPs model)"
    assert floors["bound_x"] == pytest.approx(floors["instant_x"])
    assert floors["without_floor"] == [KERNEL]
    finding = options.propose_options(state, None, Target.model_validate(state["target"]))
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
    finding = options.propose_options(state, None, Target.model_validate(state["target"]))
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

