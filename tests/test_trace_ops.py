"""Kernel time by launching frame (tools.trace.frames, tools.trace.ops) and the profiler's own gaps (tools.trace.steps),
on real traces: the H200 captures (no Python stacks, real correlation ids and ProfilerStep ranges,
a CUDA-graph replay), the reference engine's CPU trace recorded with stacks, and the H200 traces
with stacks that scripts/h200/capture_stack_traces.sh records (skipped until they are committed).

The checks that matter are computed twice, the second time by a brute-force reading of the JSON
that shares no code with the module under test."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from agent.steps.attribution import attribute_dominant
from tools import trace
from tools.trace import frames, ops

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200-traces"
EAGER = H200 / "dsv4-like-B16-topk512.trace.json.gz"
GRAPH = H200 / "dsv4-like-B16-topk512-cudagraph.trace.json.gz"
TP = [H200 / "dsv4-like-B16-TP-0.trace.json.gz", H200 / "dsv4-like-B16-TP-1.trace.json.gz"]
CPU_STACKS = DATA / "trace-cpu-stacks" / "reference-cpu-stacks.trace.json.gz"
H200_STACKS = DATA / "h200-traces-stacks"
H200_STACKS_EAGER = H200_STACKS / "reference-B16-eager.trace.json.gz"
H200_STACKS_GRAPH = H200_STACKS / "reference-B16-cudagraph.trace.json.gz"
KERNEL = "_tiled_sparse_decode_kernel"
WRAPPER = "flash_mla_sparse_decode_triton"
LAUNCHER = "_run_triton_sparse_decode"


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as handle:
        return [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "trace", *args], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=120)


# -- linking kernels to launches --------------------------------------------------------------


def test_every_kernel_of_an_eager_trace_links_to_its_launch():
    events = _events(EAGER)
    device = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = {e["args"]["correlation"]: e["name"] for e in events if e["cat"] in ("cuda_runtime", "cuda_driver")}
    expected = sum(1 for e in device if e["args"].get("correlation") in launches)
    # The Triton kernel goes through the driver (cuLaunchKernelEx), the aten kernels through the runtime.
    assert {launches[e["args"]["correlation"]] for e in device if e["name"] == KERNEL} == {"cuLaunchKernelEx"}
    found = ops.attribute([EAGER])
    assert (found.kernels, found.linked, found.graph_linked) == (len(device), expected, 0)
    assert math.isclose(found.kernel_time_us, trace.summarize([EAGER]).merged.kernel_time_us, rel_tol=1e-12)
    assert math.isclose(sum(r.total_us for r in found.rows), found.kernel_time_us, rel_tol=1e-12)


def test_a_trace_without_stacks_or_ranges_says_so_and_still_groups_by_aten_op():
    found = ops.attribute([EAGER], KERNEL)
    assert not found.with_stack and not found.annotations
    assert found.dominant.status == ops.NO_FRAMES and found.dominant.total_us is None
    # A Triton launch has no aten op around it; aten kernels fall back to the op that launched them.
    unframed = next(r for r in found.rows if r.source == "none")
    assert KERNEL in {k.name for k in unframed.kernels}
    assert any(r.source == "aten" and r.name.startswith("aten::") for r in found.rows)


def test_a_real_record_function_range_is_an_operation():
    """torch.distributed's own ``nccl:all_reduce`` ranges enclose the all-reduce launches of each rank."""
    for path in TP:
        events = _events(path)
        nccl = math.fsum(e["dur"] for e in events if e["cat"] == "kernel" and e["name"].startswith("ncclDevKernel"))
        found = ops.attribute([path], next(e["name"] for e in events if e["name"].startswith("ncclDevKernel")))
        op = found.dominant
        assert (op.status, op.source, op.name, op.coverage) == (ops.ATTRIBUTED, "record_function", "nccl:all_reduce", 1.0)
        assert math.isclose(op.total_us, nccl, rel_tol=1e-9)


# -- graph replays ----------------------------------------------------------------------------


def test_a_graph_replay_needs_an_eager_profile():
    found = ops.attribute([GRAPH])
    assert found.status == ops.NEEDS_EAGER and found.dominant.status == ops.NEEDS_EAGER
    assert found.graph_linked == found.kernels > 0
    assert found.dominant.kernel == KERNEL and found.dominant.total_us is None
    assert "eager profile" in found.message
    assert ops.operation_of([GRAPH], KERNEL)["status"] == ops.NEEDS_EAGER


def test_cli_by_op_on_a_graph_replay_exits_0_and_says_attribution_needs_an_eager_profile():
    text = _run_cli(str(GRAPH), "--by-op")
    assert text.returncode == 0, text.stderr
    assert "needs an eager profile" in text.stdout and "needs-eager-profile" in text.stdout
    as_json = _run_cli(str(GRAPH), "--by-op", "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["status"] == "needs-eager-profile" and "eager profile" in data["message"]


# -- the profiler's gaps ----------------------------------------------------------------------


@pytest.mark.parametrize("path", [EAGER, GRAPH], ids=["eager", "graph"])
def test_step_windows_are_the_device_step_ranges_and_the_gaps_between_them(path):
    events = _events(path)
    steps = sorted((e for e in events if e["cat"] == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    merged = trace.summarize([path]).merged
    windows = merged.step_windows
    assert [w.step for w in windows] == [int(e["name"].split("#")[1]) for e in steps]
    for window, step in zip(windows, steps):
        assert window.window_us == pytest.approx(step["dur"], abs=0.01)
    for window, before, step in zip(windows[1:], steps, steps[1:]):
        assert window.idle_before_us == pytest.approx(step["ts"] - (before["ts"] + before["dur"]), abs=0.01)
        assert window.idle_before_us > 0
    assert windows[0].idle_before_us is None
    # Nothing runs outside the steps here, so the window splits into the steps and the gaps between them.
    assert merged.outside_steps_us == 0.0
    assert merged.in_step_window_us + merged.between_steps_idle_us == pytest.approx(merged.window_us, rel=1e-9)


def test_step_windows_survive_a_round_trip_and_old_summaries_read_without_them():
    summary = trace.summarize([GRAPH])
    again = trace.TraceSummary.from_dict(json.loads(json.dumps(summary.to_dict())))
    assert again.merged.step_windows == summary.merged.step_windows
    old = summary.merged.to_dict()
    for key in ("in_step_window_us", "between_steps_idle_us", "outside_steps_us", "step_windows"):
        old.pop(key)
    assert trace.RankSummary.from_dict(old).in_step_window_us is None


# -- Python frames ----------------------------------------------------------------------------


def test_library_frames_are_told_from_user_frames():
    assert not frames.is_user_file("torch/nn/modules/module.py")
    assert not frames.is_user_file("triton/runtime/jit.py")
    assert not frames.is_user_file("threading.py")
    assert not frames.is_user_file("/usr/lib/python3/dist-packages/numpy/core/x.py")
    assert frames.is_user_file("sglang/kernels/ops/attention/flash_mla_sm120_triton.py")
    assert frames.is_user_file("/venv/lib/python3.11/site-packages/sglang/srt/layers/x.py")
    assert frames.is_user_file("tools/engines/reference/model.py")


def _brute_force_op_total(path: Path, function: str) -> tuple[float, set[str]]:
    """Outermost host ranges (cpu_op / user_annotation that are not ProfilerStep or op: ranges) inside
    any Python frame named ``function``, by pairwise containment on the same thread."""
    events = _events(path)
    frames = [e for e in events if e["cat"] == "python_function" and e["name"].endswith(f": {function}")]
    work = [e for e in events if e["cat"] in ("cpu_op", "user_annotation")
            and not e["name"].startswith(("ProfilerStep#", "op:", "[pytorch|profiler"))]

    def inside(a, b):  # a within b
        return a["tid"] == b["tid"] and b["ts"] - 1e-3 <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"] + 1e-3

    outer = [w for w in work if not any(o is not w and inside(w, o) and o["dur"] > w["dur"] for o in work)]
    chosen = [w for w in outer if any(inside(w, f) for f in frames)]
    return math.fsum(w["dur"] for w in chosen), {w["name"] for w in chosen}


def test_cpu_trace_with_stacks_keeps_the_kernel_table_and_attributes_to_the_wrapper():
    summary = trace.summarize([CPU_STACKS])
    assert summary.kind == trace.CPU_HOST
    assert summary.merged.kernels[0].name == KERNEL  # the op: range did not swallow the kernels inside it
    assert not any(k.name.startswith("op:") for k in summary.merged.kernels)

    found = ops.attribute([CPU_STACKS], KERNEL)
    assert found.with_stack and found.annotations
    op = found.dominant
    assert (op.status, op.source, op.name, op.coverage) == (ops.ATTRIBUTED, "record_function", "sparse_decode", 1.0)
    assert op.frame["function"] == WRAPPER and op.frame["file"].endswith("flash_mla_sm120_triton.py")
    names = {k.name for k in op.kernels}
    # the kernel, the launcher's fills, the partial merge (maximum) and the sink (logaddexp)
    assert {KERNEL, "aten::zeros", "aten::full", "aten::maximum", "aten::logaddexp"} <= names
    assert op.total_us > op.kernel_total_us


def test_cpu_wrapper_found_from_python_frames_alone_matches_a_brute_force_reading():
    found = ops.attribute([CPU_STACKS], KERNEL, use_annotations=False)
    op = found.dominant
    assert (op.status, op.source, op.name) == (ops.ATTRIBUTED, "python", WRAPPER)
    assert LAUNCHER not in {r.name for r in found.rows}  # the bare launcher is inside the operation
    total, names = _brute_force_op_total(CPU_STACKS, WRAPPER)
    assert op.total_us == pytest.approx(total, rel=1e-9)
    assert {k.name for k in op.kernels} == names
    # The record_function range is entered before the call's arguments are evaluated: it holds at least as much.
    with_range = ops.attribute([CPU_STACKS], KERNEL).dominant
    assert with_range.total_us >= op.total_us


def test_cli_by_op_names_the_wrapper():
    done = _run_cli(str(CPU_STACKS), "--by-op")
    assert done.returncode == 0, done.stderr
    assert "operation: sparse_decode" in done.stdout and WRAPPER in done.stdout


# -- the profile step's attribution -----------------------------------------------------------


class _Artifacts:
    """The one Session method attribute_dominant uses: an artifact reference to a local path."""

    def artifact_path(self, ref: dict) -> Path:
        return Path(ref["local"])


def _ref(path: Path) -> dict:
    return {"name": path.name, "path": f"artifacts/x/{path.name}", "local": str(path)}


def test_profile_attribution_from_the_same_trace_adds_the_rest_of_the_operation_to_the_kernel():
    top = trace.summarize([CPU_STACKS]).merged.kernels[0]
    ref = _ref(CPU_STACKS)
    op, eager = attribute_dominant(_Artifacts(), {ref["name"]: ref}, {"file": ref["name"]}, ref, top, 2)
    assert eager is None and op["source"] == "same trace" and op["status"] == ops.ATTRIBUTED
    direct = ops.attribute([CPU_STACKS], top.name).dominant
    # Differences of ~4.5e6 us totals: trace times carry a nanosecond, so compare to that.
    assert op["other_us"] == pytest.approx(direct.total_us - top.total_us, abs=1e-2)
    assert op["other_us"] > 0
    assert op["total_us"] == pytest.approx(direct.total_us, rel=1e-9)


def test_profile_attribution_of_a_graph_replay_reads_the_eager_twin():
    top = next(k for k in trace.summarize([GRAPH]).merged.kernels if k.name == KERNEL)
    graph, eager_ref = _ref(GRAPH), _ref(EAGER)
    refs = {graph["name"]: graph, eager_ref["name"]: eager_ref}
    op, eager = attribute_dominant(_Artifacts(), refs, {"file": graph["name"], "eager_file": eager_ref["name"]}, graph, top, 3)
    assert op["source"] == "eager profile" and op["trace"] == eager_ref["path"]
    assert eager["file"] == eager_ref["path"] and eager["dominant"]["name"] == KERNEL
    # These H200 captures have no stacks: the eager twin is read, and says what it lacks.
    assert op["status"] == ops.NO_FRAMES
    alone, _ = attribute_dominant(_Artifacts(), {graph["name"]: graph}, {"file": graph["name"]}, graph, top, 3)
    assert alone["status"] == ops.NEEDS_EAGER and alone["source"] == "same trace"


# -- the H200 traces with stacks (scripts/h200/capture_stack_traces.sh) -----------------------

needs_h200_stacks = pytest.mark.skipif(
    not (H200_STACKS_EAGER.is_file() and H200_STACKS_GRAPH.is_file()),
    reason="tests/data/h200-traces-stacks/ not captured yet: run scripts/h200/capture_stack_traces.sh on an H200",
)


@needs_h200_stacks
def test_h200_eager_trace_attributes_the_kernel_merge_and_sink_to_the_wrapper():
    found = ops.attribute([H200_STACKS_EAGER], KERNEL)
    assert found.kind == trace.GPU and found.with_stack and found.linked == found.kernels
    op = found.dominant
    assert (op.status, op.name, op.coverage) == (ops.ATTRIBUTED, "sparse_decode", 1.0)
    assert op.frame["function"] == WRAPPER
    bare = ops.attribute([H200_STACKS_EAGER], KERNEL, use_annotations=False).dominant
    assert (bare.status, bare.name, bare.coverage) == (ops.ATTRIBUTED, WRAPPER, 1.0)
    for each in (op, bare):
        others = [k for k in each.kernels if k.name != KERNEL]
        # fills before the kernel, the partial merge and the sink after it: all on the device
        assert len(others) >= 3 and each.total_us > each.kernel_total_us
    assert bare.total_us == pytest.approx(op.total_us, rel=1e-6)


@needs_h200_stacks
def test_h200_graph_trace_needs_the_eager_one():
    assert ops.attribute([H200_STACKS_GRAPH], KERNEL).dominant.status == ops.NEEDS_EAGER
    merged = trace.summarize([H200_STACKS_GRAPH]).merged
    assert merged.between_steps_idle_us > 0 and merged.in_step_window_us < merged.window_us


@needs_h200_stacks
def test_h200_wrapper_total_matches_a_brute_force_reading_of_launches():
    """Kernels whose launch (same correlation id) lies inside a call of the wrapper, on its thread."""
    events = _events(H200_STACKS_EAGER)
    calls = [e for e in events if e["cat"] == "python_function" and e["name"].endswith(f": {WRAPPER}")]
    launches = {e["args"]["correlation"]: e for e in events if e["cat"] in ("cuda_runtime", "cuda_driver")}
    total, names = 0.0, set()
    for kernel in (e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")):
        launch = launches.get(kernel["args"].get("correlation"))
        if launch and any(c["tid"] == launch["tid"] and c["ts"] <= launch["ts"] <= c["ts"] + c["dur"] for c in calls):
            total += kernel["dur"]
            names.add(kernel["name"])
    op = ops.attribute([H200_STACKS_EAGER], KERNEL, use_annotations=False).dominant
    assert op.total_us == pytest.approx(total, rel=1e-9)
    assert {k.name for k in op.kernels} == names


@needs_h200_stacks
def test_h200_profile_attribution_reads_the_eager_twin_of_the_graph_replay():
    top = next(k for k in trace.summarize([H200_STACKS_GRAPH]).merged.kernels if k.name == KERNEL)
    graph, eager_ref = _ref(H200_STACKS_GRAPH), _ref(H200_STACKS_EAGER)
    refs = {graph["name"]: graph, eager_ref["name"]: eager_ref}
    op, eager = attribute_dominant(_Artifacts(), refs, {"file": graph["name"], "eager_file": eager_ref["name"]}, graph, top, 3)
    assert (op["status"], op["source"], op["frame"]["function"]) == (ops.ATTRIBUTED, "eager profile", WRAPPER)
    direct = ops.attribute([H200_STACKS_EAGER], KERNEL).dominant
    # The graph's own kernel time plus the operation's other kernels as the eager profile measured them.
    assert op["other_us"] == pytest.approx(direct.total_us - direct.kernel_total_us, abs=1e-2)
    assert op["total_us"] == pytest.approx(top.total_us + op["other_us"], rel=1e-12)
    assert eager["dominant"]["name"] == KERNEL and eager["between_steps_idle_us"] > 0


@needs_h200_stacks
def test_h200_profile_finding_carries_the_operation_and_the_profilers_gaps(monkeypatch):
    """The profile step on the capture's own engine result: graph replay as run, eager twin for attribution."""
    from agent.config import load_target
    from agent.steps import profile as profile_step
    from schema.finding import Finding

    target, _ = load_target("dsv4-flash")
    result = json.loads((H200_STACKS / "bench-result.json").read_text())
    refs = [{"name": result["trace"][key], "path": f"artifacts/x/{result['trace'][key]}", "local": str(H200_STACKS / name)}
            for key, name in result["files"].items()]

    class Served(_Artifacts):
        def call(self, tool, args):
            assert tool == "engine.bench" and args["spec"]["profile"]["batch"] == result["trace"]["batch"]
            return {"ok": True, "data": result, "artifacts": refs, "call_seq": 7, "seq": 8, "error": None}

    monkeypatch.setattr(profile_step, "best_setting", lambda target, levers: [])
    survey = Finding(index=1, step="survey", headline="", verdict="", data={"box": {"device": "cuda"}, "stand_in": True})
    levers = Finding(index=2, step="levers", headline="", verdict="", data={"levers": []})
    state = {"target": target.model_dump(mode="json"),
             "findings": [survey.model_dump(mode="json"), levers.model_dump(mode="json")]}
    finding = profile_step.profile_decode(state, Served(), target)
    graph = trace.summarize([H200_STACKS_GRAPH]).merged
    op = finding.data["operation"]
    assert (op["status"], op["source"], op["frame"]["function"]) == (ops.ATTRIBUTED, "eager profile", WRAPPER)
    eager_path = f"artifacts/x/{result['trace']['eager_file']}"
    assert finding.artifacts["eager_trace"] == finding.data["eager_summary"]["file"] == op["trace"] == eager_path
    assert finding.number("in_step_window_ms") == pytest.approx(graph.in_step_window_us / 1000)
    assert finding.number("between_steps_idle_ms") == pytest.approx(graph.between_steps_idle_us / 1000)
    assert finding.number("operation_ms") > finding.number("dominant_ms") == pytest.approx(
        next(k.total_us for k in graph.kernels if k.name == KERNEL) / 1000)
    assert finding.number("operation_step_ms") == pytest.approx(finding.number("operation_ms") / graph.steps)
    assert finding.data["dominant"]["name"] == KERNEL and "sparse_decode" in finding.headline


def test_a_step_replayed_on_two_streams_is_one_step_spanning_both():
    """The H200 example's split-K run (a real trace): its CUDA graph forks the two-cache attention onto a
    second stream, so the device shows each ProfilerStep#N once a stream; each N is one step, from its
    first range's start to its last range's end (counted per stream it read as twice the steps, and the
    round-2 window W as about half a step short)."""
    # kept from runs/examples/dsv4-flash-h200-20261202 (artifacts/86f8aadce1a1b515), whose two-cache call
    # ran on two streams at B = 16 (since the fused launch, the shipped example's runs on one)
    path = Path(__file__).parent / "data" / "two-stream-trace-20261202" / "reference_trace_b16.json.gz"
    events = _events(path)
    ranges: dict[int, list[dict]] = {}
    for e in events:
        if e["cat"] == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#"):
            ranges.setdefault(int(e["name"].split("#")[1]), []).append(e)
    assert {len(r) for r in ranges.values()} == {2} and len({e["tid"] for r in ranges.values() for e in r}) == 2
    merged = trace.summarize([path]).merged
    assert [w.step for w in merged.step_windows] == sorted(ranges)
    for window in merged.step_windows:
        group = ranges[window.step]
        span = max(e["ts"] + e["dur"] for e in group) - min(e["ts"] for e in group)
        assert window.window_us <= span + 0.01 and window.window_us > 0.9 * span
