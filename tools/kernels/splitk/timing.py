"""The timing of the split-K decode at one shape, CUDA only (``python -m tools.kernels.splitk bench``).

``run_bench``: CUDA-graph replay and ``triton.testing.do_bench`` medians of the kernel, and of the
upstream SGLang kernel, at one shape with a warm L2.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Callable

import torch

from tools.kernels import dsv4_cache, upstream
from tools.kernels import sparse_mla_decode as smd
from tools.kernels.splitk import declared
from tools.kernels.splitk.check import _variant, call_args, configs_run, make_case
from tools.kernels.splitk.tiles import config_name


def graph_replay_us(calls: list[Callable[[], object]], reps: int = 30) -> list[float]:
    """Per-call times (us) from CUDA-graph replays: the calls (one pass over the list, repeated to at
    least 8 launches) are captured in one graph; each replay is timed with CUDA events."""
    for fn in calls[:2]:
        fn()
    torch.cuda.synchronize()
    seq = list(calls)
    while len(seq) < 8:
        seq += calls
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in seq[:3]:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in seq:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / len(seq))
    del graph
    return samples


def do_bench_us(fn: Callable[[], object]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1000.0


def compiled_sass(kernels) -> dict[str, dict[str, int]]:
    """The SASS instruction mix (cuobjdump) of every variant of ``kernels`` (Triton JIT functions) this process
    compiled, by kernel name and then opcode summed over the variants, for the opcodes that tell which tensor
    core path and whether local memory ran: HMMA (mma.sync), HGMMA (wgmma), LDL/STL (spills)."""
    import triton
    from triton.backends.nvidia import compiler as nvidia

    from tools.kernel_source.resources import cubin_sass_mix

    major, minor = torch.cuda.get_device_capability()
    cuobjdump = Path(nvidia.get_ptxas(10 * major + minor).path).parent / "cuobjdump"
    out: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="splitk_sass_") as workdir:
        for fn in kernels:
            fn = getattr(fn, "fn", fn) if not isinstance(fn, triton.runtime.jit.JITFunction) else fn
            caches = getattr(fn, "device_caches", None) or {}
            for entry in caches.values():
                for compiled in entry[0].values():
                    mix = cubin_sass_mix(compiled.asm["cubin"], cuobjdump, Path(workdir))
                    row = out.setdefault(fn.__name__, {"variants": 0, "HMMA": 0, "HGMMA": 0, "LDL": 0, "STL": 0})
                    row["variants"] += 1
                    for op in ("HMMA", "HGMMA", "LDL", "STL"):
                        row[op] += mix.get(op, 0)
    return out


def splitk_sass() -> dict:
    """``compiled_sass`` of every split-K kernel (each split family and the combine) this process compiled, or
    ``{"error": ...}`` when the SASS could not be read: the timings beside it stand, and what it could not say is said."""
    try:
        return compiled_sass([smd._split_kernel, smd._split_dhalf_kernel, smd._split_kernel_sm120, smd._combine_kernel])
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_bench(batch, topk, heads, seed, with_upstream, num_splits, config=None, engine_call=None) -> dict:
    """Graph-replay and do_bench medians of the kernel (and upstream) at one shape, warm L2;
    with ``engine_call`` (as for ``run_check``) the call in the form the engine makes it."""
    dev = torch.device("cuda")
    if engine_call is not None:
        case = make_case(batch, topk, heads, dev, seed, **_variant("engine_call", engine_call))
    else:
        case = make_case(batch, topk, heads, dev, seed, topk_length=False)
    args = call_args(case)
    plan = configs_run(batch, topk, heads, dev, config, engine_call, num_splits)
    out = torch.empty(batch, 1, heads, dsv4_cache.HEAD_DIM, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=dev)

    def ours():
        smd.sparse_mla_decode_into(out, lse, None, *args, num_splits=num_splits, config=config)

    samples = graph_replay_us([ours])
    result = {
        "shape": {"batch": batch, "topk": topk, "heads": heads},
        "engine_call": engine_call,
        "config": plan.cfg.__dict__,
        "config_name": config_name(plan.cfg),
        "extra_config_name": config_name(plan.extra_cfg) if plan.extra_cfg is not None else None,
        "splits": plan.splits,
        "fused": plan.fused,
        "plan_arch": int(os.environ[declared.PLAN_ARCH_ENV]) if os.environ.get(declared.PLAN_ARCH_ENV) else None,
        "wgmma_off": os.environ.get(declared.WGMMA_OFF_ENV) == "1",
        "rewrite_graph_us": statistics.median(samples),
        "rewrite_do_bench_us": do_bench_us(ours),
        "rewrite_samples_us": samples,
    }
    result["sass"] = splitk_sass()
    if with_upstream:
        up = upstream.load().flash_mla_sparse_decode_triton
        up_samples = graph_replay_us([lambda: up(*args)], reps=5)
        result.update(upstream_graph_us=statistics.median(up_samples), upstream_samples_us=up_samples)
        result["speedup_vs_upstream"] = result["upstream_graph_us"] / result["rewrite_graph_us"]
    return result
