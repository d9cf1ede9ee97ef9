"""Build the rank's layers, time decode steps per batch size, optionally profile one batch."""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from . import model, planted
from .attention import CALLS, load_backend, upstream_kernel_configs
from .spec import BenchSpec, RankShapes, rank_shapes
from .work import attention_work

TRACE_NAME = "reference_trace_b{batch}.json.gz"
# A graph replay's kernels correlate to cudaGraphLaunch, not to the frames that launched them: the same
# step run eagerly is profiled beside it so that its kernels can be attributed to operations.
EAGER_TRACE_NAME = "reference_trace_b{batch}_eager.json.gz"


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def device_info(device: torch.device) -> dict:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "name": props.name, "sm_count": props.multi_processor_count,
                "capability": f"{props.major}.{props.minor}"}
    return {"type": "cpu", "name": _cpu_name(), "sm_count": None, "capability": None}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "triton", "sglang"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _build_layers(spec: BenchSpec, shapes: RankShapes, device: torch.device) -> list[model.LayerWeights]:
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    return [model.make_layer_weights(shapes, ratio, gen, device) for ratio in shapes.layer_compress_ratios]


def build_step(spec, shapes, weights, batch, device, attend, impl=None, state_shapes=None
               ) -> tuple[Callable[[], torch.Tensor], list]:
    """A decode step of ``batch`` over fresh caches and input (seeded by the spec and the batch) and its
    layers' states; the states are built at ``state_shapes`` when given (a rank's, from the whole model's)."""
    gen = torch.Generator(device=device).manual_seed(spec.seed + 1 + batch)
    states = [model.make_layer_state(state_shapes or shapes, w.ratio, batch, gen, device) for w in weights]
    layers = list(zip(weights, states))
    x = model.random_tensor((batch, shapes.hidden), gen, device)

    def step() -> torch.Tensor:
        return model.decode_step(x, layers, shapes, attend, impl)

    return step, states


def _graphed(step: Callable[[], torch.Tensor], device: torch.device, steps: int = 1) -> Callable[[], torch.Tensor]:
    """Capture ``steps`` decode steps into one CUDA graph (after warm-up on a side stream, as torch
    requires); a replay runs them all and returns the last one's output."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            out = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


class NonFinite(RuntimeError):
    """The decode step produced NaN or inf: the numbers would be timings of garbage."""


def time_steps(step: Callable[[], torch.Tensor], device: torch.device, steps: int, warmup: int,
               steps_per_call: int = 1) -> list[float]:
    """Milliseconds per decode step: CUDA events around each call on GPU, perf_counter on CPU; a call
    that runs ``steps_per_call`` decode steps (a graph of several) counts its time / steps_per_call."""
    for _ in range(warmup):
        step()
    _sync(device)
    samples = []
    if device.type == "cuda":
        for _ in range(steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            samples.append(float(start.elapsed_time(end)) / steps_per_call)
    else:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            samples.append((time.perf_counter() - t0) * 1e3 / steps_per_call)
    return samples


def _spin_ms(cycles: int, device: torch.device, repeats: int = 5) -> float:
    """Median time of one ``torch.cuda._sleep(cycles)`` kernel, by CUDA events."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    return statistics.median(times)


# Turns of (step without the spin, step with it) the calibration times; each turn is spec.steps steps.
CALIBRATION_TURNS = 3


def _paired_ms(plain: Callable[[], torch.Tensor], delayed: Callable[[], torch.Tensor], spec: BenchSpec,
               device: torch.device) -> tuple[float, float]:
    """Median step time of ``plain`` and of ``delayed``, timed in turns so drift falls on both."""
    a, b = [], []
    for _ in range(CALIBRATION_TURNS):
        a += time_steps(plain, device, spec.steps, 1, spec.steps_per_graph)
        b += time_steps(delayed, device, spec.steps, 1, spec.steps_per_graph)
    return statistics.median(a), statistics.median(b)


def plant_delay(step: Callable[[], torch.Tensor], spec: BenchSpec, device: torch.device
                ) -> tuple[Callable[[], torch.Tensor], dict]:
    """The step with a spin of ``spec.delay_frac`` of its own time after it (inside the graph when
    the step is captured), and the report of what was planted (planted.delay_report). The spin is
    sized from its rate timed alone, then calibrated in the form it runs in (graph or eager): the
    step with and without it timed in turns, the cycles corrected once by what it really adds there,
    and the pair timed again; the report's delay is that last difference, its undelayed step the
    last plain median, so its expected ratio is the one the sweep's runs should show."""
    def with_spin(cycles: int) -> Callable[[], torch.Tensor]:
        def delayed() -> torch.Tensor:
            out = step()
            torch.cuda._sleep(cycles)
            return out
        return delayed

    form = (lambda s: _graphed(s, device, spec.steps_per_graph)) if spec.cuda_graph else (lambda s: s)  # noqa: E731
    plain = form(step)
    undelayed = statistics.median(time_steps(plain, device, spec.steps, max(spec.warmup - 1, 0), spec.steps_per_graph))
    _spin_ms(planted.RATE_CYCLES, device, 2)  # the spin kernel's first launch stays out of the rate
    rate = planted.RATE_CYCLES / _spin_ms(planted.RATE_CYCLES, device)
    target_ms = spec.delay_frac * undelayed
    cycles = planted.sleep_cycles(undelayed, spec.delay_frac, rate)
    plain_ms, delayed_ms = _paired_ms(plain, form(with_spin(cycles)), spec, device)
    cycles = planted.corrected_cycles(cycles, target_ms, delayed_ms - plain_ms)
    plain_ms, delayed_ms = _paired_ms(plain, form(with_spin(cycles)), spec, device)
    del plain
    where = "inside the graph" if spec.cuda_graph else "after the eager step"
    report = planted.delay_report(spec.delay_frac, plain_ms, rate, cycles, delayed_ms - plain_ms,
                                  alone_ms=_spin_ms(cycles, device, 9), where=where)
    return with_spin(cycles), report


# Directions the output is projected on: enough to tell a wrong answer from rounding, few enough to log.
SKETCH_DIRECTIONS = 32


def output_sketch(out: torch.Tensor, seed: int) -> dict:
    """A compact, deterministic fingerprint of a decode step's output ``(batch, hidden)``: each row
    projected on SKETCH_DIRECTIONS fixed random directions (Gaussian, seeded by ``seed`` and the
    hidden size, scaled by 1/sqrt(directions) so a projection keeps a vector's norm in expectation)
    and each row's norm. Settings that compute the same function give sketches within rounding."""
    rows = out.detach().float().cpu().reshape(out.shape[0], -1)
    gen = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + rows.shape[1])
    directions = torch.randn(rows.shape[1], SKETCH_DIRECTIONS, generator=gen) / SKETCH_DIRECTIONS ** 0.5
    return {"directions": SKETCH_DIRECTIONS, "seed": seed,
            "projections": (rows @ directions).tolist(), "row_norms": rows.norm(dim=1).tolist()}


def profile_steps(step: Callable[[], torch.Tensor], device: torch.device, steps: int, path: Path,
                  with_stack: bool = True) -> None:
    """torch.profiler over ``steps`` decode steps (after one profiler warm-up step), Chrome trace
    written gzipped to ``path``; each step is a ``ProfilerStep#N`` range. ``with_stack`` records the
    Python frames around each launch (tools.trace.ops attributes kernels to them)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(
        activities=activities,
        with_stack=with_stack,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(steps + 1):
            step()
            _sync(device)
            prof.step()


def _log(message: str) -> None:
    print(f"[reference] {message}", file=sys.stderr, flush=True)


def measure(spec: BenchSpec, shapes: RankShapes, weights: list[model.LayerWeights], batch: int,
            device: torch.device, attend, make_step: Callable = build_step) -> dict:
    """One batch size of one setting on built weights: a fresh step and state, one eager step
    (autotune, compile and lazy init stay out of the timing; attention calls and routing recorded),
    the graph capture when ``cuda_graph``, warm-up and timed steps, the output sketch. Raises
    NonFinite when the step's output is not finite. ``make_step``: build_step, or a rank's."""
    impl = model.step_impl(spec.moe, spec.compile)
    step, _ = make_step(spec, shapes, weights, batch, device, attend, impl)
    CALLS.reset()
    model.ROUTING.start()
    out = step()
    _sync(device)
    distinct = model.ROUTING.distinct()
    attention_calls = CALLS.distinct()
    if not bool(torch.isfinite(out).all()):
        raise NonFinite(f"decode step output at batch {batch} is not finite")
    delay = None
    if spec.delay_frac:
        step, delay = plant_delay(step, spec, device)
    run_step = _graphed(step, device, spec.steps_per_graph) if spec.cuda_graph else step
    samples = time_steps(run_step, device, spec.steps, max(spec.warmup - 1, 0), spec.steps_per_graph)
    # A graph replays into its own output buffer: replay once more to sketch what the graph computes.
    sketch = output_sketch(run_step() if spec.cuda_graph or spec.delay_frac else out, spec.seed)
    step_ms = statistics.median(samples)
    layer_ms = step_ms / shapes.layers_run
    projected_ms = layer_ms * shapes.layers_model
    return {
        "batch": batch,
        "attention_calls": attention_calls,
        "moe_distinct_experts": distinct,
        "step_ms": step_ms,
        "step_ms_samples": samples,
        "layer_ms": layer_ms,
        "tok_s": batch * 1e3 / step_ms,
        "projected_step_ms": projected_ms,
        "tok_s_projected": batch * 1e3 / projected_ms,
        "output_sketch": sketch,
        "planted_delay": delay,
    }


def build_weights(spec: BenchSpec, device: torch.device) -> tuple[RankShapes, list[model.LayerWeights]]:
    """The rank's shapes and its layers' random weights (seeded by the spec)."""
    shapes = rank_shapes(spec)
    torch.manual_seed(spec.seed)
    weights = _build_layers(spec, shapes, device)
    _log(f"built {shapes.layers_run} layers (model layers {shapes.layer_ids}, {shapes.experts_run} experts) on {device}")
    return shapes, weights


def setting_of(spec: BenchSpec) -> dict:
    """The per-run engine options of a spec, as results report them."""
    return {"attention": spec.attention, "cuda_graph": spec.cuda_graph, "compile": spec.compile, "moe": spec.moe,
            "steps_per_graph": spec.steps_per_graph, "delay_frac": spec.delay_frac}


def profile_batch(spec: BenchSpec, shapes: RankShapes, weights: list[model.LayerWeights], device: torch.device,
                  attend, out_dir: Path, names: tuple[str, str] = (TRACE_NAME, EAGER_TRACE_NAME),
                  make_step: Callable = build_step) -> dict:
    """Profile ``spec.profile`` into ``out_dir`` (``names``: the trace and its eager twin, formatted with
    the batch); returns the result's ``trace`` record."""
    batch = spec.profile.batch
    step, _ = make_step(spec, shapes, weights, batch, device, attend, model.step_impl(spec.moe, spec.compile))
    run_step = _graphed(step, device) if spec.cuda_graph else step
    if device.type == "cuda":
        run_step()  # autotune and lazy init stay out of the trace
    name = names[0].format(batch=batch)
    profile_steps(run_step, device, spec.profile.steps, out_dir / name)
    # file: the setting as run (graph replay when cuda_graph); eager_file: its eager twin for attribution.
    trace = {"file": name, "batch": batch, "steps": spec.profile.steps, "with_stack": True,
             "operation_range": model.ATTENTION_RANGE, "eager_file": None}
    _log(f"trace written: {out_dir / name}")
    if spec.cuda_graph:
        eager = names[1].format(batch=batch)
        step()  # the eager path's own lazy init stays out of its trace
        _sync(device)
        profile_steps(step, device, spec.profile.steps, out_dir / eager)
        trace["eager_file"] = eager
        _log(f"eager trace for attribution written: {out_dir / eager}")
    return trace


def run(spec: BenchSpec, out_dir: Path) -> dict:
    """Run the bench described by ``spec``; returns the result object (``ok`` true).

    Raises NonFinite, BackendUnavailable, or whatever the run raised (OOM included); the CLI turns
    those into ``ok: false`` results.
    """
    device = resolve_device(spec.device)
    attend = load_backend(spec.attention)
    started = time.perf_counter()
    results = []
    trace = None
    with torch.inference_mode():
        shapes, weights = build_weights(spec, device)
        for batch in spec.batch_sizes:
            results.append(measure(spec, shapes, weights, batch, device, attend))
            _log(f"batch {batch}: median step {results[-1]['step_ms']:.3f} ms over {spec.steps} steps")
            gc.collect()
        if spec.profile is not None:
            trace = profile_batch(spec, shapes, weights, device, attend, out_dir)
    return result_of(spec, shapes, device, results, trace, started)


def trace_kernel_names(trace: dict | None, out_dir: Path) -> dict | None:
    """The result's ``kernel_names`` (tools.trace.kernel_names) for the traces ``trace`` names in ``out_dir``
    (each rank's, and their eager twins): demangled here, on the box, so that the journal holds the names as
    this box's c++filt gave them and a replay elsewhere reads them unchanged. None without a trace, or when
    one cannot be read (said on stderr; the agent's profile step reports the unreadable trace itself)."""
    from tools.trace import TraceFormatError
    from tools.trace.kernel_names import kernel_names

    if not trace:
        return None
    files = trace.get("files") or [trace["file"]]
    eager = [f for f in (trace.get("eager_files") or [trace.get("eager_file")]) if f]
    try:
        return kernel_names([out_dir / f for f in files], [out_dir / f for f in eager])
    except (TraceFormatError, ValueError) as exc:
        _log(f"kernel names not read: {exc}")
        return None


def result_of(spec: BenchSpec, shapes: RankShapes, device: torch.device, results: list[dict], trace: dict | None,
              started: float) -> dict:
    """The bench result object from what a run measured (``started``: its perf_counter at the start)."""
    interpreter = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    kernel_config, kernel_configs = (None, [])
    if spec.attention == "sglang-triton":
        kernel_config, kernel_configs = upstream_kernel_configs()
    return {
        "ok": True,
        "engine": "reference",
        "device": device_info(device),
        "versions": versions(),
        "interpreter": interpreter,
        **setting_of(spec),
        "shapes": shapes.model_dump(),
        "extrapolation": extrapolation(shapes, spec),
        "results": results,
        "kernel_config": kernel_config,
        "kernel_configs": kernel_configs,
        "trace": trace,
        # Bytes and FLOPs of the attention calls a step makes, per batch run: the profiled kernels' floors.
        "attention_work": [attention_work(shapes, batch, spec.attention)
                           for batch in sorted(set(spec.batch_sizes) | ({spec.profile.batch} if spec.profile else set()))],
        "wall_s": time.perf_counter() - started,
        "notes": notes(spec, shapes, device, interpreter),
    }


def extrapolation(shapes: RankShapes, spec: BenchSpec) -> dict:
    """How a measured step becomes the model's: the layers run (model ids and compress ratios) against
    the model's mix of layer types, and the rule: per-layer time = step / layers run, x model layers."""
    model_ratios = spec.effective_model().compress_ratios
    mix = lambda ratios: {str(r): ratios.count(r) for r in sorted(set(ratios))}  # noqa: E731
    return {"layers_run": shapes.layers_run, "layer_ids": shapes.layer_ids, "layer_ratios": shapes.layer_compress_ratios,
            "run_mix": mix(shapes.layer_compress_ratios), "model_mix": mix(model_ratios),
            "layers_model": shapes.layers_model,
            "rule": f"projected step = (measured step / {shapes.layers_run} layers run) x {shapes.layers_model} model layers"}


def notes(spec: BenchSpec, shapes: RankShapes, device: torch.device, interpreter: bool) -> list[str]:
    """What the measurement is and is not, in lines a report can quote."""
    ratios = shapes.layer_compress_ratios
    kinds = ", ".join(f"{ratios.count(r)} {_LAYER_KIND[r]}" for r in sorted(set(ratios)))
    model_ratios = spec.effective_model().compress_ratios
    model_kinds = ", ".join(f"{model_ratios.count(r)} {_LAYER_KIND[r]}" for r in sorted(set(model_ratios)))
    notes = [
        f"tok_s_projected and projected_step_ms are a projection: measured step / {shapes.layers_run} layers run "
        f"x {shapes.layers_model} model layers (run: model layers {shapes.layer_ids}, {kinds}; the model has "
        f"{model_kinds}: every layer is counted at the run layers' mean time)",
        _parallel_note(spec),
        "random weights and caches; every step decodes position context_len again (fixed inputs)",
        "weights are bf16 where the checkpoint holds FP8/FP4 (no torch._scaled_mm): weight GEMMs read 2x (FP8) "
        "to 4x (FP4) the deployment's bytes; FP8 indexer keys are bf16 here",
        "not modelled: embedding, LM head and sampling, hyper-connections (hc_mult), hash-routed layers, "
        "the compressor's pooled-token emission (its per-step projection is run)",
        _MOE_NOTE[spec.moe],
    ]
    if shapes.experts_run != shapes.experts_model:
        notes.append(f"{shapes.experts_run} of {shapes.experts_model} experts held (spec experts): routing picks "
                     f"among {shapes.experts_run}, so the MoE kernels see more tokens per expert than real routing gives")
    else:
        notes.append(f"all {shapes.experts_model} experts held in their own weight buffers (moe_distinct_experts: "
                     f"the distinct experts each layer's routing picked)")
    if spec.compile:
        notes.append("compile: torch.compile of the projections, norms and the grouped MoE"
                     + (" (the per-expert loop stays eager)" if spec.moe == "loop" else "")
                     + "; attention, cache writes, the compressor projection and the indexer run eagerly")
    if spec.steps_per_graph > 1:
        notes.append(f"{spec.steps_per_graph} decode steps captured per CUDA graph; a step's time is a replay's / "
                     f"{spec.steps_per_graph}")
    if spec.delay_frac:
        notes.append(f"planted delay: a torch.cuda._sleep spin of {spec.delay_frac:.1%} of this setting's own step "
                     f"after every step{' inside the graph' if spec.cuda_graph else ''}, sized by its rate and calibrated "
                     f"where it runs (the step with and without it timed in turns; planted_delay: what it adds and "
                     f"the ratio it should give)")
    if shapes.kernel_heads != shapes.heads_per_rank:
        notes.append(f"attention kernel runs {shapes.kernel_heads} heads for {shapes.heads_per_rank} per-rank heads "
                     f"(padded as SGLang's _kernel_num_heads does)")
    if interpreter:
        notes.append("Triton kernels ran under the CPU interpreter (TRITON_INTERPRET=1) with a pinned "
                     "autotune config: times are CPU-interpreter measurements, not GPU times")
    elif device.type == "cpu":
        notes.append("CPU measurement")
    return notes


def _parallel_note(spec: BenchSpec) -> str:
    if not spec.distributed:
        return f"one rank of TP{spec.tp}: no all-reduce or other communication is run"
    experts = (f"experts split over {spec.ep} ranks (all-to-all dispatch and combine)" if spec.ep > 1
               else "every expert on every rank, FFN width split")
    return (f"TP{spec.tp}: {spec.tp} processes, one per rank, joined by torch.distributed; heads and output groups "
            f"split, {experts}; all-reduces after the attention output projection and the MoE block, as SGLang "
            f"runs them; a step's time is its slowest rank's")


_LAYER_KIND = {0: "window-only", 4: "c4", 128: "c128"}
_MOE_NOTE = {
    "grouped": "routed experts: tokens sorted by expert, one torch._grouped_mm per projection",
    "loop": "routed experts: a per-expert loop (the host reads each expert's token count, then two GEMMs for each "
            "expert that got tokens)",
}
