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

from . import model
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


def _build_step(spec, shapes, weights, batch, device, attend) -> tuple[Callable[[], torch.Tensor], list]:
    gen = torch.Generator(device=device).manual_seed(spec.seed + 1 + batch)
    states = [model.make_layer_state(shapes, w.ratio, batch, gen, device) for w in weights]
    layers = list(zip(weights, states))
    x = model.random_tensor((batch, shapes.hidden), gen, device)

    def step() -> torch.Tensor:
        return model.decode_step(x, layers, shapes, attend)

    return step, states


def _graphed(step: Callable[[], torch.Tensor], device: torch.device) -> Callable[[], torch.Tensor]:
    """Capture one step into a CUDA graph (after warm-up on a side stream, as torch requires)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


class NonFinite(RuntimeError):
    """The decode step produced NaN or inf: the numbers would be timings of garbage."""


def time_steps(step: Callable[[], torch.Tensor], device: torch.device, steps: int, warmup: int) -> list[float]:
    """Milliseconds per step: CUDA events around each step on GPU, perf_counter on CPU."""
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
            samples.append(float(start.elapsed_time(end)))
    else:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            samples.append((time.perf_counter() - t0) * 1e3)
    return samples


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


def run(spec: BenchSpec, out_dir: Path) -> dict:
    """Run the bench described by ``spec``; returns the result object (``ok`` true).

    Raises NonFinite, BackendUnavailable, or whatever the run raised (OOM included); the CLI turns
    those into ``ok: false`` results.
    """
    device = resolve_device(spec.device)
    shapes = rank_shapes(spec)
    attend = load_backend(spec.attention)
    interpreter = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    torch.manual_seed(spec.seed)
    started = time.perf_counter()
    results = []
    trace = None
    with torch.inference_mode():
        weights = _build_layers(spec, shapes, device)
        _log(f"built {shapes.layers_run} layers (model layers {shapes.layer_ids}) on {device}")
        for batch in spec.batch_sizes:
            step, _ = _build_step(spec, shapes, weights, batch, device, attend)
            CALLS.reset()
            out = step()
            _sync(device)
            attention_calls = CALLS.distinct()
            if not bool(torch.isfinite(out).all()):
                raise NonFinite(f"decode step output at batch {batch} is not finite")
            run_step = _graphed(step, device) if spec.cuda_graph else step
            samples = time_steps(run_step, device, spec.steps, max(spec.warmup - 1, 0))
            # A graph replays into its own output buffer: replay once more to sketch what the graph computes.
            sketch = output_sketch(run_step() if spec.cuda_graph else out, spec.seed)
            step_ms = statistics.median(samples)
            layer_ms = step_ms / shapes.layers_run
            projected_ms = layer_ms * shapes.layers_model
            results.append({
                "batch": batch,
                "attention_calls": attention_calls,
                "step_ms": step_ms,
                "step_ms_samples": samples,
                "layer_ms": layer_ms,
                "tok_s": batch * 1e3 / step_ms,
                "projected_step_ms": projected_ms,
                "tok_s_projected": batch * 1e3 / projected_ms,
                "output_sketch": sketch,
            })
            _log(f"batch {batch}: median step {step_ms:.3f} ms over {len(samples)} steps")
            del step, run_step, out
            gc.collect()
        if spec.profile is not None:
            batch = spec.profile.batch
            step, _ = _build_step(spec, shapes, weights, batch, device, attend)
            run_step = _graphed(step, device) if spec.cuda_graph else step
            if device.type == "cuda":
                run_step()  # autotune and lazy init stay out of the trace
            name = TRACE_NAME.format(batch=batch)
            profile_steps(run_step, device, spec.profile.steps, out_dir / name)
            # file: the setting as run (graph replay when cuda_graph); eager_file: its eager twin for attribution.
            trace = {"file": name, "batch": batch, "steps": spec.profile.steps, "with_stack": True,
                     "operation_range": model.ATTENTION_RANGE, "eager_file": None}
            _log(f"trace written: {out_dir / name}")
            if spec.cuda_graph:
                eager = EAGER_TRACE_NAME.format(batch=batch)
                step()  # the eager path's own lazy init stays out of its trace
                _sync(device)
                profile_steps(step, device, spec.profile.steps, out_dir / eager)
                trace["eager_file"] = eager
                _log(f"eager trace for attribution written: {out_dir / eager}")
    kernel_config, kernel_configs = (None, [])
    if spec.attention == "sglang-triton":
        kernel_config, kernel_configs = upstream_kernel_configs()
    return {
        "ok": True,
        "engine": "reference",
        "device": device_info(device),
        "versions": versions(),
        "interpreter": interpreter,
        "attention": spec.attention,
        "cuda_graph": spec.cuda_graph,
        "shapes": shapes.model_dump(),
        "results": results,
        "kernel_config": kernel_config,
        "kernel_configs": kernel_configs,
        "trace": trace,
        # Bytes and FLOPs of the attention calls a step makes, per batch run: the profiled kernels' floors.
        "attention_work": [attention_work(shapes, batch, spec.attention)
                           for batch in sorted(set(spec.batch_sizes) | ({spec.profile.batch} if spec.profile else set()))],
        "wall_s": time.perf_counter() - started,
        "notes": _notes(spec, shapes, device, interpreter),
    }


def _notes(spec: BenchSpec, shapes: RankShapes, device: torch.device, interpreter: bool) -> list[str]:
    notes = [
        f"tok_s_projected and projected_step_ms are a projection: measured per-layer time x "
        f"{shapes.layers_model} model layers ({shapes.layers_run} run: model layers {shapes.layer_ids}, "
        f"compress ratios {shapes.layer_compress_ratios})",
        f"one rank of TP{spec.tp}: no all-reduce or other communication is run",
        "random weights and caches; every step decodes position context_len again (fixed inputs)",
        "not modelled: embedding, LM head and sampling, hyper-connections (hc_mult), hash-routed layers, "
        "the compressor's pooled-token emission (its per-step projection is run), FP8/FP4 weights "
        "(weights are bf16), FP8 indexer keys (bf16 here)",
        "routed experts: tokens sorted by expert, one torch._grouped_mm per projection",
    ]
    if shapes.experts_run != shapes.experts_model:
        notes.append(f"{shapes.experts_run} of {shapes.experts_model} experts held (spec experts)")
    if shapes.kernel_heads != shapes.heads_per_rank:
        notes.append(f"attention kernel runs {shapes.kernel_heads} heads for {shapes.heads_per_rank} per-rank heads "
                     f"(padded as SGLang's _kernel_num_heads does)")
    if interpreter:
        notes.append("Triton kernels ran under the CPU interpreter (TRITON_INTERPRET=1) with a pinned "
                     "autotune config: times are CPU-interpreter measurements, not GPU times")
    elif device.type == "cpu":
        notes.append("CPU measurement")
    return notes
