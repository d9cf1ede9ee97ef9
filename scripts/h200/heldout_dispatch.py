"""Issue 16's held-out check of the split-K dispatch (one cache, H = 64), on the H200.

At shapes no committed sweep tuned on (benchmarks/results: run1/3/5/6/7 tuned at B in {1, 2, 4, 8, 16, 32, 64}
and top-k in {512, 1024, 2048}; the grid's cells are B in {1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 128} x top-k in
{512, 768, 1024, 1536, 2048}), every named tile config (tools/kernels/splitk/tiles.py NAMED) at every split count
of SPLIT_STEPS up to its most at the shape (its tile count, at most MAX_SPLITS), and the dispatch's own pick (choose_config, choose_num_splits),
are timed by CUDA-graph replay (tools/kernels/splitk/timing.py graph_replay_us), warm L2, uniform indices with
valid lengths. The candidates run in ``--passes`` interleaved passes (each pass in a new random order); a
candidate's time is the median of its passes' medians, every sample kept. Prints one JSON object; the verdict
(is the pick within 5% of the best measured there) is recomputed from the samples by tests/test_benchmark_heldout.py.

    python -m scripts.h200.heldout_dispatch --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch  # noqa: E402
import triton  # noqa: E402

from tools.kernels import dsv4_cache  # noqa: E402
from tools.kernels import sparse_mla_decode as smd  # noqa: E402
from tools.kernels.splitk import tiles  # noqa: E402
from tools.kernels.splitk.check import call_args, make_case  # noqa: E402
from tools.kernels.splitk.timing import graph_replay_us  # noqa: E402

HELD_OUT = [(6, 640), (12, 1280), (20, 896), (40, 1792), (80, 1152), (112, 1664)]
HEADS = 64


# The split counts tried (up to a config's most at a shape): every count to 8, then steps that keep the last
# wave's fill apart by about an eighth; the dispatch's own pick is always added.
SPLIT_STEPS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64]


def candidates(batch: int, topk: int) -> list[tuple[str, int]]:
    out = []
    for name, cfg in tiles.NAMED.items():
        out += [(name, splits) for splits in SPLIT_STEPS if splits <= tiles.most_splits(cfg, topk)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=300.0, help="stop starting shapes after this")
    args = parser.parse_args()
    dev = torch.device("cuda")
    arch = tiles.device_arch(dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    started = time.monotonic()
    shapes, skipped = [], []
    for batch, topk in HELD_OUT:
        if time.monotonic() - started > args.budget_s:
            skipped.append({"batch": batch, "topk": topk})
            continue
        case = make_case(batch, topk, HEADS, dev, seed=batch * 10_000 + topk, topk_length=True)
        call = call_args(case)
        out = torch.empty(batch, 1, HEADS, dsv4_cache.HEAD_DIM, dtype=torch.bfloat16, device=dev)
        lse = torch.empty(batch, HEADS, dtype=torch.float32, device=dev)
        pick_cfg = tiles.choose_config(batch, topk, HEADS, arch)
        pick = (tiles.config_name(pick_cfg), tiles.choose_num_splits(batch, topk, HEADS, sms, arch))
        cands = candidates(batch, topk)
        if pick not in cands:
            cands.append(pick)
        samples: dict[tuple[str, int], list[list[float]]] = {c: [] for c in cands}
        errors: dict[str, str] = {}
        rng = random.Random(batch * 7 + topk)
        for _ in range(args.passes):
            order = list(cands)
            rng.shuffle(order)
            for name, splits in order:
                if f"{name}/{splits}" in errors:
                    continue
                cfg = tiles.NAMED[name]

                def fn(cfg=cfg, splits=splits):
                    smd.sparse_mla_decode_into(out, lse, None, *call, num_splits=splits, config=cfg)

                try:
                    samples[(name, splits)].append(graph_replay_us([fn], reps=args.reps))
                except Exception as exc:  # a config the shape cannot launch is a recorded failure, not a stop
                    errors[f"{name}/{splits}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        rows = [{"config": name, "splits": splits, "passes_us": runs,
                 "median_us": statistics.median(statistics.median(r) for r in runs) if runs else None,
                 "error": errors.get(f"{name}/{splits}")}
                for (name, splits), runs in samples.items()]
        shapes.append({"batch": batch, "topk": topk, "heads": HEADS, "pick": {"config": pick[0], "splits": pick[1]},
                       "candidates": rows})
        timed = [r for r in rows if r["median_us"] is not None]
        best = min(timed, key=lambda r: r["median_us"])
        mine = next(r for r in rows if (r["config"], r["splits"]) == pick)
        print(f"B={batch} top-k={topk}: pick {pick[0]}/{pick[1]} {mine['median_us']:.2f} us, best "
              f"{best['config']}/{best['splits']} {best['median_us']:.2f} us ({mine['median_us'] / best['median_us']:.3f}x)",
              file=sys.stderr, flush=True)
    props = torch.cuda.get_device_properties(dev)
    result = {"what": "held-out check of the split-K dispatch: one cache, H=64, uniform indices, valid lengths, warm L2, "
                      "CUDA-graph replay", "held_out": [{"batch": b, "topk": k} for b, k in HELD_OUT],
              "tuned_on": "benchmarks/results sparse_mla_decode_run1/3/5/6/7 sweeps and the grid-20261201 cells",
              "passes": args.passes, "reps": args.reps, "tolerance": 0.05, "shapes": shapes, "skipped": skipped,
              "env": {"device": props.name, "sm_count": sms, "arch": arch, "torch": torch.__version__,
                      "triton": triton.__version__, "cuda": torch.version.cuda,
                      "git_revision": os.environ.get("GIT_REVISION")},
              "wall_s": round(time.monotonic() - started, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "heldout_dispatch.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
