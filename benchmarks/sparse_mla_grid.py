"""The grid table of the split-K sparse MLA decode (``benchmarks/sparse_mla_decode.py --grid``, CUDA only).

Every cell is one (batch, top-k, index pattern, call form), H = 64, timed for the rewrite, FlashMLA
(``sgl-flash-mla``, legacy SM90 kernels) and SGLang's Triton kernel (upstream), each warm (one input set
replayed) and cold (input sets rotated over at least ``COLD_FOOTPRINT`` bytes of distinct KV), as
CUDA-graph replay medians with the raw samples kept.

- patterns (``tools.kernels.topk_patterns``): ``uniform`` (what the reference engine's indexer picks with
  random weights) and ``clustered`` (a sliding-window block and recency-biased runs of neighbours);
  each row's indices lie in that request's own context of ``CONTEXT`` compressed tokens, and the rows of
  one set take distinct contexts (``REGIONS`` of them in the cache).
- forms: ``one_cache`` (the committed table's call: top-k indices over one page-64 cache, no lengths,
  no sink) and ``two_cache`` (the call the model makes: the request's last ``WINDOW`` tokens in a page-256
  sliding-window cache as the main cache, the top-k over the page-64 compressed cache as the extra one,
  valid lengths and a sink, merged by LSE).
- two-cache cells only, the launch form the rule did not pick, beside the shipped one: where the rewrite
  runs both caches in one launch (``tiles.fuses``: the joined row picks LARGE_WS on Hopper),
  ``rewrite_two_launches`` (the dispatch of cb4db5a: each cache on its own width's config and split count,
  the compressed cache's launch on a second stream where ``tiles.BESIDE_CONFIGS`` says so); elsewhere
  ``rewrite_fused`` (the one launch forced below its regime); so the rule is held to a measurement within
  one run at every cell, each probe checked against the float32 reference before it is timed.
  (grid-20261202 measured the dispatches before cb4db5a against cb4db5a's.)
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from tools.kernels import dsv4_cache, topk_patterns, upstream
from tools.kernels import sparse_mla_decode as smd
from tools.kernels.splitk import check, tiles, timing

HEADS = 64
BATCHES = (1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 128)
TOPKS = (512, 768, 1024, 1536, 2048)
PATTERNS = ("uniform", "clustered")
FORMS = ("one_cache", "two_cache")
CONTEXT = 8192  # compressed tokens a request holds (a 32K-token context at the c4 layers' 4x compression)
REGIONS = 128  # distinct request contexts in the compressed cache: a set's rows never share one
PAGE = 64  # compressed cache (the model's page 256 over its 4x compression)
WINDOW = 128  # sliding window (DeepSeek-V4's), the main cache of the two-cache call
WINDOW_PAGE = 256  # the model's page size; one page a request holds its window's ring
WINDOW_PAGES = 4096  # window pages in the cache (1M tokens): cold sets take different ones
COLD_FOOTPRINT = 3 * 60e6  # bytes of distinct KV a cold rotation touches (L2 is 60 MB)
MAX_SETS = 400
DEVICE = "cuda"  # a module constant so that a dry run of the plumbing can point it at the CPU
# What a cell times (--grid-impls): the rewrite as planned in this process, upstream, FlashMLA, and the launch
# form the rule did not pick ("probe"). A run of the declared GPU's plan (--plan-arch) times the rewrite alone.
IMPLS = frozenset({"rewrite", "upstream", "flashmla", "probe"})
# FlashMLA's published figure for its sparse decode (README, "Performance"), for the 64/2048 cells.
PUBLISHED = {
    "flashmla_sparse_decode_TFLOPs": 410,
    "device": "H800 SXM5",
    "conditions": "compute-bound configuration, CUDA 12.8, FP8 KV cache, bf16 matmuls",
    "source": "https://github.com/deepseek-ai/FlashMLA/blob/066b5ba6f63d9d0840eac008fe58a1f70acfac78/README.md",
    "quote": ("The token-level sparse MLA decoding kernel (which uses an FP8 KV cache while performing the "
              "matrix multiplication in bfloat16) achieves 410 TFLOPS in compute-bound configuration on H800 "
              "SXM5 with CUDA 12.8"),
    "note": "FlashMLA counts Q K^T over 576 dims (512 + 64 rope), this benchmark over 512 (decode_work).",
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cell_order() -> list[tuple[int, int]]:
    """(batch, top-k) in the order the grid runs them: the committed table's shapes first, so a budget
    cut leaves the shapes the README already quotes; then the rest, smallest work first."""
    first = [(b, k) for k in (2048, 512) for b in (64, 1, 16, 4, 128)]
    rest = sorted(((b, k) for b in BATCHES for k in TOPKS if (b, k) not in first), key=lambda s: (s[0] * s[1], s))
    return first + rest


def fill_cache(num_tokens: int, page: int, seed: int) -> torch.Tensor:
    """A cache of ``num_tokens`` real quantized tokens (random values over 2^-4..2^4), drawn on the GPU."""
    pages = math.ceil(num_tokens / page)
    cache = dsv4_cache.empty_cache(pages, page, DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    chunk = 1 << 16
    for lo in range(0, pages * page, chunk):
        hi = min(lo + chunk, pages * page)
        kv = torch.randn(hi - lo, dsv4_cache.HEAD_DIM, generator=gen, device=DEVICE)
        kv *= torch.exp2(torch.randint(-4, 5, (hi - lo, 1), generator=gen, device=DEVICE).float())
        dsv4_cache.write_tokens(cache, torch.arange(lo, hi, device=DEVICE), kv)
    return cache


def compressed_indices(batch: int, topk: int, pattern: str, seed: int) -> torch.Tensor:
    """``[batch, 1, topk]`` slots of the compressed cache: each row's pattern inside its own context."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    regions = torch.randperm(REGIONS, generator=gen, device=DEVICE)[:batch]
    rows = topk_patterns.PATTERNS[pattern](batch, topk, CONTEXT, seed, DEVICE)
    return (rows + (regions * CONTEXT)[:, None].int()).view(batch, 1, topk).contiguous()


def window_indices(batch: int, seed: int) -> torch.Tensor:
    """``[batch, 1, WINDOW]`` slots of the window cache: each row's last WINDOW positions in its own
    page's ring (slot = page * 256 + position % 256), as the engine builds them."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    pages = torch.randperm(WINDOW_PAGES, generator=gen, device=DEVICE)[:batch]
    last = torch.randint(WINDOW, 1 << 20, (batch,), generator=gen, device=DEVICE)
    pos = last[:, None] - WINDOW + 1 + torch.arange(WINDOW, device=DEVICE)[None, :]
    return (pages[:, None] * WINDOW_PAGE + pos % WINDOW_PAGE).int().view(batch, 1, WINDOW).contiguous()


def make_inputs(batch, topk, pattern, form, seed, caches) -> dict:
    """One input set: the call's arguments as the upstream wrapper's signature names them."""
    extra = compressed_indices(batch, topk, pattern, seed)
    if form == "one_cache":
        return dict(k_cache=caches["compressed"], indices=extra, topk_length=None, attn_sink=None,
                    extra_k_cache=None, extra_indices=None, extra_topk_length=None)  # fmt: skip
    return dict(
        k_cache=caches["window"], indices=window_indices(batch, seed + 7),
        topk_length=torch.full((batch,), WINDOW, dtype=torch.int32, device=DEVICE), attn_sink=caches["sink"],
        extra_k_cache=caches["compressed"], extra_indices=extra,
        extra_topk_length=torch.full((batch,), topk, dtype=torch.int32, device=DEVICE),
    )  # fmt: skip


def _args(q, inp) -> tuple:
    return (q, inp["k_cache"], inp["indices"], inp["topk_length"], inp["attn_sink"], dsv4_cache.HEAD_DIM, None,
            inp["extra_k_cache"], inp["extra_indices"], inp["extra_topk_length"])  # fmt: skip


def rewrite_call(q, inp, config=None, fused=None) -> Callable[[], object]:
    """The shipped wrapper's call; ``config`` / ``fused`` force a tile config or the two-cache launch form
    (``tiles.plan_call``), into a workspace sized for that plan."""
    if config is None and fused is None:
        return lambda: smd.sparse_mla_decode(*_args(q, inp))
    a = _args(q, inp)
    batch = q.shape[0]
    extra_topk = inp["extra_indices"].shape[-1] if inp["extra_indices"] is not None else None
    total = smd.workspace_shape(batch, HEADS, inp["indices"].shape[-1], q.device, None, extra_topk, config, fused)
    out = torch.empty(batch, 1, HEADS, dsv4_cache.HEAD_DIM, dtype=torch.bfloat16, device=DEVICE)
    lse = torch.empty(batch, HEADS, dtype=torch.float32, device=DEVICE)
    ws = (torch.empty(batch, total, HEADS, dsv4_cache.HEAD_DIM, dtype=torch.float32, device=DEVICE),
          torch.empty(batch, total, HEADS, dtype=torch.float32, device=DEVICE))  # fmt: skip

    def call():
        smd.sparse_mla_decode_into(out, lse, ws, *a, config=config, fused=fused)
        return out, lse.view(batch, HEADS, 1)

    return call


def other_launch_form(fused: bool) -> tuple[str, bool]:
    """The probe of the two-cache launch form the rule did not pick: its column name and the ``fused`` that
    forces it (``rewrite_call``)."""
    return ("rewrite_two_launches", False) if fused else ("rewrite_fused", True)


def probe_check(make: Callable, q, inp) -> dict:
    """A probe's output at one input set against the float32 reference (``check.compare``)."""
    out, lse = make(q, inp)()
    ref_out, ref_lse = dsv4_cache.reference_sparse_decode(
        q, inp["k_cache"], inp["indices"], inp["topk_length"], inp["attn_sink"], None,
        inp["extra_k_cache"], inp["extra_indices"], inp["extra_topk_length"])  # fmt: skip
    errs = check.compare(out, lse, ref_out, ref_lse)
    errs["ok"] = check.verdict(errs, check.OUT_NORM_REL_MAX)
    return errs


def upstream_call(q, inp) -> Callable[[], object]:
    up = upstream.load().flash_mla_sparse_decode_triton
    return lambda: up(*_args(q, inp))


def flashmla_call(fm, q, inp) -> Callable[[], object]:
    sched, _ = fm.get_mla_metadata()

    def call():
        return fm.flash_mla_with_kvcache(
            q, inp["k_cache"], None, None, 512, sched, None, 512**-0.5, False, True, indices=inp["indices"],
            attn_sink=inp["attn_sink"], extra_k_cache=inp["extra_k_cache"],
            extra_indices_in_kvcache=inp["extra_indices"], topk_length=inp["topk_length"],
            extra_topk_length=inp["extra_topk_length"], use_legacy=True,
        )  # fmt: skip

    call()  # the first call fills the scheduling metadata, outside any graph
    return call


def graph_us(calls: list[Callable[[], object]], reps: int) -> list[float]:
    """Per-call times (us) of replays of one graph of ``calls`` (one pass, no repetition: for the slow
    upstream kernel, where timing.graph_replay_us's 8-launch minimum would cost seconds a cell)."""
    for fn in calls[:2]:
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in calls:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / len(calls))
    del graph
    return samples


def time_both(make: Callable, sets: list[dict], q, fast: bool) -> dict:
    """Warm (set 0 replayed) and cold (all sets in one graph) medians and samples of one implementation."""
    if fast:
        warm = timing.graph_replay_us([make(q, sets[0])], reps=30)
        cold = timing.graph_replay_us([make(q, s) for s in sets], reps=10)
    else:
        warm = graph_us([make(q, sets[0])], reps=3)
        cold = graph_us([make(q, s) for s in sets], reps=3)
    return {"warm_us": statistics.median(warm), "cold_us": statistics.median(cold),
            "warm_samples_us": warm, "cold_samples_us": cold}  # fmt: skip


def n_cold_sets(per_call_bytes: int) -> int:
    return int(min(MAX_SETS, max(2, math.ceil(COLD_FOOTPRINT / per_call_bytes))))


def run_cell(batch, topk, pattern, form, caches, fm, fm_error, ceil, seed) -> dict:
    tokens = topk + (WINDOW if form == "two_cache" else 0)
    work = dsv4_cache.decode_work(batch, HEADS, tokens)
    floor_us = max(work["bytes"] / (ceil["copy_GBps"] * 1e3), work["flops"] / (ceil["bf16_matmul_TFLOPs"] * 1e6))
    n_sets = n_cold_sets(batch * tokens * dsv4_cache.BYTES_PER_TOKEN)
    sets = [make_inputs(batch, topk, pattern, form, seed + 101 * i, caches) for i in range(n_sets)]
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 3)
    q = (torch.randn(batch, 1, HEADS, 512, generator=gen, device=DEVICE) * 0.5).to(torch.bfloat16)
    main_topk = WINDOW if form == "two_cache" else topk
    plan = tiles.device_plan(batch, main_topk, HEADS, q.device, topk if form == "two_cache" else None)
    cell = {
        "batch": batch, "topk": topk, "pattern": pattern, "form": form, "heads": HEADS, "seed": seed,
        "tokens_per_row": tokens, "bytes": work["bytes"], "flops": work["flops"], "floor_us": floor_us,
        "cold_sets": n_sets, "config": tiles.config_name(plan.cfg),
        "extra_config": tiles.config_name(plan.extra_cfg) if plan.extra_cfg is not None else None,
        "splits": plan.splits, "extra_splits": plan.extra_splits if form == "two_cache" else None,
    }  # fmt: skip
    impls = {"rewrite": (lambda q_, s_: rewrite_call(q_, s_), True), "upstream": (upstream_call, False)}
    if fm is not None:
        impls["flashmla"] = (lambda q_, s_: flashmla_call(fm, q_, s_), True)
    impls = {name: impl for name, impl in impls.items() if name in IMPLS}
    if form == "two_cache" and "probe" not in IMPLS:
        cell["fused"] = plan.fused
        cell["streams"] = 2 if plan.beside else 1
    if form == "two_cache" and "probe" in IMPLS:
        cell["fused"] = plan.fused
        cell["streams"] = 2 if plan.beside else 1
        # the launch form the rule did not pick, so the rule is held to a measurement at every cell
        probe, forced = other_launch_form(plan.fused)
        probes = {probe: lambda q_, s_: rewrite_call(q_, s_, fused=forced)}
        cell["probe_checks"] = {}
        for name, make in probes.items():
            cell["probe_checks"][name] = probe_check(make, q, sets[0])
            if cell["probe_checks"][name]["ok"]:
                impls[name] = (make, True)
            else:
                cell[name] = {"error": "failed its check against the reference: not timed"}
    for name, (make, fast) in impls.items():
        try:
            cell[name] = time_both(make, sets, q, fast)
            cell[name]["TFLOPs"] = work["flops"] / cell[name]["warm_us"] / 1e6
            cell[name]["fraction_of_floor"] = floor_us / cell[name]["warm_us"]
        except Exception as exc:  # a failing implementation is a result, not a crash of the grid
            cell[name] = {"error": f"{type(exc).__name__}: {str(exc)[:1000]}"}
            log(f"grid {batch}x{topk} {pattern} {form} {name} failed: {cell[name]['error'][:300]}")
    if fm is None and "flashmla" in IMPLS:
        cell["flashmla"] = {"error": fm_error}
    for name in ("flashmla", "upstream"):
        if name in cell and "warm_us" in cell[name] and "warm_us" in cell.get("rewrite", {}):
            cell[f"speedup_vs_{name}_warm"] = cell[name]["warm_us"] / cell["rewrite"]["warm_us"]
            cell[f"speedup_vs_{name}_cold"] = cell[name]["cold_us"] / cell["rewrite"]["cold_us"]
    if "speedup_vs_flashmla_warm" in cell:
        cell["flashmla_faster"] = min(cell["speedup_vs_flashmla_warm"], cell["speedup_vs_flashmla_cold"]) < 1.0
    del sets
    return cell


def run_grid(ceil: dict, fm, fm_error, budget_s: float, partial: Path | None = None,
             shapes: list[tuple[int, int]] | None = None) -> dict:  # fmt: skip
    """All cells of ``shapes`` (default: the whole grid in ``cell_order``) x patterns x forms, until
    ``budget_s`` seconds have passed; the cells not started are listed under ``skipped``."""
    t0 = time.time()
    caches = {
        "compressed": fill_cache(REGIONS * CONTEXT, PAGE, 11),
        "window": fill_cache(WINDOW_PAGES * WINDOW_PAGE, WINDOW_PAGE, 12),
        "sink": (torch.randn(HEADS, generator=torch.Generator().manual_seed(13)) * 2.0).to(DEVICE),
    }
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    log(f"grid caches ready in {time.time() - t0:.1f} s")
    cells, skipped = [], []
    seed = 1000
    for batch, topk in shapes or cell_order():
        for pattern in PATTERNS:
            for form in FORMS:
                seed += 1
                if time.time() - t0 > budget_s:
                    skipped.append({"batch": batch, "topk": topk, "pattern": pattern, "form": form})
                    continue
                started = time.time()
                cell = run_cell(batch, topk, pattern, form, caches, fm, fm_error, ceil, seed)
                cell["wall_s"] = time.time() - started
                cells.append(cell)
                log(summary_line(cell))
        if partial is not None:
            partial.write_text(json.dumps({"cells": cells, "skipped": skipped}, default=str))
    del caches
    torch.cuda.empty_cache()
    return {
        "cells": cells, "skipped": skipped, "wall_s": time.time() - t0, "budget_s": budget_s,
        "batches": list(BATCHES), "topks": list(TOPKS), "patterns": list(PATTERNS), "forms": list(FORMS),
        "context": CONTEXT, "window": WINDOW, "page": PAGE, "window_page": WINDOW_PAGE,
        "cold_footprint_bytes": COLD_FOOTPRINT, "published": PUBLISHED,
        "pattern_params": {"mean_run": topk_patterns.MEAN_RUN, "recency_mean": topk_patterns.RECENCY_MEAN,
                           "run_cover": topk_patterns.RUN_COVER, "window_block": "topk // 8"},
    }  # fmt: skip


def _fmt(r: dict) -> str:
    return f"{r['warm_us']:.1f}/{r['cold_us']:.1f}" if "warm_us" in r else "err"


def summary_line(c: dict) -> str:
    mark = " <- FlashMLA faster" if c.get("flashmla_faster") else ""
    x = (f"{c['speedup_vs_flashmla_warm']:.2f}/{c['speedup_vs_flashmla_cold']:.2f}"
         if "speedup_vs_flashmla_warm" in c else "n/a")  # fmt: skip
    extra = "".join(f" | {label} {_fmt(c[name])}" for name, label in (("rewrite_two_launches", "2 launches"),
                                                                       ("rewrite_fused", "fused")) if name in c)
    configs = c["config"] + (" fused" if c.get("fused") else f"+{c['extra_config']} {c['streams']}s" if c.get("extra_config") else "")
    return (f"{c['batch']:3d} {c['topk']:4d} {c['pattern']:9s} {c['form']:9s} {configs:17s} | rw {_fmt(c['rewrite'])}"
            f" | fm {_fmt(c.get('flashmla', {}))} | up {_fmt(c.get('upstream', {}))} | x fm {x}{extra}{mark}")  # fmt: skip


def clustered_case(batch: int, topk: int, heads: int, device, seed: int) -> dict:
    """A correctness case (``tools.kernels.splitk.check.check_case``'s input) with clustered indices:
    two caches (page 64 and page 32, the extra one ``topk // 2 + 5`` wide) and a sink, every row's
    indices ``clustered_rows`` inside that row's own context of ``max(2 * width, 256)`` tokens, then the
    checker's hard cases on top: ~5% of entries -1, valid lengths from 0 to the width (30% full)."""
    gen = torch.Generator().manual_seed(seed)

    def one(width: int, page: int, salt: int):
        context = max(2 * width, 256)
        pages = math.ceil(batch * context / page)
        cache = dsv4_cache.empty_cache(pages, page, device)
        kv = torch.randn(pages * page, dsv4_cache.HEAD_DIM, generator=gen)
        kv *= torch.exp2(torch.randint(-4, 5, (pages * page, 1), generator=gen).float())
        dsv4_cache.write_tokens(cache, torch.arange(pages * page, device=device), kv.to(device))
        rows = topk_patterns.clustered_rows(batch, width, context, seed + salt)
        rows = rows + (torch.arange(batch, dtype=torch.int32) * context)[:, None]
        rows[torch.rand(rows.shape, generator=gen) < 0.05] = -1
        lens = torch.randint(0, width + 1, (batch,), generator=gen, dtype=torch.int32)
        lens[torch.rand(batch, generator=gen) < 0.3] = width
        return cache, rows.view(batch, 1, width).to(device), lens.to(device)

    q = (torch.randn(batch, 1, heads, dsv4_cache.HEAD_DIM, generator=gen) * 0.5).to(torch.bfloat16).to(device)
    k_cache, indices, lens = one(topk, check.PAGE_SIZE, 1)
    e_cache, e_idx, e_lens = one(max(1, topk // 2 + 5), check.EXTRA_PAGE_SIZE, 2)
    return dict(q=q, k_cache=k_cache, indices=indices, topk_length=lens, softmax_scale=None,
                attn_sink=(torch.randn(heads, generator=gen) * 2.0).to(device),
                extra_k_cache=e_cache, extra_indices=e_idx, extra_topk_length=e_lens)  # fmt: skip


def check_clustered(batch: int, topk: int, heads: int, device, seed: int) -> dict:
    """``check_case`` (reference and upstream) on a ``clustered_case``: the matrix's fourth variant."""
    case = clustered_case(batch, topk, heads, device, seed)
    res = check.check_case(case, with_upstream=True)
    # the split count of the call the case makes (two caches: fused, the joined row's), as run_check records it
    res["splits"] = tiles.device_plan(batch, topk, heads, torch.device(device), case["extra_indices"].shape[-1]).splits
    return res


def _pair(cell: dict) -> str:
    rw, fm = cell["rewrite"], cell.get("flashmla", {})
    if "warm_us" not in rw or "warm_us" not in fm:
        return "n/a"
    mark = " †" if cell["flashmla_faster"] else ""
    return (f"{rw['warm_us']:.1f} / {fm['warm_us']:.1f} ({cell['speedup_vs_flashmla_warm']:.2f} / "
            f"{cell['speedup_vs_flashmla_cold']:.2f}){mark}")  # fmt: skip


def markdown_tables(grid: dict) -> str:
    """The grid as two markdown tables (one cache; window + compressed), a row per (batch, top-k): per
    pattern, rewrite / FlashMLA warm medians (us) and the rewrite's speedup over FlashMLA warm / cold,
    † where FlashMLA is faster warm or cold; upstream's warm median (uniform indices) last; in the
    two-cache table, the launch form the rule picked and the other form's warm median (uniform)."""
    cells = {(c["batch"], c["topk"], c["pattern"], c["form"]): c for c in grid["cells"]}
    out = []
    for form, title in (("one_cache", "one cache"), ("two_cache", "window (128) + compressed, sink, lengths")):
        two = form == "two_cache"
        out += [f"**{title}** (rewrite / FlashMLA warm us (x warm / x cold); † FlashMLA faster)", "",
                "| B | top-k | uniform | clustered | upstream, uniform (us) |" + (" launch (the other form, uniform us) |" if two else ""),
                "|---|---|---|---|---|" + ("---|" if two else "")]  # fmt: skip
        for batch in grid["batches"]:
            for topk in grid["topks"]:
                uni, clu = cells.get((batch, topk, "uniform", form)), cells.get((batch, topk, "clustered", form))
                if uni is None or clu is None:
                    out.append(f"| {batch} | {topk} | not run | not run | |" + (" |" if two else ""))
                    continue
                up = uni["upstream"].get("warm_us")
                up_s = f"{up:.0f}" if up is not None else "n/a"
                out.append(f"| {batch} | {topk} | {_pair(uni)} | {_pair(clu)} | {up_s} |" + (f" {_launch(uni)} |" if two else ""))
        out.append("")
    return "\n".join(out)


def _launch(cell: dict) -> str:
    """'fused (2 launches 34.0)' / '2 launches (fused 17.5)': the rule's form and the other's warm median."""
    shipped, other = ("fused", "2 launches") if cell.get("fused") else ("2 launches", "fused")
    probe = cell.get(other_launch_form(bool(cell.get("fused")))[0], {})
    return f"{shipped} ({other} {probe['warm_us']:.1f})" if "warm_us" in probe else f"{shipped} ({other}: {probe.get('error', 'not run')})"


if __name__ == "__main__":
    # python -m benchmarks.sparse_mla_grid RESULTS.json: the markdown tables of a committed grid run
    print(markdown_tables(json.loads(Path(sys.argv[1]).read_text())["grid"]))
