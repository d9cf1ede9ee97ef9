"""Tile configurations of the split-K decode and the rule that picks them: ``choose_config``, ``choose_num_splits``.

A ``KernelConfig`` is a tile shape and its launch options. SMALL, MEDIUM and LARGE (Triton language),
LARGE_SM90 and LARGE_WS (Gluon, Hopper) are the named ones (``NAMED``, ``config_name``), each the fastest
of its regime in the committed H200 sweeps; SM120_SMALL, SM120_MEDIUM and SM120_LARGE are the family for
sm_120 (``_split_kernel_sm120``: mma.sync, each compiled for sm_120 with no spill). ``plan_arch`` (the
device's compute capability, or the architecture PLAN_ARCH_ENV names: the declared hardware's plan run on
a stand-in) and ``_sm_count`` are the facts of the device that the rule reads.
Which kernel a config launches is ``tools.kernels.sparse_mla_decode._launch_splits``'s to say.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Optional

import torch
import triton

from tools.kernels import dsv4_cache
from tools.kernels.splitk import declared
from tools.kernels.splitk.gluon_lang import gluon

HEAD_DIM = dsv4_cache.HEAD_DIM  # 512
MAX_SPLITS = 64


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch options of the split kernel."""

    block_h: int  # heads sharing one gathered KV tile (tensor-core M)
    block_t: int  # tokens a tile
    num_warps: int
    num_stages: int
    programs_per_sm: int  # resident programs an SM holds at this tile shape (for the split heuristic)
    p_scratch: bool = False  # pass P through global scratch between the two dots (see _split_kernel)
    # Timing probes only (wrong results): 1 drops the Q K^T dot, 2 the P V dot, 3 the KV gather.
    ablate: int = 0
    d_halves: bool = False  # output dims halved over two programs (_split_dhalf_kernel)
    sm90: bool = False  # the Gluon wgmma kernel (_split_kernel_sm90): compute capability 9.0 only
    dequant_rows: int = 0  # _split_kernel_sm90's dequantization: 0 per group of 64 dims, n in n row blocks
    # _split_kernel_ws (compute capability 9.0 only): registers a thread of the second consumer and of the
    # producer warpgroup (the first consumer gets what is left of 168 x 384)
    ws_regs: tuple[int, int] = ()
    ws_batch: int = 1  # _split_kernel_ws: 64-dim groups dequantized at a time (1, 2 or 4)
    # Fewest tiles a split may get: a warp-specialized program overlaps its producer with its consumers
    # only from its second tile on, so one-tile splits pay the pipeline's fill and drain whole.
    min_tiles_per_split: int = 1
    sm120: bool = False  # _split_kernel_sm120 (Triton language, mma.sync; the sm_120 family)
    prefetch: bool = False  # _split_kernel_sm120: next tile's indices and this tile's P V bytes loaded ahead
    flat_s: bool = False  # _split_kernel_sm120: S's 7 fp8 groups in a branchless loop (their gathers pipelined)
    pv_halves: bool = False  # _split_kernel_sm120: P V as two dots over the two halves of the 512 dims


# The three tile shapes the wrapper uses, each the fastest of its regime in the H200 sweep committed
# as benchmarks/results/sparse_mla_decode_run3_sweep.json (B x top-k work, H = 64).
SMALL = KernelConfig(block_h=16, block_t=32, num_warps=4, num_stages=2, programs_per_sm=2)
MEDIUM = KernelConfig(block_h=64, block_t=32, num_warps=4, num_stages=2, programs_per_sm=1, d_halves=True)
LARGE = KernelConfig(block_h=64, block_t=64, num_warps=8, num_stages=1, programs_per_sm=1, p_scratch=True)
# Hopper: the same regime on wgmma, with cp.async prefetch and no global round trip (see _split_kernel_sm90);
# kept as the sweeps' baseline for LARGE_WS.
LARGE_SM90 = KernelConfig(block_h=64, block_t=64, num_warps=8, num_stages=2, programs_per_sm=1, sm90=True)
# Hopper, warp-specialized: a producer warpgroup dequantizes into a two-stage ring (see _split_kernel_ws).
LARGE_WS = KernelConfig(block_h=64, block_t=64, num_warps=4, num_stages=2, programs_per_sm=1, sm90=True,
                        ws_regs=(208, 80), ws_batch=4, min_tiles_per_split=2)  # fmt: skip
# sm_120 (_split_kernel_sm120). Each compiles for sm_120 under Triton 3.6 and 3.9 with 0 spill bytes and
# 33-70 KB of shared memory (benchmarks/results/sm120-20261205/): SMALL reads each KV tile once per 16 heads
# (work too small to fill the chip otherwise), MEDIUM per 32, LARGE once for all 64 heads of the block, at 128
# accumulator registers a thread. Picked among the candidates that compile clean for sm_120 under both Tritons
# (scripts/sm120_candidates.py: candidates_triton{36,39}.json) by their time on an H100 with Triton's wgmma
# lowering off (tune_h100.jsonl): SMALL 11.5 us at 1x512 (the first family's 13.0), MEDIUM 26.6 at 4x2048
# (28.7), LARGE 255.6 at 64x2048, the only 64-head tile clean under both. (Prefetching, PREFETCH, gained up
# to 10% more but spills under one Triton or the other at these tiles: no config uses it.)
SM120_SMALL = KernelConfig(block_h=16, block_t=32, num_warps=4, num_stages=3, programs_per_sm=1, sm120=True)
SM120_MEDIUM = KernelConfig(block_h=32, block_t=64, num_warps=8, num_stages=2, programs_per_sm=1, sm120=True)
SM120_LARGE = KernelConfig(block_h=64, block_t=32, num_warps=8, num_stages=1, programs_per_sm=1, sm120=True)
SM120_CONFIGS = (SM120_SMALL, SM120_MEDIUM, SM120_LARGE)
# By name: the CLI's --config choices, and the names the launch plan and the engine's call log give a config.
NAMED = {"small": SMALL, "medium": MEDIUM, "large": LARGE, "large_sm90": LARGE_SM90, "large_ws": LARGE_WS,
         "sm120_small": SM120_SMALL, "sm120_medium": SM120_MEDIUM, "sm120_large": SM120_LARGE}
WS_MAXNREG = 168  # 65536 registers over the 12 warps of the three warpgroups, rounded down to 8
SM90_ARCH = 90
SM120_ARCH = 120
# Set to a compute capability (120), the wrapper plans as for that GPU on whatever GPU it runs: the declared
# hardware's kernels timed on a stand-in (an H200 for an sm_120 deployment). The SM count stays the device's.
PLAN_ARCH_ENV = declared.PLAN_ARCH_ENV
SMALL_TOKENS = 512  # batch * topk at or below which SMALL wins (1x512: 9.7 us against 10.5 and 13.5)
MEDIUM_TOKENS = 8192  # ... and MEDIUM (1x2048: 12.6 us against 14.7; 4x2048: 19.4 against 20.7)
# ... on Hopper, where LARGE_WS takes over sooner (run 7 sweep: 2x2048 MEDIUM 15.2 us against 15.5;
# 4x2048 LARGE_WS 17.7 against 19.6; 16x512 17.2 against 19.6; 8x1024 17.0 against 18.9)
HOPPER_MEDIUM_TOKENS = 4096


# The two-cache call's two split launches run side by side, the extra (compressed) cache's on a second
# CUDA stream, when the main (window) cache's config is one of the small-work regimes: such a launch cannot
# fill the chip and is latency-bound, so in series it adds its whole time to the call's. H200 grid,
# benchmarks/results/grid-20261202 (the shipped call against rewrite_one_stream, the same configs on one
# stream): 1.21-1.56x at B <= 4 (SMALL window), 0.99-1.32x at B = 8 and 0.98-1.12x at B 16-32 (MEDIUM);
# at B >= 48 both caches run LARGE_WS, each launch fills the chip, and the call keeps one stream.
# (Where the joined row picks LARGE_WS, Hopper fuses the two launches into one instead: ``fuses``.)
BESIDE_CONFIGS = (SMALL, MEDIUM, SM120_SMALL, SM120_MEDIUM)


_SIDE_STREAMS: dict[int, "torch.cuda.Stream"] = {}


def side_stream(device: torch.device) -> "torch.cuda.Stream":
    """The one second stream a CUDA device's two-cache calls use (made on first use, then kept: a CUDA
    graph that captured it replays on it)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE_STREAMS:
        _SIDE_STREAMS[index] = torch.cuda.Stream(device=index)
    return _SIDE_STREAMS[index]


def config_name(cfg: KernelConfig) -> str:
    """The NAMED name of a tile config; ``other`` for any other."""
    return next((name for name, named in NAMED.items() if named == cfg), "other")


@functools.lru_cache(maxsize=1024)
def choose_config(batch: int, topk: int, heads: int, arch: Optional[int] = None) -> KernelConfig:
    """Tile shape for a problem (see SMALL, MEDIUM, LARGE, LARGE_WS).

    Below 64 heads (a TP shard, the CPU tests): 16-head blocks on 4 warps (mma.sync), one program
    per 16 heads. With 64 heads, by the work B x top-k: tiny problems are latency-bound and spread
    16-head blocks over more SMs (SMALL); mid-sized ones split the 512 output dims over two 4-warp
    programs (MEDIUM, ``_split_dhalf_kernel``); large ones read each KV tile once for all 64 heads
    with 8 warps and 64-token tiles (LARGE), on Hopper (``arch`` 90, see ``device_arch``) with the
    warp-specialized Gluon kernel (LARGE_WS), which Triton-language code cannot express, and which
    takes over from MEDIUM at half MEDIUM_TOKENS (HOPPER_MEDIUM_TOKENS). On sm_120 (``arch`` 120) the same
    regimes run the sm_120 family (SM120_SMALL, SM120_MEDIUM, SM120_LARGE), none of which spills there.
    """
    work = batch * topk
    if arch == SM120_ARCH:
        if heads < 64 or work <= SMALL_TOKENS:
            return SM120_SMALL
        return SM120_MEDIUM if work <= MEDIUM_TOKENS else SM120_LARGE
    if heads < 64 or work <= SMALL_TOKENS:
        return SMALL
    hopper = arch == SM90_ARCH and gluon is not None
    if work <= (HOPPER_MEDIUM_TOKENS if hopper else MEDIUM_TOKENS):
        return MEDIUM
    return LARGE_WS if hopper else LARGE


# Cost, in tile-steps of one program, of writing one split's float32 partial and merging it back
# (a [block_h, 512] float32 store plus its read in the combine kernel, against one tile's gather
# and two dots). Fitted to the split sweeps in benchmarks/results/sparse_mla_decode_run3_sweep.json:
# with it the model picks the measured best split count at every swept shape.
_PARTIAL_COST_TILES = 2.0


@functools.lru_cache(maxsize=1024)
def choose_num_splits(batch: int, topk: int, heads: int, sm_count: int, arch: Optional[int] = None,
                      cfg: Optional[KernelConfig] = None) -> int:
    """Split count for the top-k dimension (per cache), for the tile shape ``choose_config`` picks.

    Minimises the modelled time ``waves * (tiles per split + partial cost)``, where
    ``waves = ceil(programs / (sm_count * programs_per_sm))`` and ``programs = batch * head_blocks *
    splits`` (twice that when the output dims are halved): enough splits to put a program on every
    SM, without a last wave that is mostly empty, and without splits so thin that writing and
    merging their float32 partials outweighs the tiles they share. Ties go to fewer splits. Never
    fewer than the config's ``min_tiles_per_split`` tiles a split, nor more than MAX_SPLITS splits. ``arch`` as for
    ``choose_config``; ``cfg`` a config other than its pick (the fused launch forced below its regime).
    """
    cfg = cfg or choose_config(batch, topk, heads, arch)
    head_blocks = triton.cdiv(heads, cfg.block_h) * (2 if cfg.d_halves else 1)
    tiles = max(1, triton.cdiv(topk, cfg.block_t))
    slots = max(1, sm_count * cfg.programs_per_sm)
    best, best_cost = 1, math.inf
    for splits in range(1, most_splits(cfg, topk) + 1):
        waves = triton.cdiv(batch * head_blocks * splits, slots)
        cost = waves * (triton.cdiv(tiles, splits) + (_PARTIAL_COST_TILES if splits > 1 else 0.0))
        if cost < best_cost - 1e-9:
            best, best_cost = splits, cost
    return best


def most_splits(cfg: KernelConfig, topk: int) -> int:
    """The most splits ``cfg`` may cut top-k into: ``min_tiles_per_split`` tiles each, at most MAX_SPLITS."""
    return min(max(1, triton.cdiv(topk, cfg.block_t) // cfg.min_tiles_per_split), MAX_SPLITS)


def _interpreting() -> bool:
    """Under TRITON_INTERPRET=1 bf16 arithmetic is done on float32 copies: the same values (bf16 ->
    float32 is exact, and each product is exact in both), but Triton 3.9's interpreter stores bf16
    as uint16 and multiplies (elementwise and in tl.dot) the raw bit patterns."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device_arch(device: torch.device) -> Optional[int]:
    """Compute capability of a CUDA device as 10 * major + minor (90 on the H100/H200); None on the CPU
    and under the interpreter (which runs no Gluon)."""
    if device.type != "cuda" or _interpreting():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def plan_arch(device: torch.device) -> Optional[int]:
    """The compute capability the wrapper plans for: the one PLAN_ARCH_ENV names where it is set (on the CPU
    too, so that the interpreter runs the declared hardware's Triton-language kernels), else ``device_arch``."""
    forced = os.environ.get(PLAN_ARCH_ENV, "").strip()
    if not forced:
        return device_arch(device)
    if not forced.isdigit():
        raise ValueError(f"{PLAN_ARCH_ENV} must be a compute capability such as 120, not {forced!r}")
    if int(forced) == SM90_ARCH and device_arch(device) != SM90_ARCH:
        raise ValueError(f"{PLAN_ARCH_ENV}=90 plans Hopper's kernels, which run on a compute capability 9.0 GPU only")
    return int(forced)


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the CPU interpreter: a few splits, so the split and merge paths run


def plan_splits(batch, topk, heads, device, num_splits=None) -> int:
    """The split count the wrapper (``tools.kernels.sparse_mla_decode``) uses: ``num_splits`` if given,
    else ``choose_num_splits``."""
    if num_splits is not None:
        if num_splits < 1:
            raise ValueError("num_splits must be >= 1")
        return int(num_splits)
    return choose_num_splits(batch, topk, heads, _sm_count(device), plan_arch(device))


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """How the wrapper runs one call: each cache's tile config and split count, and how the two-cache
    call's caches are launched (``fused``: one launch over the joined row; ``beside``: two launches, the
    extra cache's on a second stream; neither: two launches in series)."""

    cfg: KernelConfig
    splits: int
    extra_cfg: Optional[KernelConfig] = None
    extra_splits: int = 0
    fused: bool = False
    beside: bool = False

    @property
    def total(self) -> int:
        """Partials a row writes (the workspace's split dimension), both caches."""
        return self.splits + self.extra_splits


def joined_width(topk: int, extra_topk: int, block_t: int = 64) -> int:
    """Token positions of the fused two-cache row: the main cache's width padded to whole tiles, then the
    extra cache's (``_split_kernel_ws`` with HAS_EXTRA)."""
    return triton.cdiv(topk, block_t) * block_t + extra_topk


def fuses(batch: int, topk: int, extra_topk: int, heads: int, arch: Optional[int]) -> bool:
    """Whether the two-cache call runs as one launch: where the joined row picks LARGE_WS (Hopper, work
    of both caches above HOPPER_MEDIUM_TOKENS), the one kernel that reads two caches in one launch."""
    return choose_config(batch, joined_width(topk, extra_topk), heads, arch) is LARGE_WS


def plan_call(batch, topk, heads, arch, sms, extra_topk=None, num_splits=None, config=None, fused=None) -> CallPlan:
    """The wrapper's plan of one call on a device of compute capability ``arch`` (None: the CPU or the
    interpreter) with ``sms`` SMs. ``config`` / ``num_splits`` (the sweeps' overrides) serve each cache;
    ``fused`` forces the two-cache call's launch form (None: ``fuses``; True: LARGE_WS over the joined row
    at any work, on Hopper only: the grid's probe of the rule)."""
    def splits_of(width, cfg=None):
        return int(num_splits) if num_splits is not None else choose_num_splits(batch, width, heads, sms, arch, cfg)

    if num_splits is not None and num_splits < 1:
        raise ValueError("num_splits must be >= 1")
    if extra_topk is None:
        return CallPlan(config or choose_config(batch, topk, heads, arch), splits_of(topk))
    if fused is None:
        fused = config in (None, LARGE_WS) and fuses(batch, topk, extra_topk, heads, arch)
    if fused:
        if arch != SM90_ARCH or gluon is None or config not in (None, LARGE_WS):
            raise ValueError("a fused two-cache launch runs LARGE_WS only (compute capability 9.0, Gluon)")
        return CallPlan(LARGE_WS, splits_of(joined_width(topk, extra_topk), LARGE_WS), LARGE_WS, 0, fused=True)
    cfg = config or choose_config(batch, topk, heads, arch)
    # each cache on its own width's config, as its split count: the window's would be a small-work one
    extra_cfg = config or choose_config(batch, extra_topk, heads, arch)
    return CallPlan(cfg, splits_of(topk), extra_cfg, splits_of(extra_topk),
                    beside=arch is not None and cfg in BESIDE_CONFIGS)  # fmt: skip


def device_plan(batch, topk, heads, device, extra_topk=None, num_splits=None, config=None, fused=None) -> CallPlan:
    """``plan_call`` for a torch device, as the wrapper plans on it (a second stream on a CUDA device only)."""
    plan = plan_call(batch, topk, heads, plan_arch(device), _sm_count(device), extra_topk, num_splits, config, fused)
    return plan if device.type == "cuda" or not plan.beside else dataclasses.replace(plan, beside=False)


def workspace_shape(batch, heads, topk, device, num_splits=None, extra_topk=None, config=None, fused=None) -> int:
    """Total split count (both caches) the wrapper will use, for sizing a workspace."""
    return device_plan(batch, topk, heads, device, extra_topk, num_splits, config, fused).total
