"""Calls of a few grid cells inside one NVTX range, for Nsight Compute (scripts/h200/grid_ncu.sh).

Each (cell, implementation) is called twice outside the range (compilation, FlashMLA's scheduling
metadata) and once inside ``ncu_grid``; the order of the profiled calls is printed, so the report's
kernels can be told apart (the rewrite with another tile config also has other kernel names).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

import torch  # noqa: E402

from benchmarks import sparse_mla_grid as g  # noqa: E402
from tools.kernels.splitk import tiles  # noqa: E402

# (batch, top-k, pattern, form): the gaps left once the two-cache call runs as one launch (the model's call
# at B = 16, the largest batch at the smallest top-k, B = 4 below the fused regime) and the headline shape.
CELLS = [(16, 1024, "clustered", "two_cache"), (128, 512, "clustered", "two_cache"),
         (4, 512, "clustered", "two_cache"), (64, 2048, "clustered", "one_cache")]  # fmt: skip


def cell_calls():
    """(label "BxK pattern form implementation", call) for each of CELLS: the rewrite, FlashMLA and, in the
    two-cache form, the launch form the rule did not pick."""
    import flash_mla

    caches = {"compressed": g.fill_cache(g.REGIONS * g.CONTEXT, g.PAGE, 11),
              "window": g.fill_cache(g.WINDOW_PAGES * g.WINDOW_PAGE, g.WINDOW_PAGE, 12),
              "sink": (torch.randn(g.HEADS) * 2.0).cuda()}  # fmt: skip
    for batch, topk, pattern, form in CELLS:
        inp = g.make_inputs(batch, topk, pattern, form, 5, caches)
        q = (torch.randn(batch, 1, g.HEADS, 512, device="cuda") * 0.5).to(torch.bfloat16)
        calls = {"rewrite": g.rewrite_call(q, inp), "flashmla": g.flashmla_call(flash_mla, q, inp)}
        if form == "two_cache":
            probe, forced = g.other_launch_form(tiles.device_plan(batch, g.WINDOW, g.HEADS, q.device, topk).fused)
            calls[probe] = g.rewrite_call(q, inp, fused=forced)
        for name, fn in calls.items():
            yield f"{batch}x{topk} {pattern} {form} {name}", fn


def main() -> int:
    order = []
    for label, fn in cell_calls():
        fn()
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("ncu_grid")
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        order.append(label)
    print("\n".join(f"{i}: {o}" for i, o in enumerate(order)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
