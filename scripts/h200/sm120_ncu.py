"""The sm_120 family's kernels on the Hopper proxy and the Hopper plan's, called for Nsight Compute (issue 29).

    python3 -m scripts.h200.sm120_ncu proxy|hopper OUTDIR [--time]

At each of CELLS (one cache, H = 64, uniform indices as ``check.make_case`` draws them: the cells and inputs of
benchmarks/results/sm120-20261205/tune_h100.jsonl and sm120-20261207/tune2_h100.jsonl), ``proxy`` calls the
wrapper once with each of the sm_120 plan's configs (SM120_SMALL, SM120_MEDIUM, SM120_LARGE; which one the
dispatch picks there is recorded) and ``hopper`` once with the box's own plan. Each call runs twice outside and
once inside the NVTX range ``sm120_ncu`` (scripts/h200/sm120_ncu.sh profiles that range only). The order of
the profiled calls goes to OUTDIR/order_MODE.json, each compiled split kernel's cubin and its metadata
(registers, spills, shared memory) under OUTDIR/cubins_MODE/. ``--time``: no range; each call timed instead by
CUDA-graph replays (OUTDIR/time_MODE.jsonl), the calls interleaved round by round.
``proxy`` must run with DISABLE_MMA_V3=1 and PERF_INVESTIGATOR_SPLITK_ARCH=120 set before Python starts,
``hopper`` without them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

import torch

from tools.kernels import dsv4_cache
from tools.kernels import sparse_mla_decode as smd
from tools.kernels.splitk import check, tiles
from tools.kernels.splitk.timing import graph_replay_us

CELLS = [(64, 2048), (4, 1024)]
HEADS = 64
RANGE = "sm120_ncu"
ROUNDS = 7  # --time: rounds of interleaved graph replays, REPS replays a call a round
REPS = 10


def configs(mode: str) -> list:
    """The configs ``mode`` calls at every cell: the sm_120 family (proxy), or the box's plan (None: hopper)."""
    if mode == "proxy":
        assert os.environ.get("DISABLE_MMA_V3") == "1" and os.environ.get(tiles.PLAN_ARCH_ENV) == "120", "proxy env"
        return list(tiles.SM120_CONFIGS) + extra_configs()
    assert os.environ.get("DISABLE_MMA_V3") != "1" and not os.environ.get(tiles.PLAN_ARCH_ENV), "unset the proxy env"
    return [None]


def extra_configs() -> list:
    """Variants called beside the plan's configs: SM120_NCU_EXTRA, a JSON list of {"name", "base" (a tiles.NAMED
    name), and the KernelConfig fields it changes}; each named by its "name"."""
    out = []
    for row in json.loads(os.environ.get("SM120_NCU_EXTRA", "[]")):
        row = dict(row)
        name, base = row.pop("name"), tiles.NAMED[row.pop("base")]
        EXTRA_NAMES[dataclasses.replace(base, **row)] = name
        out.append(dataclasses.replace(base, **row))
    return out


EXTRA_NAMES: dict = {}


def name_of(cfg) -> str:
    return EXTRA_NAMES.get(cfg) or tiles.config_name(cfg)


def cell_calls(mode: str):
    """(label dict, call) for every cell and config of ``mode``."""
    dev = torch.device("cuda")
    for batch, topk in CELLS:
        case = check.make_case(batch, topk, HEADS, dev, 11, topk_length=False)
        args = check.call_args(case)
        o = torch.empty(batch, 1, HEADS, dsv4_cache.HEAD_DIM, dtype=torch.bfloat16, device=dev)
        lse = torch.empty(batch, HEADS, dtype=torch.float32, device=dev)
        picked = tiles.device_plan(batch, topk, HEADS, dev).cfg
        for cfg in configs(mode):
            plan = tiles.device_plan(batch, topk, HEADS, dev, None, None, cfg)
            # the workspace allocated once, outside the graph and the range
            ws = (torch.empty(batch, plan.total, HEADS, 512, dtype=torch.float32, device=dev),
                  torch.empty(batch, plan.total, HEADS, dtype=torch.float32, device=dev))  # fmt: skip
            label = {"mode": mode, "batch": batch, "topk": topk, "config": name_of(plan.cfg),
                     "config_fields": plan.cfg.__dict__, "splits": plan.splits, "dispatch_pick": plan.cfg == picked,
                     "programs": batch * plan.splits * -(-HEADS // plan.cfg.block_h) * (2 if plan.cfg.d_halves else 1)}

            def call(o=o, lse=lse, ws=ws, args=args, cfg=cfg):
                smd.sparse_mla_decode_into(o, lse, ws, *args, config=cfg)

            yield label, call


def save_cubins(mode: str, out: Path) -> None:
    """Every compiled variant of the split kernels and the combine: cubin, PTX and TTGIR, and a metadata row."""
    folder = out / f"cubins_{mode}"
    folder.mkdir(parents=True, exist_ok=True)
    meta = []
    names = ("_split_kernel", "_split_dhalf_kernel", "_split_kernel_sm120", "_split_kernel_ws", "_combine_kernel")
    kernels = [getattr(smd, name) for name in names if hasattr(smd, name)]  # (the Gluon kernel where Gluon is)
    n = 0
    for fn in kernels:
        fn = getattr(fn, "fn", fn) if not hasattr(fn, "device_caches") else fn
        for entry in (getattr(fn, "device_caches", None) or {}).values():
            for key, compiled in entry[0].items():
                stem = f"{n:02d}_{fn.__name__}"
                n += 1
                for ext in ("cubin", "ptx", "ttgir"):
                    blob = compiled.asm.get(ext)
                    if blob is not None:
                        (folder / f"{stem}.{ext}").write_bytes(blob if isinstance(blob, bytes) else blob.encode())
                md = compiled.metadata
                meta.append({"file": stem, "kernel": fn.__name__, "key": str(key)[:2000],
                             "n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None),
                             "shared": getattr(md, "shared", None), "num_warps": getattr(md, "num_warps", None),
                             "num_stages": getattr(md, "num_stages", None)})  # fmt: skip
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))


def check_extras(out: Path) -> None:
    """Each variant against the float32 reference on the GPU (two caches, sink, lengths), before it is timed."""
    dev = torch.device("cuda")
    rows = []
    for cfg in extra_configs():
        case = check.make_case(3, 300, HEADS, dev, 7, extra=True, sink=True, topk_length=True)
        chk = check.check_case(case, with_upstream=False, config=cfg)
        rows.append({"config": name_of(cfg), "ok": chk["ok"], "vs_reference": chk["vs_reference"]})
        print("check", name_of(cfg), "ok" if chk["ok"] else "WRONG", flush=True)
    (out / "check_extra.json").write_text(json.dumps(rows, indent=1, default=str))


def timed(calls: list, out: Path, mode: str) -> None:
    """Each call's CUDA-graph replay time, ROUNDS rounds, the calls interleaved within each round."""
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(ROUNDS):
        for i, (_, fn) in enumerate(calls):
            samples[i] += graph_replay_us([fn], reps=REPS)
    with open(out / f"time_{mode}.jsonl", "a") as fh:
        for (label, _), s in zip(calls, samples):
            label = {**label, "median_us": statistics.median(s), "samples_us": s}
            fh.write(json.dumps(label) + "\n")
            print(f"{mode} {label['batch']}x{label['topk']} {label['config']:14s} splits={label['splits']} "
                  f"pick={label['dispatch_pick']} median={label['median_us']:.1f} us "
                  f"[{min(s):.1f}, {max(s):.1f}]", flush=True)  # fmt: skip


def main() -> int:
    mode, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    calls = list(cell_calls(mode))
    if "--time" in sys.argv:
        if mode == "proxy" and os.environ.get("SM120_NCU_EXTRA"):
            check_extras(out)
        timed(calls, out, mode)
        try:
            save_cubins(mode, out)
        except Exception as exc:  # the timings stand without the cubins
            print(f"save_cubins: {type(exc).__name__}: {exc}", flush=True)
        return 0
    order = []
    for label, fn in calls:
        fn()
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        order.append(label)
    (out / f"order_{mode}.json").write_text(json.dumps(order, indent=1))
    print("\n".join(f"{i}: {o['batch']}x{o['topk']} {o['config']} splits={o['splits']} pick={o['dispatch_pick']}"
                    for i, o in enumerate(order)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
