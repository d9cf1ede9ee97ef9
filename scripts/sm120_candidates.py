"""Tile candidates for the sm_120 family (issue 29): each compiled for sm_120 by the grid step's ahead-of-time
compile (no GPU), kept only when clean (no spill, no stack, within 101,376 B of shared memory), so that the
H200 proxy times only configs sm_120 can run as they are.

    python -m scripts.sm120_candidates OUT.json      # every candidate's resources, and which are clean
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from tools.kernels.splitk import tiles  # noqa: E402


def candidates() -> list[tiles.KernelConfig]:
    if os.environ.get("SM120_FAMILY") == "2":
        return candidates_flat()
    out = []
    shapes = [(16, 32, 4), (16, 64, 4), (32, 32, 4), (32, 32, 8), (32, 64, 8), (64, 32, 8), (64, 64, 8)]
    for block_h, block_t, warps in shapes:
        for stages in (1, 2, 3):
            for prefetch in (False, True):
                if stages == 3 and block_h > 16:
                    continue
                out.append(tiles.KernelConfig(block_h=block_h, block_t=block_t, num_warps=warps, num_stages=stages,
                                              programs_per_sm=1, sm120=True, prefetch=prefetch))
    return out


def candidates_flat() -> list[tiles.KernelConfig]:
    """The second design (issue 29, 2026-12-07): S's fp8 groups in a branchless loop, so that Triton's pipeliner
    turns their gathers into cp.async stages ahead (the first design's group loop branched on the rope group
    and ran one HBM round trip per group, 8 a tile, one after another); P V over the 512 dims whole, as two
    halves in one program, or split over two programs (64 heads then fit 8 warps' registers)."""
    out = []
    for block_h, block_t, warps in [(16, 32, 4), (16, 64, 4), (32, 32, 8), (32, 64, 8), (64, 32, 8), (64, 64, 8)]:
        for stages in (2, 3):
            for form in ("whole", "halves", "dv"):
                out.append(tiles.KernelConfig(block_h=block_h, block_t=block_t, num_warps=warps, num_stages=stages,
                                              programs_per_sm=1, sm120=True, flat_s=True, pv_halves=form == "halves",
                                              d_halves=form == "dv"))  # fmt: skip
    return out


def name(cfg: tiles.KernelConfig) -> str:
    return (f"h{cfg.block_h}_t{cfg.block_t}_w{cfg.num_warps}_s{cfg.num_stages}" + ("_pf" if cfg.prefetch else "")
            + ("_flat" if cfg.flat_s else "") + ("_hv" if cfg.pv_halves else "") + ("_dv" if cfg.d_halves else ""))


def _compile(cfg_dict: dict) -> dict:
    from scripts import sm120_splitk_compile as script
    from tools.kernel_source.resources import compile_resources

    cfg = tiles.KernelConfig(**cfg_dict)
    usage = compile_resources(script.split_request("sm_120", cfg, True))
    return {"name": name(cfg), "config": cfg_dict, "clean": script.clean(usage),
            **{k: usage[k] for k in ("registers", "spill_stores", "spill_loads", "stack_frame", "shared_per_block", "error")}}


def main() -> int:
    import triton

    with ProcessPoolExecutor(int(os.environ.get("COMPILE_WORKERS", "2"))) as pool:
        rows = list(pool.map(_compile, [dataclasses.asdict(c) for c in candidates()]))
    for r in rows:
        print(f"{r['name']:22s} clean={r['clean']} regs={r['registers']} spill={r['spill_stores']}/{r['spill_loads']} "
              f"stack={r['stack_frame']} smem={r['shared_per_block']} {(r['error'] or '')[:120]}")
    Path(sys.argv[1]).write_text(json.dumps({"triton": triton.__version__, "arch": "sm_120", "candidates": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
