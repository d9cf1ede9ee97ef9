"""Capture the real GPU test fixtures on an H200: profiler traces, Nsight Compute numbers, Triton metadata.

Modes (one process each; `run_all.sh` beside this drives them and packs the results):
  trace      eager decode steps of a small DSV4-like decode layer stack, torch.profiler Chrome trace
  graph      the same steps captured once in a CUDA graph and replayed under the profiler
  tp         one rank of a 2-rank run (torchrun) with NCCL all-reduces, trace named like SGLang's
  ncu        the upstream sparse decode kernel inside an NVTX range, for `ncu --nvtx-include`
  metadata   Triton's compiled metadata (registers, spills, shared memory) for each autotune config
  device     device properties as JSON

The workload is a stand-in for a model's decode step (random weights, DSV4-Flash per-rank shapes at
TP4, fewer layers and experts) whose attention is the real upstream SGLang Triton kernel; it exists
to give the trace tests real kernels, real launch gaps and real CUDA-graph replays to chew on.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
from pathlib import Path

import torch

from tools.kernels import dsv4_cache, upstream  # noqa: E402

HIDDEN, Q_LORA, O_LORA, HEADS_PER_RANK, KERNEL_HEADS = 4096, 1024, 1024, 16, 64
INDEX_HEADS, INDEX_DIM, WINDOW, PAGE = 64, 128, 128, 256
EXPERTS, TOPK_EXPERTS, MOE_INTER = 32, 6, 512


def rms_norm(x, weight, eps=1e-6):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


class Layer:
    def __init__(self, batch, topk, context, device, gen):
        def w(*shape):
            return (torch.randn(*shape, device=device, generator=gen) * shape[0] ** -0.5).bfloat16()

        self.batch, self.topk = batch, topk
        self.norm = torch.ones(HIDDEN, device=device, dtype=torch.bfloat16)
        self.wq_a, self.wq_b = w(HIDDEN, Q_LORA), w(Q_LORA, HEADS_PER_RANK * 512)
        self.wkv = w(HIDDEN, 512)
        self.wi_q, self.wi_k = w(HIDDEN, INDEX_HEADS * INDEX_DIM), w(HIDDEN, INDEX_DIM)
        self.wo_a, self.wo_b = w(HEADS_PER_RANK * 512, O_LORA), w(O_LORA, HIDDEN)
        self.router = w(HIDDEN, EXPERTS)
        self.w13 = [w(HIDDEN, 2 * MOE_INTER) for _ in range(EXPERTS)]
        self.w2 = [w(MOE_INTER, HIDDEN) for _ in range(EXPERTS)]
        # Window cache: the last WINDOW tokens of each sequence; compressed cache: context/4 tokens.
        self.compressed = context // 4
        n_swa = batch * WINDOW
        self.swa = dsv4_cache.empty_cache((n_swa + PAGE - 1) // PAGE, PAGE, device)
        dsv4_cache.write_tokens(self.swa, torch.arange(n_swa, device=device),
                                torch.randn(n_swa, 512, device=device, generator=gen))
        n_c = batch * self.compressed
        self.cmp = dsv4_cache.empty_cache((n_c + PAGE - 1) // PAGE, PAGE, device)
        dsv4_cache.write_tokens(self.cmp, torch.arange(n_c, device=device),
                                torch.randn(n_c, 512, device=device, generator=gen))
        self.index_keys = torch.randn(batch, self.compressed, INDEX_DIM, device=device, generator=gen).bfloat16()
        self.swa_idx = (torch.arange(batch, device=device)[:, None] * WINDOW
                        + torch.arange(WINDOW, device=device)[None, :]).int().view(batch, 1, WINDOW)
        self.sink = torch.randn(KERNEL_HEADS, device=device, generator=gen)
        self.kernel = upstream.load()
        self.dense_moe = False

    def forward(self, x, all_reduce=None):
        h = rms_norm(x, self.norm)
        q = (rms_norm(h @ self.wq_a, 1.0) @ self.wq_b).view(-1, 1, HEADS_PER_RANK, 512)
        q = torch.cat([q, q.new_zeros(q.shape[0], 1, KERNEL_HEADS - HEADS_PER_RANK, 512)], dim=2)
        kv = h @ self.wkv
        iq = (h @ self.wi_q).view(-1, INDEX_HEADS, INDEX_DIM)
        scores = torch.einsum("bhd,btd->bt", iq, self.index_keys).float()
        top = torch.topk(scores, self.topk, dim=-1).indices
        base = torch.arange(self.batch, device=x.device)[:, None] * self.compressed
        extra_idx = (top + base).int().view(self.batch, 1, self.topk)
        out, _ = self.kernel.flash_mla_sparse_decode_triton(
            q, self.swa, self.swa_idx, None, self.sink, 512, 512 ** -0.5, self.cmp, extra_idx, None)
        o = out[:, 0, :HEADS_PER_RANK].reshape(-1, HEADS_PER_RANK * 512) @ self.wo_a @ self.wo_b
        if all_reduce is not None:
            all_reduce(o)
        x = x + o + kv.sum(-1, keepdim=True) * 0
        h = rms_norm(x, self.norm)
        logits = (h @ self.router).float()
        weights, experts = torch.topk(torch.sigmoid(logits), TOPK_EXPERTS, dim=-1)
        moe = torch.zeros_like(h)
        if self.dense_moe:  # no data-dependent shapes: capturable in a CUDA graph
            gates = torch.zeros_like(logits).scatter(1, experts, weights).to(h.dtype)
            for e in range(EXPERTS):
                gate_up = h @ self.w13[e]
                act = torch.nn.functional.silu(gate_up[:, :MOE_INTER]) * gate_up[:, MOE_INTER:]
                moe += (act @ self.w2[e]) * gates[:, e, None]
        else:
            for e in range(EXPERTS):
                rows, slot = (experts == e).nonzero(as_tuple=True)
                gate_up = h[rows] @ self.w13[e]
                act = torch.nn.functional.silu(gate_up[:, :MOE_INTER]) * gate_up[:, MOE_INTER:]
                moe.index_add_(0, rows, (act @ self.w2[e]) * weights[rows, slot, None].to(h.dtype))
        if all_reduce is not None:
            all_reduce(moe)
        return x + moe


def build(batch, topk, context, layers, device):
    gen = torch.Generator(device=device).manual_seed(1234)
    stack = [Layer(batch, topk, context, device, gen) for _ in range(layers)]
    x = torch.randn(batch, HIDDEN, device=device, generator=gen).bfloat16()
    return stack, x


def step(stack, x, all_reduce=None):
    for layer in stack:
        x = layer.forward(x, all_reduce)
    return x


def profile_to(path: Path, fn, steps: int):
    from torch.profiler import ProfilerActivity, profile, schedule

    sched = schedule(wait=1, warmup=1, active=steps)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched) as prof:
        for _ in range(steps + 2):
            fn()
            torch.cuda.synchronize()
            prof.step()
    raw = path.with_suffix("")  # strip .gz
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def mode_trace(a):
    stack, x = build(a.batch, a.topk, a.context, a.layers, "cuda")
    step(stack, x)  # autotune + warm up outside the profile
    torch.cuda.synchronize()
    profile_to(Path(a.out), lambda: step(stack, x), a.steps)
    print(json.dumps({"mode": "trace", "batch": a.batch, "topk": a.topk, "chosen": upstream.chosen_config()}))


def mode_graph(a):
    stack, x = build(a.batch, a.topk, a.context, a.layers, "cuda")
    for layer in stack:
        layer.dense_moe = True
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step(stack, x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(stack, x)
    graph.replay()
    torch.cuda.synchronize()
    profile_to(Path(a.out), graph.replay, a.steps)
    print(json.dumps({"mode": "graph", "batch": a.batch, "topk": a.topk, "chosen": upstream.chosen_config()}))


def mode_tp(a):
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    stack, x = build(a.batch, a.topk, a.context, a.layers, "cuda")
    reduce = lambda t: dist.all_reduce(t)  # noqa: E731
    step(stack, x, reduce)
    torch.cuda.synchronize()
    out = Path(a.out) / f"dsv4-like-B{a.batch}-TP-{rank}.trace.json.gz"
    profile_to(out, lambda: step(stack, x, reduce), a.steps)
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"mode": "tp", "rank": rank, "chosen": upstream.chosen_config()}))


def mode_ncu(a):
    stack, x = build(a.batch, a.topk, a.context, 1, "cuda")
    layer = stack[0]
    step(stack, x)  # autotune outside the measured range
    torch.cuda.synchronize()
    q = torch.randn(a.batch, 1, KERNEL_HEADS, 512, device="cuda").bfloat16()
    base = torch.arange(a.batch, device="cuda")[:, None] * layer.compressed
    idx = (torch.randint(0, layer.compressed, (a.batch, a.topk), device="cuda") + base).int().view(a.batch, 1, a.topk)
    torch.cuda.nvtx.range_push("ncu_measure")
    layer.kernel._run_triton_sparse_decode(q, layer.cmp, idx, None, 512 ** -0.5)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(json.dumps({"mode": "ncu", "batch": a.batch, "topk": a.topk, "chosen": upstream.chosen_config()}))


def mode_metadata(a):
    """Compile each autotune config through the wrapper's own launch arguments and read Triton's metadata."""
    module = upstream.load()
    tuner = getattr(module, upstream.KERNEL_NAME)
    seen = {}

    class Recorder:  # stands in for the autotuner just long enough to see the wrapper's launch arguments
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.update(grid=grid, args=args, kwargs=kwargs)
                return tuner[grid](*args, **kwargs)
            return launch

    setattr(module, upstream.KERNEL_NAME, Recorder())
    stack, x = build(1, 512, 4096, 1, "cuda")
    step(stack, x)
    torch.cuda.synchronize()
    setattr(module, upstream.KERNEL_NAME, tuner)
    results = []
    for config in list(tuner.configs):
        kernel = tuner.fn[seen["grid"]](*seen["args"], **seen["kwargs"], **config.kwargs,
                                         num_warps=config.num_warps, num_stages=config.num_stages)
        torch.cuda.synchronize()
        if hasattr(kernel, "_init_handles"):
            kernel._init_handles()
        results.append({
            "config": dict(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages),
            "n_regs": kernel.n_regs, "n_spills": kernel.n_spills,
            "shared": kernel.metadata.shared, "target": str(kernel.metadata.target),
        })
    print(json.dumps({"mode": "metadata", "kernel": upstream.KERNEL_NAME, "grid": list(seen["grid"]),
                      "configs": results}))


def mode_device(a):
    import triton

    p = torch.cuda.get_device_properties(0)
    fields = ["name", "multi_processor_count", "regs_per_multiprocessor", "max_threads_per_multi_processor",
              "shared_memory_per_multiprocessor", "shared_memory_per_block_optin", "L2_cache_size",
              "total_memory", "major", "minor", "warp_size"]
    info = {f: getattr(p, f, None) for f in fields}
    info.update(torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                sglang_kernel_file=str(upstream.kernel_path()))
    print(json.dumps({"mode": "device", "device": info}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["trace", "graph", "tp", "ncu", "metadata", "device"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--topk", type=int, default=512)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="trace.json.gz")
    a = parser.parse_args()
    globals()[f"mode_{a.mode}"](a)


if __name__ == "__main__":
    main()
