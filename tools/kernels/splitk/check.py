"""The correctness check of the split-K decode at one shape (``python -m tools.kernels.splitk check``).

``run_check`` draws fresh random inputs (``make_case``: invalid indices, short valid lengths, a top-k that
is no multiple of the tile, duplicated indices, clustered index runs), runs the kernel into poisoned (NaN)
buffers (``run_poisoned``) and compares it with the float32 reference
(``dsv4_cache.reference_sparse_decode``) and with the upstream SGLang kernel, against the thresholds below.
"""

from __future__ import annotations

import math
import os
from typing import Optional

import torch

from tools.kernels import dsv4_cache, upstream
from tools.kernels import sparse_mla_decode as smd
from tools.kernels.splitk import declared
from tools.kernels.splitk.tiles import NAMED, config_name, device_plan

# Thresholds. The output is bf16 (8 significant bits: rounding alone is a relative error of up to
# 2^-9, about 1.1e-3 RMS) and P is rounded to bf16 before the P V dot, so the norm-wise relative
# error against the float32 reference lands around 1e-3..4e-3; 1e-2 leaves room for accumulation
# order and still fails any wrong merge (a dropped or doubly weighted split moves the output by
# tens of percent). The LSE comes from float32 sums of exact bf16 x bf16 products, so it differs
# from the reference by float32 rounding (~1e-5); 1e-3 fails a merge that is off by any weight.
# Upstream rounds each cache's output to bf16 before merging, so against it the output bound is
# doubled.
OUT_NORM_REL_MAX = 1e-2
LSE_ABS_MAX = 1e-3
OUT_NORM_REL_MAX_VS_UPSTREAM = 2e-2

PAGE_SIZE = 64
EXTRA_PAGE_SIZE = 32


def row_indices(gen: torch.Generator, topk: int, num_tokens: int) -> torch.Tensor:
    """One row of top-k indices as a selector produces them: runs of neighbouring tokens, scattered
    singles, some duplicates, some -1."""
    picks: list[torch.Tensor] = []
    count = 0
    while count < topk:
        if torch.rand((), generator=gen) < 0.6:
            start = int(torch.randint(0, num_tokens, (), generator=gen))
            run = int(torch.randint(1, 40, (), generator=gen))
            piece = (torch.arange(start, start + run) % num_tokens).to(torch.int32)
        else:
            piece = torch.randint(0, num_tokens, (int(torch.randint(1, 8, (), generator=gen)),), generator=gen)
        picks.append(piece.to(torch.int32))
        count += piece.numel()
    row = torch.cat(picks)[:topk].clone()
    dup = torch.rand(topk, generator=gen) < 0.05
    if dup.any():
        src = torch.randint(0, topk, (int(dup.sum()),), generator=gen)
        row[dup] = row[src]
    row[torch.rand(topk, generator=gen) < 0.1] = -1
    return row


def make_case(
    batch: int,
    topk: int,
    heads: int,
    device: str | torch.device,
    seed: int,
    *,
    extra: bool = False,
    sink: bool = False,
    topk_length: bool = True,
    page_size: int = PAGE_SIZE,
    extra_topk: Optional[int] = None,
) -> dict:
    """Fresh random inputs for one call: q, a written cache (and an extra one), indices and lengths."""
    gen = torch.Generator().manual_seed(seed)

    def cache_for(k: int, psize: int):
        num_tokens = max(2 * k, 4 * psize)
        pages = math.ceil(num_tokens / psize)
        cache = dsv4_cache.empty_cache(pages, psize, device)
        # Per-token magnitudes over a wide range, so the per-group scales differ token to token.
        kv = torch.randn(pages * psize, dsv4_cache.HEAD_DIM, generator=gen)
        kv *= torch.exp2(torch.randint(-4, 5, (pages * psize, 1), generator=gen).float())
        dsv4_cache.write_tokens(cache, torch.arange(pages * psize, device=device), kv.to(device))
        idx = torch.stack([row_indices(gen, k, pages * psize) for _ in range(batch)]).view(batch, 1, k)
        lens = None
        if topk_length:
            # Full rows, empty rows, short rows and everything between.
            lens = torch.randint(0, k + 1, (batch,), generator=gen, dtype=torch.int32)
            choice = torch.rand(batch, generator=gen)
            lens[choice < 0.3] = k
            lens[(choice >= 0.3) & (choice < 0.4)] = torch.randint(0, 3, (), generator=gen).to(torch.int32)
            lens = lens.to(device)
        return cache, idx.to(device), lens

    q = (torch.randn(batch, 1, heads, dsv4_cache.HEAD_DIM, generator=gen) * 0.5).to(torch.bfloat16).to(device)
    k_cache, indices, lens = cache_for(topk, page_size)
    case = dict(q=q, k_cache=k_cache, indices=indices, topk_length=lens, attn_sink=None, softmax_scale=None)
    case.update(extra_k_cache=None, extra_indices=None, extra_topk_length=None)
    if extra:
        extra_topk = extra_topk or max(1, topk // 2 + 5)
        e_cache, e_idx, e_lens = cache_for(extra_topk, EXTRA_PAGE_SIZE)
        case.update(extra_k_cache=e_cache, extra_indices=e_idx, extra_topk_length=e_lens)
    if sink:
        case["attn_sink"] = (torch.randn(heads, generator=gen) * 2.0).to(device)
    return case


def call_args(case: dict) -> tuple:
    return (
        case["q"], case["k_cache"], case["indices"], case["topk_length"], case["attn_sink"],
        dsv4_cache.HEAD_DIM, case["softmax_scale"], case["extra_k_cache"], case["extra_indices"],
        case["extra_topk_length"],
    )  # fmt: skip


def run_poisoned(case: dict, num_splits: Optional[int] = None, config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel into NaN-filled output, LSE and partial buffers: whatever stays unwritten stays NaN."""
    q = case["q"]
    batch, _, heads, _ = q.shape
    topk = case["indices"].shape[-1]
    extra_topk = case["extra_indices"].shape[-1] if case["extra_indices"] is not None else None
    total = smd.workspace_shape(batch, heads, topk, q.device, num_splits, extra_topk, config)
    nan = float("nan")
    out = torch.full((batch, 1, heads, dsv4_cache.HEAD_DIM), nan, dtype=torch.bfloat16, device=q.device)
    lse = torch.full((batch, heads), nan, dtype=torch.float32, device=q.device)
    o_part = torch.full((batch, total, heads, dsv4_cache.HEAD_DIM), nan, dtype=torch.float32, device=q.device)
    lse_part = torch.full((batch, total, heads), nan, dtype=torch.float32, device=q.device)
    smd.sparse_mla_decode_into(out, lse, (o_part, lse_part), *call_args(case), num_splits=num_splits, config=config)
    return out, lse.view(batch, heads, 1)


def compare(out: torch.Tensor, lse: torch.Tensor, ref_out: torch.Tensor, ref_lse: torch.Tensor) -> dict:
    """Norm-wise relative error of out, max abs error of the LSE; NaN or mismatched -inf count as failures."""
    out = out.float().cpu()
    ref_out = ref_out.float().cpu()
    lse = lse.float().cpu().reshape(ref_lse.shape)
    ref_lse = ref_lse.float().cpu()
    nonfinite_out = int((~torch.isfinite(out)).sum())
    ref_norm = float(ref_out.norm())
    diff = float((out - ref_out).norm())
    norm_rel = diff / ref_norm if ref_norm > 0 else diff
    ref_inf = torch.isneginf(ref_lse)
    lse_inf = torch.isneginf(lse)
    lse_nan = int(torch.isnan(lse).sum())
    inf_mismatch = int((ref_inf != lse_inf).sum())
    both = ~ref_inf & ~lse_inf & torch.isfinite(lse)
    lse_err = float((lse[both] - ref_lse[both]).abs().max()) if both.any() else 0.0
    finite = nonfinite_out == 0 and lse_nan == 0 and math.isfinite(norm_rel)
    return {
        "out_norm_rel": norm_rel if math.isfinite(norm_rel) else None,
        "lse_max_abs": lse_err,
        "nonfinite_out": nonfinite_out,
        "lse_nan": lse_nan,
        "lse_neg_inf_mismatch": inf_mismatch,
        "all_written": finite,
    }


def verdict(errs: dict, out_max: float) -> bool:
    return (
        errs["all_written"]
        and errs["lse_neg_inf_mismatch"] == 0
        and errs["out_norm_rel"] is not None
        and errs["out_norm_rel"] <= out_max
        and errs["lse_max_abs"] <= LSE_ABS_MAX
    )


def check_case(case: dict, *, with_upstream: bool = True, num_splits: Optional[int] = None, config=None) -> dict:
    """Errors of the kernel against the float32 reference and (optionally) the upstream kernel."""
    out, lse = run_poisoned(case, num_splits=num_splits, config=config)
    ref_out, ref_lse = dsv4_cache.reference_sparse_decode(
        case["q"], case["k_cache"], case["indices"], case["topk_length"], case["attn_sink"], case["softmax_scale"],
        case["extra_k_cache"], case["extra_indices"], case["extra_topk_length"],
    )  # fmt: skip
    result = {"vs_reference": compare(out, lse, ref_out, ref_lse)}
    result["vs_reference"]["ok"] = verdict(result["vs_reference"], OUT_NORM_REL_MAX)
    if with_upstream:
        up = upstream.load().flash_mla_sparse_decode_triton
        up_out, up_lse = up(*call_args(case))
        result["vs_upstream"] = compare(out, lse, up_out, up_lse)
        result["vs_upstream"]["ok"] = verdict(result["vs_upstream"], OUT_NORM_REL_MAX_VS_UPSTREAM)
        result["upstream_vs_reference"] = compare(up_out, up_lse, ref_out, ref_lse)
    result["ok"] = result["vs_reference"]["ok"] and result.get("vs_upstream", {"ok": True})["ok"]
    return result


CONFIGS = {"auto": None, **NAMED}  # --config: "auto" is choose_config's pick

VARIANTS = {
    # name: make_case keyword arguments
    "one_cache": dict(extra=False, sink=False, topk_length=True),
    "two_caches_sink": dict(extra=True, sink=True, topk_length=True),
    "no_lengths": dict(extra=False, sink=True, topk_length=False),
}


def _variant(name: str, engine_call: Optional[dict]) -> dict:
    """make_case keyword arguments of a variant; ``engine_call`` is the engine's own call form."""
    if name == "engine_call":
        call = engine_call or {}
        return dict(extra=call.get("extra_topk") is not None, extra_topk=call.get("extra_topk"),
                    sink=bool(call.get("sink")), topk_length=True)
    return VARIANTS[name]


def configs_run(batch, topk, heads, dev, config=None, engine_call=None, num_splits=None):
    """The plan (``tiles.CallPlan``) the wrapper runs: in the engine's call form with a compressed cache
    (``engine_call``), both caches; ``config`` / ``num_splits`` as the wrapper's overrides."""
    return device_plan(batch, topk, heads, dev, (engine_call or {}).get("extra_topk"), num_splits, config)


def run_check(
    batch: int,
    topk: int,
    heads: int,
    device: str,
    seed: int,
    *,
    variants: tuple[str, ...] = tuple(VARIANTS),
    with_upstream: bool = True,
    num_splits: Optional[int] = None,
    config=None,
    engine_call: Optional[dict] = None,
) -> dict:
    """The check at one shape, over the input variants; a JSON-ready dict.

    ``config`` (a KernelConfig) overrides ``choose_config``; ``num_splits`` the split heuristic.
    ``engine_call`` ({"extra_topk": N or None, "sink": bool}) is the form of one call the engine makes
    (variant ``engine_call``): the compressed cache's index width and whether a sink is passed.
    """
    dev = torch.device(device)
    results = {}
    for i, name in enumerate(variants):
        case = make_case(batch, topk, heads, dev, seed + 1000 * i, **_variant(name, engine_call))
        res = check_case(case, with_upstream=with_upstream, num_splits=num_splits, config=config)
        extra_topk = case["extra_indices"].shape[-1] if case["extra_indices"] is not None else None
        res["splits"] = device_plan(batch, topk, heads, dev, extra_topk, num_splits, config).splits
        results[name] = res
    plan = configs_run(batch, topk, heads, dev, config, engine_call, num_splits)
    return {
        "shape": {"batch": batch, "topk": topk, "heads": heads},
        "device": device,
        "seed": seed,
        "config": plan.cfg.__dict__,
        "config_name": config_name(plan.cfg),
        "extra_config_name": config_name(plan.extra_cfg) if plan.extra_cfg is not None else None,
        "fused": plan.fused,
        # the declared hardware's plan where one was asked for (tools/kernels/splitk/declared.py), else None
        "plan_arch": int(os.environ[declared.PLAN_ARCH_ENV]) if os.environ.get(declared.PLAN_ARCH_ENV) else None,
        "wgmma_off": os.environ.get(declared.WGMMA_OFF_ENV) == "1",
        "thresholds": {
            "out_norm_rel": OUT_NORM_REL_MAX,
            "out_norm_rel_vs_upstream": OUT_NORM_REL_MAX_VS_UPSTREAM,
            "lse_max_abs": LSE_ABS_MAX,
        },
        "variants": results,
        "engine_call": engine_call,
        "ok": all(r["ok"] for r in results.values()),
    }
