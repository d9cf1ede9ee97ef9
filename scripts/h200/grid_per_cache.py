"""The two-cache cells of the grid with the per-cache dispatch prototype (``sparse_mla_grid.per_cache_call``):
the rewrite as shipped, the prototype and FlashMLA, warm and cold, on the same inputs as the grid's cells
(the grid's seeds, in its order); the prototype's output is checked against the float32 reference on set 0
of every cell before it is timed. Writes ``$OUT/grid_per_cache.json`` (after every shape) and prints a table.

    python3 scripts/h200/grid_per_cache.py OUT_DIR [BUDGET_S]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import torch  # noqa: E402

import sparse_mla_grid as g  # noqa: E402
from tools.kernels import dsv4_cache  # noqa: E402
from tools.kernels.splitk import check  # noqa: E402


def main() -> int:
    import flash_mla

    out_dir, budget = Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 200.0
    t0 = time.time()
    caches = {"compressed": g.fill_cache(g.REGIONS * g.CONTEXT, g.PAGE, 11),
              "window": g.fill_cache(g.WINDOW_PAGES * g.WINDOW_PAGE, g.WINDOW_PAGE, 12),
              "sink": (torch.randn(g.HEADS, generator=torch.Generator().manual_seed(13)) * 2.0).cuda()}  # fmt: skip
    cells, skipped, seed = [], [], 1000
    for batch, topk in g.cell_order():
        for pattern in g.PATTERNS:
            for form in g.FORMS:
                seed += 1  # the grid's seed of this cell
                if form != "two_cache":
                    continue
                if time.time() - t0 > budget:
                    skipped.append({"batch": batch, "topk": topk, "pattern": pattern})
                    continue
                cells.append(run_cell(batch, topk, pattern, seed, caches, flash_mla))
                c = cells[-1]
                print(f"{batch:3d} {topk:4d} {pattern:9s} ok={c['check']['ok']} | shipped {g._fmt(c['rewrite'])}"
                      f" | per-cache {g._fmt(c['per_cache'])} | fm {g._fmt(c['flashmla'])}", flush=True)  # fmt: skip
        (out_dir / "grid_per_cache.json").write_text(json.dumps({"cells": cells, "skipped": skipped}))
    (out_dir / "grid_per_cache.json").write_text(json.dumps({"cells": cells, "skipped": skipped,
                                                             "wall_s": time.time() - t0}))  # fmt: skip
    return 0


def run_cell(batch, topk, pattern, seed, caches, fm) -> dict:
    n_sets = g.n_cold_sets(batch * (topk + g.WINDOW) * dsv4_cache.BYTES_PER_TOKEN)
    sets = [g.make_inputs(batch, topk, pattern, "two_cache", seed + 101 * i, caches) for i in range(n_sets)]
    gen = torch.Generator(device="cuda").manual_seed(seed + 3)
    q = (torch.randn(batch, 1, g.HEADS, 512, generator=gen, device="cuda") * 0.5).to(torch.bfloat16)
    s0 = sets[0]
    out, lse = g.per_cache_call(q, s0)()
    ref_out, ref_lse = dsv4_cache.reference_sparse_decode(
        q, s0["k_cache"], s0["indices"], s0["topk_length"], s0["attn_sink"], None,
        s0["extra_k_cache"], s0["extra_indices"], s0["extra_topk_length"])  # fmt: skip
    errs = check.compare(out, lse, ref_out, ref_lse)
    errs["ok"] = check._verdict(errs, check.OUT_NORM_REL_MAX)
    cell = {"batch": batch, "topk": topk, "pattern": pattern, "form": "two_cache", "seed": seed, "cold_sets": n_sets,
            "check": errs}  # fmt: skip
    impls = {"rewrite": lambda q_, s_: g.rewrite_call(q_, s_), "per_cache": g.per_cache_call,
             "flashmla": lambda q_, s_: g.flashmla_call(fm, q_, s_)}  # fmt: skip
    for name, make in impls.items():
        if name == "per_cache" and not errs["ok"]:
            cell[name] = {"error": "failed its check: not timed"}
            continue
        cell[name] = g.time_both(make, sets, q, True)
    return cell


if __name__ == "__main__":
    sys.exit(main())
