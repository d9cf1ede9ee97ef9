"""The sm_120 plan's grid projected onto the declared box, the RTX PRO 6000 Blackwell (sm_120, 188 SMs): PROJECTED.

    python -m scripts.sm120_projection benchmarks/results/sm120-20261206 [--json]

Nothing here was measured on an sm_120 GPU. DIR holds ``sm120/sparse_mla_decode_grid.json`` (the sm_120 plan's
kernels timed on the measuring GPU with Triton's wgmma lowering off, so the dots are mma.sync as on sm_120) and
``hopper/sparse_mla_decode_grid.json`` (the upstream kernel timed at the same cells). For every cell and both
temperatures (warm, cold):

- the floor on the measuring GPU is the grid's own: max(bytes / measured copy rate, flops / measured bf16 matmul
  rate), the rates in the grid's ``ceilings`` (benchmarks/sparse_mla_decode.py ``floors``);
- the efficiency there is that floor over the measured median of the sm_120 path, with a 95% interval from the
  raw replay samples: a Student t interval on the mean of the log samples (agent.stats.t_quantile, the same
  log-sample t statistics sm120_vs_hopper.json's Welch intervals use), so the interval is about the samples'
  geometric mean while the point is the median, as the grid's ``fraction_of_floor``;
- the box's floor is max(bytes / its published memory bandwidth, flops / its published dense BF16 tensor rate
  with FP32 accumulate), each rate a constant below with its citation;
- the projected time is the box's floor over the carried-over efficiency (equivalently the measured time times
  the ratio of the two floors), its interval the samples' interval scaled the same way.

The same is done for the upstream kernel (its samples from the Hopper grid), so the projected ratio to upstream
equals the measured one by construction: the projection moves both by the same floor ratio. A second projection
(``*_vs_published``) carries over the efficiency against the measuring GPU's *published* peaks instead, so both
floors are datasheet figures; the spread between the two is one measure of how much the method's assumption
matters. Writes ``DIR/projection_sm120.json``; prints a summary (or the JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from agent.stats import t_quantile  # noqa: E402

CONFIDENCE = 0.95
TEMPS = ("warm", "cold")
LABEL = "projected"

CAVEATS = [
    "Projected, not measured: no sm_120 GPU ran these kernels. The times are the measuring GPU's times scaled by "
    "the ratio of the box's floor to the measuring GPU's floor at each cell.",
    "The measuring GPU's floor uses its measured copy bandwidth (HBM3) and its measured bf16 matmul rate "
    "(cuBLAS, wgmma). The box's floor uses published peaks (GDDR7 bandwidth, mma.sync tensor rate). Attainable "
    "GDDR7 bandwidth and mma.sync's attainable rate are not the same fractions of their peaks as HBM3's and "
    "wgmma's; the *_vs_published projection (published peaks on both sides) shows how far that alone moves it.",
    "Carrying the efficiency over is an assumption: the grid was timed on 132 SMs with splits planned for them, "
    "L2 is 50 MB there against 128 MB on the box, and the sm_120 path on the measuring GPU is latency-bound "
    "(each tile waits on its gathers), which the box's clocks and memory latency change in ways a floor ratio "
    "does not capture.",
    "Where a cell runs far below its floor (efficiency of a few percent, batch 1-4), its time is latency: launch, "
    "the tile loop's dependent gathers, the combine. Scaling it by the floor ratio assumes that latency scales as "
    "the bandwidth ratio does, which nothing here shows.",
    "The kernel's dots are bf16 mma today, so the box's FP8 tensor rate is recorded but not used.",
]

# The box. Every rate with where it was read and what that document says. NVIDIA's own datasheet and the RTX
# Blackwell architecture whitepaper were searched for (pages and docs corpora) and not found in the searchable
# copies: the sources below are secondary, named as such.
DEVICE = {
    "name": "NVIDIA RTX PRO 6000 Blackwell",
    "arch": "sm_120",
    "sm_count": {
        "value": 188,
        "citations": [
            {"url": "https://www.topcpu.net/es/news/nvidia-launches-96gb-rtx-5090-model-with-a-whopping-price-tag-of-10000",
             "kind": "secondary (news report of NVIDIA's GTC 2025 announcement)",
             "says": "188 SMs enabled of the GB202's 192 (2% disabled), 24,064 CUDA cores, 752 tensor cores, "
                     "boost clock around 2.6 GHz, 128 MB L2"},
            {"url": "agent/targets/dsv4-flash.yaml",
             "kind": "this project's declared deployment",
             "says": "deployment.sm_count: 188 (gpu: NVIDIA RTX PRO 6000 Blackwell, sm: 120)"},
        ],
    },
}

RATES = {
    "memory_GBps": {
        "value": 1792.0,
        "unit": "GB/s",
        "what": "peak GDDR7 bandwidth (512-bit bus, 28 Gbps)",
        "used_for": "the box's bytes floor",
        "citations": [
            {"url": "https://hardware-corner.net/rtx-5090-vs-rtx-pro-6000-spec-comparison-20250321",
             "kind": "secondary (spec comparison from NVIDIA's announced specifications)",
             "says": "96GB of GDDR7 memory with ECC, on a 512-bit bus that provides 1,792 GB/s of memory bandwidth, "
                     "identical to the RTX 5090"},
            {"url": "https://gpu.name/posts/nvidia-unveils-rtx-pro-6000-blackwell-gpu-with-24-064-cores-and-96gb-memory",
             "kind": "secondary (summary of VideoCardz's report of the announcement)",
             "says": "Memory Bus: 512-bit; Memory Bandwidth: 1,792 GB/s"},
        ],
    },
    "bf16_mma_fp32acc_TFLOPs": {
        "value": 503.8,
        "unit": "TFLOP/s",
        "what": "dense (no 2:4 sparsity) BF16/FP16 tensor rate with FP32 accumulate, at the 2,617 MHz boost clock",
        "used_for": "the box's flops floor (the kernel's dots are bf16 mma with fp32 accumulate)",
        "citations": [
            {"url": "https://hmc-tech.com/gpu/nvidia-rtx-pro-6000-blackwell-vs-amd-radeon-pro-duo-polaris",
             "kind": "secondary (GPU spec database)",
             "says": "RTX PRO 6000 Blackwell, 2617 MHz: FP16 503.8 TFLOPS Tensor (FP32 Accumulate), 1.01 PFLOPS "
                     "sparse; BF16 503.8 TFLOPS Tensor; FP4 4.03 PFLOPS Tensor Sparse"},
            {"url": "https://thefilibusterblog.com/de/nvidia-rtx-pro-6000-blackwell-96-gb-gpu-outperforms-32-gb-rtx-5090-by-5-in-pure-path-tracing-benchmark/",
             "kind": "secondary (news report of NVIDIA's headline figures); a consistency check, not the source",
             "says": "AI TOPS: 4000 (FP4, sparse, NVIDIA's headline); halving for dense, then per precision step "
                     "(FP4 -> FP8 -> FP16) gives 500 TFLOP/s, consistent with 503.8 if FP32 accumulate runs at "
                     "full rate on this card (the spec database says it does)"},
        ],
        "note": "NVIDIA's RTX PRO 6000 datasheet headlines FP4 AI TOPS and FP32 TFLOPS; a BF16-with-FP32-accumulate "
                "figure from NVIDIA itself was not found in the searchable sources. Treat this rate as the weakest "
                "of the inputs; at the grid's cells it binds only where flops/bytes is high (see bound_sm120).",
    },
    "fp8_mma_fp32acc_TFLOPs": {
        "value": 1007.6,
        "unit": "TFLOP/s",
        "what": "dense FP8 (e4m3) tensor rate with FP32 accumulate",
        "used_for": "nothing: recorded for an FP8-mma variant of the kernel, which does not exist today",
        "citations": [
            {"url": "https://hmc-tech.com/gpu/nvidia-rtx-pro-6000-blackwell-vs-amd-radeon-pro-duo-polaris",
             "kind": "secondary (GPU spec database)",
             "says": "FP8 1.01 PFLOPS Tensor (FP32 Accumulate), 2.02 PFLOPS sparse"},
        ],
    },
}

# The measuring GPU's published peaks, for the second projection only (the grid's floors use its measured rates).
MEASURING_PUBLISHED = {
    "name": "NVIDIA H100 80GB HBM3 (SXM5)",
    "memory_GBps": {
        "value": 3350.0,
        "citations": [
            {"url": "https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html",
             "kind": "secondary (reseller's copy of NVIDIA's H100 specification table)",
             "says": "H100 SXM: GPU memory bandwidth 3,350 GB/sec; BFLOAT16 Tensor Core 1,979 TFLOPS shown with "
                     "sparsity, specifications 1/2 lower without sparsity"},
        ],
    },
    "bf16_mma_fp32acc_TFLOPs": {
        "value": 989.4,
        "citations": [
            {"url": "https://glennklockwood.com/garden/processors/h100",
             "kind": "secondary (notes citing NVIDIA's Hopper whitepaper)",
             "says": "H100 SXM5 theoretical maximum, BF16 matrix 989.4 TFLOPS (1978.9 sparse)"},
        ],
    },
}

# Published figures of peers for this kernel (sparse MLA decode) on consumer / workstation Blackwell (sm_120).
# Each as the source states it; what it does not state is said, and the nearest grid cell is named only as
# context: none of them is at the grid's shape (64 query heads, one call of batch x top-k).
PEERS = [
    {
        "kernel": "vLLM Triton sparse-MLA decode, split-K variant (`_fused_gather_dequant_attn_kernel`, "
                  "VLLM_SPARSE_MLA_SPLITK=S, S = 16-32)",
        "project": "vLLM",
        "source": "https://github.com/vllm-project/vllm/pull/54929",
        "where": "comment by Hivenet-Igor, 2026-09-03, on PR #54929 (open: portable Triton sparse-MLA fallback "
                 "for SM12x)",
        "device": "NVIDIA GeForce RTX 5090 (sm_120, 170 SMs)",
        "figure_us": 28.7,
        "baseline_us": 213.0,
        "what": "CUDA-graphed time per call, split-K against the same kernel without split-K (213 us)",
        "shape": "GLM-5.2 deployment (TP=8): 8 query heads, top-k 2048, T = 1 and 4 decode tokens, valid length "
                 "128 and 2048 ('flat across' them)",
        "not_stated": "KV format and head dimension in the text read (the kernel dequantizes a gathered KV)",
        "nearest_cells": [[1, 2048, "one_cache"], [4, 2048, "one_cache"]],
        "differs": "8 heads against the grid's 64; a different GPU (170 SMs, same 1,792 GB/s)",
    },
    {
        "kernel": "FlashInfer SM120 sparse-MLA decode (warp-specialized, split-K; "
                  "`trtllm_batch_decode_sparse_mla_dsv4` on SM120), after its refactor",
        "project": "FlashInfer (the kernel SGLang uses on SM120 by default since sgl-project/sglang#27455)",
        "source": "https://github.com/flashinfer-ai/flashinfer/pull/4802",
        "where": "PR #4802 description (merged, 2026-08-28), 'All numbers on RTX PRO 6000 (SM120)'",
        "device": "NVIDIA RTX PRO 6000 Blackwell (sm_120)",
        "figure_us": 11.3,
        "baseline_us": 14.9,
        "what": "decode time at T = 1, graph replay, before (14.9 us) and after (11.3 us) the refactor",
        "shape": "T = 1 (one decode token), dual cache (SWA + compressed), 18K context",
        "not_stated": "number of heads and top-k in the text read",
        "nearest_cells": [[1, 512, "two_cache"]],
        "differs": "heads and top-k not stated; the grid's two-cache cells are top-k + a 128-token window",
    },
]

NOT_FOUND = [
    {"looked_for": "SGLang's FlashInfer SM120 sparse decode: a per-call kernel time",
     "source": "https://github.com/sgl-project/sglang/pull/27455",
     "found": "end-to-end decode TPOT 2.2-3.7x faster than SGLang's Triton kernel (ISL 8K, TP4, RTX PRO 6000); "
              "no kernel time in the text read"},
    {"looked_for": "FlashInfer's SM120 sparse-MLA decode as introduced: a per-call kernel time",
     "source": "https://github.com/flashinfer-ai/flashinfer/pull/3395",
     "found": "the kernels (decode: warp-spec, split-K; DSv4 d_qk = 512 and DSv3.2 d_qk = 576); no timing in the "
              "text read"},
    {"looked_for": "FlashMLA sm_120 ports (an HMMA sparse decode)",
     "source": "https://github.com/sgl-project/sglang/pull/28025",
     "found": "a custom sm_120 HMMA sparse_decode_kernel.cuh (ambientlight/deepseek-v4-flash-sm120) used on "
              "4x RTX PRO 6000 Max-Q; no kernel time in the text read"},
    {"looked_for": "vLLM's sparse-MLA decode on sm_120 / sm_121 in the DeepSeek-V4 SM12x PRs",
     "source": "https://github.com/vllm-project/vllm/pull/40991",
     "found": "end-to-end tokens/s only (e.g. 40-50 tok/s on 2x RTX PRO 6000); no kernel time"},
]

SEARCHES = [
    {"corpus": "issues", "query": "sparse MLA decode sm120 RTX PRO 6000 kernel latency us benchmark DeepSeek-V3.2"},
    {"corpus": "issues", "query": "FlashInfer SM120 sparse MLA decode kernel SGLang DeepSeek V3.2 benchmark RTX 5090"},
    {"corpus": "issues", "query": "vLLM split-K sparse MLA decode sm_120 Triton kernel performance"},
    {"corpus": "issues", "query": "flashinfer SM120 sparse MLA decode dsv4 benchmark us per call num_heads 64 topk 512 "
                                  "RTX PRO 6000 warp-spec split-K"},
    {"corpus": "issues", "query": "sparse_mla_sm120_decode_dsv4 kernel time microseconds Triton vs FlashInfer batch size"},
    {"corpus": "issues", "query": "Refactor Sparse MLA SM120 decode T=1 14.9 11.3 us graph replay dual-cache 18K "
                                  "context num_heads topk table"},
    {"corpus": "issues", "query": "vLLM 43477 FlashInfer SM120 sparse MLA decode DeepSeek V4 RTX PRO 6000 kernel benchmark"},
    {"corpus": "issues", "query": "[SM120] Add FlashInfer sparse MLA decode for DSv4-Flash kernel-level benchmark "
                                  "Triton us FlashInfer us per call"},
    {"corpus": "pages", "query": "sm120 sparse MLA decode kernel microbenchmark RTX 5090 RTX PRO 6000 us per layer "
                                 "DeepSeek V4 flash HMMA"},
    {"corpus": "code", "query": "bench_sparse_mla_sm120 decode results RTX PRO 6000 num_heads topk latency"},
]


def _key(cell: dict) -> tuple:
    return cell["batch"], cell["topk"], cell["form"], cell["pattern"]


def floor_us(nbytes: float, flops: float, gb_s: float, tflop_s: float) -> tuple[float, str]:
    """(floor in us, which term binds): bytes over bandwidth against flops over the tensor rate."""
    t_bytes, t_flops = nbytes / (gb_s * 1e3), flops / (tflop_s * 1e6)
    return (t_bytes, "bytes") if t_bytes >= t_flops else (t_flops, "flops")


def log_interval(samples: list[float], confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """A t interval (df = n - 1) for the geometric mean of ``samples``, on their logs; (None, None) under 2."""
    if len(samples) < 2:
        return None, None
    logs = [math.log(s) for s in samples]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = t_quantile(0.5 + confidence / 2, len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean + half)


def _timed(result: dict, temp: str, floor_meas: float, scale: float, scale_pub: float) -> dict:
    median = result[f"{temp}_us"]
    lo, hi = log_interval(result[f"{temp}_samples_us"])
    out = {
        "median_us": median, "n": len(result[f"{temp}_samples_us"]),
        "efficiency": floor_meas / median,
        "efficiency_interval": None if lo is None else [floor_meas / hi, floor_meas / lo],
        "projected_us": median * scale,
        "projected_interval_us": None if lo is None else [lo * scale, hi * scale],
        "projected_us_vs_published": median * scale_pub,
    }  # fmt: skip
    return out


def project(directory: Path) -> dict:
    sm120 = json.loads((directory / "sm120" / "sparse_mla_decode_grid.json").read_text())
    hopper = json.loads((directory / "hopper" / "sparse_mla_decode_grid.json").read_text())
    ceil = sm120["ceilings"]
    box_bw, box_tf = RATES["memory_GBps"]["value"], RATES["bf16_mma_fp32acc_TFLOPs"]["value"]
    pub_bw, pub_tf = MEASURING_PUBLISHED["memory_GBps"]["value"], MEASURING_PUBLISHED["bf16_mma_fp32acc_TFLOPs"]["value"]
    upstream = {_key(c): c.get("upstream") for c in hopper["grid"]["cells"]}
    rows = []
    for cell in sm120["grid"]["cells"]:
        if not isinstance(cell.get("rewrite"), dict):
            continue
        floor_meas, bound_meas = floor_us(cell["bytes"], cell["flops"], ceil["copy_GBps"], ceil["bf16_matmul_TFLOPs"])
        floor_box, bound_box = floor_us(cell["bytes"], cell["flops"], box_bw, box_tf)
        floor_pub, _ = floor_us(cell["bytes"], cell["flops"], pub_bw, pub_tf)
        scale, scale_pub = floor_box / floor_meas, floor_box / floor_pub
        row = {"label": LABEL, "batch": cell["batch"], "topk": cell["topk"], "form": cell["form"],
               "pattern": cell["pattern"], "heads": cell["heads"], "config": cell["config"], "splits": cell["splits"],
               "bytes": cell["bytes"], "flops": cell["flops"],
               "floor_measuring_us": floor_meas, "grid_floor_us": cell["floor_us"], "bound_measuring": bound_meas,
               "floor_sm120_us": floor_box, "bound_sm120": bound_box, "floor_measuring_published_us": floor_pub,
               "floor_ratio": scale}  # fmt: skip
        for temp in TEMPS:
            row[temp] = _timed(cell["rewrite"], temp, floor_meas, scale, scale_pub)
        up = upstream.get(_key(cell))
        if isinstance(up, dict):
            row["upstream"] = {t: _timed(up, t, floor_meas, scale, scale_pub) for t in TEMPS}
            row["vs_upstream_warm"] = row["warm"]["projected_us"] / row["upstream"]["warm"]["projected_us"]
        rows.append(row)
    return {
        "label": LABEL,
        "what": "the sm_120 plan's kernels at every grid cell, projected onto the declared box from its own "
                "floors with the efficiency measured on the measuring GPU carried over; not measured",
        "source": str(directory),
        "measuring_device": sm120["env"].get("device_name"),
        "measuring_rates": {"copy_GBps": ceil["copy_GBps"], "bf16_matmul_TFLOPs": ceil["bf16_matmul_TFLOPs"],
                            "method": ceil.get("method")},
        "measuring_published": MEASURING_PUBLISHED,
        "device": DEVICE,
        "rates": RATES,
        "method": {
            "floor": "max(bytes / bandwidth, flops / bf16 tensor rate), bytes and flops from "
                     "tools.kernels.dsv4_cache.decode_work (as the grid's floor_us)",
            "efficiency": "floor on the measuring GPU (its measured rates) / the sm_120 path's median time there",
            "interval": f"{CONFIDENCE:.0%} Student t interval on the mean log replay sample (agent.stats.t_quantile), "
                        "about the samples' geometric mean; the point is the median",
            "projection": "floor_sm120_us / efficiency = median_us * floor_ratio",
            "vs_published": "the same with the measuring GPU's floor from its published peaks",
        },
        "caveats": CAVEATS,
        "summary": summarize(rows),
        "peers": [{**p, "nearest_projected_warm_us": _nearest(rows, p["nearest_cells"])} for p in PEERS],
        "peers_not_found": NOT_FOUND,
        "peer_searches": SEARCHES,
        "cells": rows,
    }


def _nearest(rows: list[dict], keys: list[list]) -> list[dict]:
    out = []
    for batch, topk, form in keys:
        got = [r["warm"]["projected_us"] for r in rows if (r["batch"], r["topk"], r["form"]) == (batch, topk, form)]
        if got:
            out.append({"batch": batch, "topk": topk, "form": form, "heads": 64, "label": LABEL,
                        "projected_warm_us": [min(got), max(got)]})
    return out


def summarize(rows: list[dict]) -> dict:
    warm = [r["warm"]["projected_us"] for r in rows]
    cold = [r["cold"]["projected_us"] for r in rows]
    eff = [r["warm"]["efficiency"] for r in rows]
    ratio = [r["floor_ratio"] for r in rows]
    worst = max(rows, key=lambda r: r["warm"]["projected_us"])
    worst_eff = min(rows, key=lambda r: r["warm"]["efficiency"])
    vs_up = [r["vs_upstream_warm"] for r in rows if "vs_upstream_warm" in r]
    pub = [r["warm"]["projected_us_vs_published"] / r["warm"]["projected_us"] for r in rows]
    median_in = sum(
        1 for r in rows for t in TEMPS
        if r[t]["projected_interval_us"] and r[t]["projected_interval_us"][0] <= r[t]["projected_us"] <= r[t]["projected_interval_us"][1]
    )  # fmt: skip
    by_batch = {}
    for r in rows:
        by_batch.setdefault(r["batch"], []).append(r["warm"]["projected_us"])
    return {
        "label": LABEL,
        "cells": len(rows),
        "bound_measuring": {b: sum(r["bound_measuring"] == b for r in rows) for b in ("bytes", "flops")},
        "bound_sm120": {b: sum(r["bound_sm120"] == b for r in rows) for b in ("bytes", "flops")},
        "floor_ratio_median": statistics.median(ratio), "floor_ratio_range": [min(ratio), max(ratio)],
        "efficiency_warm_median": statistics.median(eff), "efficiency_warm_range": [min(eff), max(eff)],
        "projected_warm_us_median": statistics.median(warm), "projected_warm_us_range": [min(warm), max(warm)],
        "projected_cold_us_median": statistics.median(cold),
        "projected_warm_us_by_batch": {b: [min(v), max(v)] for b, v in sorted(by_batch.items())},
        "worst": {k: worst[k] for k in ("batch", "topk", "form", "pattern", "config", "floor_sm120_us")}
        | {"projected_warm_us": worst["warm"]["projected_us"], "interval_us": worst["warm"]["projected_interval_us"],
           "measured_warm_us": worst["warm"]["median_us"]},
        "lowest_efficiency": {k: worst_eff[k] for k in ("batch", "topk", "form", "pattern", "config")}
        | {"efficiency_warm": worst_eff["warm"]["efficiency"], "interval": worst_eff["warm"]["efficiency_interval"]},
        "vs_upstream_warm_median": statistics.median(vs_up) if vs_up else None,
        "vs_upstream_warm_range": [min(vs_up), max(vs_up)] if vs_up else None,
        "vs_upstream_note": "the upstream kernel projected the same way, so this ratio is the measured one "
                            "(both move by the same floor ratio); upstream was timed in the Hopper process",
        "vs_published_factor_range": [min(pub), max(pub)],
        "median_within_interval": f"{median_in} of {2 * len(rows)} cell-temperatures",
        "reduces_to": (
            "every cell is bytes-bound on both GPUs, so each projected time is the measured time x the measuring "
            "GPU's measured copy GB/s / the box's published GB/s"
            if all(r["bound_measuring"] == r["bound_sm120"] == "bytes" for r in rows) else
            "the bound differs between the GPUs at some cells: see bound_measuring and bound_sm120"
        ),
    }  # fmt: skip


def summary(result: dict) -> str:
    s = result["summary"]
    w = s["worst"]
    lines = [
        f"PROJECTED onto {result['device']['name']} ({result['device']['arch']}, {result['device']['sm_count']['value']} SMs) "
        f"from {s['cells']} cells timed on {result['measuring_device']}; not measured",
        f"box rates: {RATES['memory_GBps']['value']:.0f} GB/s, {RATES['bf16_mma_fp32acc_TFLOPs']['value']} TFLOP/s bf16 "
        f"(fp32 acc); bound on the box: bytes {s['bound_sm120']['bytes']}, flops {s['bound_sm120']['flops']}",
        f"floor ratio box / measuring: median {s['floor_ratio_median']:.2f} ({s['floor_ratio_range'][0]:.2f}-"
        f"{s['floor_ratio_range'][1]:.2f}); efficiency carried over (warm): median {s['efficiency_warm_median']:.3f} "
        f"({s['efficiency_warm_range'][0]:.3f}-{s['efficiency_warm_range'][1]:.3f})",
        f"projected warm: median {s['projected_warm_us_median']:.1f} us over cells "
        f"({s['projected_warm_us_range'][0]:.1f}-{s['projected_warm_us_range'][1]:.1f}); cold median "
        f"{s['projected_cold_us_median']:.1f} us",
        f"worst: {w['batch']}x{w['topk']} {w['form']} {w['pattern']} ({w['config']}) {w['projected_warm_us']:.0f} us "
        f"[{w['interval_us'][0]:.0f}, {w['interval_us'][1]:.0f}] against its box floor {w['floor_sm120_us']:.1f} us",
        f"vs upstream (projected the same way): median {s['vs_upstream_warm_median']:.4f}x its time "
        f"({s['vs_upstream_warm_range'][0]:.4f}-{s['vs_upstream_warm_range'][1]:.4f}x)",
        f"with the measuring GPU's published peaks instead: x{s['vs_published_factor_range'][0]:.2f}-"
        f"{s['vs_published_factor_range'][1]:.2f} on each projected time",
        f"peers with a published figure: {len(result['peers'])}; looked for and not found: {len(result['peers_not_found'])}",
        s["reduces_to"],
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--json", action="store_true", help="print the projection as JSON")
    args = ap.parse_args(argv)
    try:
        result = project(args.dir)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {args.dir}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    (args.dir / "projection_sm120.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
