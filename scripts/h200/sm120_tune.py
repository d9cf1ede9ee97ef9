"""Tile candidates of the sm_120 family timed on a Hopper proxy (issue 29), Triton's wgmma lowering off.

    python3 -m scripts.h200.sm120_tune CANDIDATES.json OUT.jsonl [--warm NAME]

CANDIDATES.json is scripts/sm120_candidates.py's output: only the candidates that compile clean for sm_120
are taken. Each is checked against the float32 reference (two caches, sink, lengths) before it is timed;
then one-cache cells (H = 64, the grid's uniform indices as make_case draws them) as CUDA-graph replay
samples. ``--warm NAME`` only compiles one candidate (processes run side by side fill Triton's cache).
Must run with DISABLE_MMA_V3=1 and PERF_INVESTIGATOR_SPLITK_ARCH=120 set before Python starts.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

from tools.kernels import sparse_mla_decode as smd
from tools.kernels import dsv4_cache
from tools.kernels.splitk import check, sm120, tiles
from tools.kernels.splitk.timing import compiled_sass, graph_replay_us

CELLS = [(1, 512), (4, 2048), (16, 1024), (16, 2048), (64, 2048), (128, 512)]
HEADS = 64


def clean_candidates(path: str) -> dict[str, tiles.KernelConfig]:
    rows = json.loads(open(path).read())["candidates"]
    return {r["name"]: tiles.KernelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in r["config"].items()})
            for r in rows if r["clean"]}


def hopper(out_path: str) -> int:
    """The box's own plan (Hopper kernels, wgmma on) at the same cells, in a process of its own: the baseline
    the candidates' times are read against (``--hopper``; run without the proxy's env)."""
    assert os.environ.get("DISABLE_MMA_V3") != "1" and not os.environ.get(tiles.PLAN_ARCH_ENV), "unset the proxy's env"
    dev = torch.device("cuda")
    rows = []
    for batch, topk in CELLS:
        case = check.make_case(batch, topk, HEADS, dev, 11, topk_length=False)
        args = check.call_args(case)
        o = torch.empty(batch, 1, HEADS, dsv4_cache.HEAD_DIM, dtype=torch.bfloat16, device=dev)
        lse = torch.empty(batch, HEADS, dtype=torch.float32, device=dev)
        samples = graph_replay_us([lambda: smd.sparse_mla_decode_into(o, lse, None, *args)])
        plan = tiles.device_plan(batch, topk, HEADS, dev, None, None, None)
        rows.append({"batch": batch, "topk": topk, "median_us": statistics.median(samples), "samples_us": samples,
                     "splits": plan.splits, "config": tiles.config_name(plan.cfg)})
    with open(out_path, "a") as out:
        out.write(json.dumps({"name": "hopper_plan", "cells": rows}) + "\n")
    print("hopper_plan", " ".join(f"{r['batch']}x{r['topk']}:{r['median_us']:.1f}({r['config']})" for r in rows), flush=True)
    return 0


def main() -> int:
    if "--hopper" in sys.argv:
        return hopper(sys.argv[sys.argv.index("--hopper") + 1])
    assert os.environ.get("DISABLE_MMA_V3") == "1" and os.environ.get(tiles.PLAN_ARCH_ENV) == "120", "set the proxy's env"
    configs = clean_candidates(sys.argv[1])
    # two 4-warp programs fit an SM (registers and shared memory): the split rule may plan for both
    configs.update({f"{n}_p2": tiles.KernelConfig(**{**c.__dict__, "programs_per_sm": 2})
                    for n, c in list(configs.items()) if c.num_warps == 4})
    warm = sys.argv[sys.argv.index("--warm") + 1] if "--warm" in sys.argv else None
    dev = torch.device("cuda")
    out = open(sys.argv[2], "a") if not warm else None
    for name, cfg in configs.items():
        if warm and name != warm:  # (a _p2 twin is the same binary)
            continue
        chk = check.check_case(check.make_case(3, 300, HEADS, dev, 7, extra=True, sink=True, topk_length=True),
                               with_upstream=False, config=cfg)
        rows = []
        for batch, topk in CELLS:
            case = check.make_case(batch, topk, HEADS, dev, 11, topk_length=False)
            args = check.call_args(case)
            o = torch.empty(batch, 1, HEADS, dsv4_cache.HEAD_DIM, dtype=torch.bfloat16, device=dev)
            lse = torch.empty(batch, HEADS, dtype=torch.float32, device=dev)

            def call():
                smd.sparse_mla_decode_into(o, lse, None, *args, config=cfg)

            if warm:
                call()
                continue
            samples = graph_replay_us([call])
            rows.append({"batch": batch, "topk": topk, "median_us": statistics.median(samples), "samples_us": samples,
                         "splits": tiles.device_plan(batch, topk, HEADS, dev, None, None, cfg).splits})
        if warm:
            torch.cuda.synchronize()
            continue
        record = {"name": name, "config": cfg.__dict__, "check_ok": chk["ok"], "check": chk["vs_reference"], "cells": rows,
                  "sass": compiled_sass([sm120._split_kernel_sm120])}
        out.write(json.dumps(record) + "\n")
        out.flush()
        print(name, "ok" if chk["ok"] else "WRONG", " ".join(f"{r['batch']}x{r['topk']}:{r['median_us']:.1f}" for r in rows),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
