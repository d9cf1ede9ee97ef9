"""Benchmark of the split-K sparse MLA decode against SGLang's Triton kernel and FlashMLA (CUDA only).

    python -m benchmarks.sparse_mla_decode --table [--sweep] [--matrix] --out DIR

--table   B in {1, 4, 16, 64} x top-k in {512, 2048}, H = 64: upstream (SGLang
          ``_tiled_sparse_decode_kernel``), FlashMLA (``sgl-flash-mla`` wheel, legacy SM90 kernels) and
          the rewrite; CUDA-graph replay medians with warm L2 (one input set replayed) and cold L2 (a
          cache larger than L2, index sets rotated); do_bench medians beside them; GB/s, TFLOP/s,
          fraction of the floor (bytes / copy bandwidth and FLOPs / matmul rate, both measured here).
--sweep   tile configurations and split counts of the rewrite at a few shapes (each checked first).
--matrix  the correctness matrix: B in {1, 3, 16, 64} x top-k in {128, 512, 2048} x H in {16, 64}; four
          variants a shape: check.VARIANTS' three and ``clustered_two_caches`` (benchmarks/sparse_mla_grid.py:
          clustered_case, the top-k pattern generator's runs inside each row's own context).
--grid    B in {1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 128} x top-k in {512, 768, 1024, 1536, 2048} x
          {uniform, clustered} indices x {one cache, window + compressed}, warm and cold, rewrite, FlashMLA and
          upstream at every cell (benchmarks/sparse_mla_grid.py); --grid-budget-s stops starting cells after
          that many seconds (the skipped ones are listed); writes ``sparse_mla_decode_grid.json``.

Writes ``sparse_mla_decode.json`` (raw samples, device, clocks, driver, versions, git revision)
under --out and prints a short table last. Performance goals live here, not in tests:
B=1/top-k 512 <= 12 us and B=64/top-k 2048 <= 70 us, both faster than FlashMLA.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

from tools import rates  # noqa: E402
from tools.kernels import dsv4_cache, upstream  # noqa: E402
from tools.kernels import sparse_mla_decode as smd  # noqa: E402
from tools.kernels.splitk import check, timing  # noqa: E402
from tools.kernels.splitk import declared, tiles  # noqa: E402

from benchmarks import sparse_mla_grid  # noqa: E402

HEADS = 64
PAGE = 64
TABLE_SHAPES = [(b, k) for k in (512, 2048) for b in (1, 4, 16, 64)]
GOALS = {"1x512": 12.0, "64x2048": 70.0}
COLD_FOOTPRINT = 3 * 60e6  # bytes of distinct KV a cold-L2 rotation touches (L2 is 60 MB)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _sglang_info() -> dict:
    """The upstream kernel's file and sglang's version, or why there is none (a run that times only the rewrite
    needs no sglang on the box)."""
    try:
        return {"sglang_kernel_file": str(upstream.kernel_path()), "sglang_version": upstream.sglang_version()}
    except upstream.SglangMissing as exc:
        return {"sglang_kernel_file": None, "sglang_version": None, "sglang_missing": str(exc)}


def env_info() -> dict:
    smi = _run([
        "nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,"
        "power.draw,power.limit,temperature.gpu,persistence_mode", "--format=csv",
    ])  # fmt: skip
    props = torch.cuda.get_device_properties(0)
    return {
        "device_name": torch.cuda.get_device_name(),
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "nvidia_smi": smi,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        **_sglang_info(),
        # The device machine's copy of the working tree may carry stale git metadata: GIT_REVISION, when
        # given, wins.
        "git_revision": os.environ.get("GIT_REVISION") or _run(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        "kernel_source_sha256": kernel_source_sha256(),
    }


def kernel_source_sha256() -> str:
    """SHA-256 of the kernel's sources: tools/kernels/sparse_mla_decode.py, then tools/kernels/splitk/*.py
    in name order."""
    files = [Path(smd.__file__), *sorted(Path(tiles.__file__).parent.glob("*.py"))]
    return hashlib.sha256(b"".join(path.read_bytes() for path in files)).hexdigest()


def measure_ceilings() -> dict:
    """Device copy bandwidth (bytes read + written) and bf16 matmul rate, measured by tools.rates as the
    agent's survey measures them, so the benchmark's floors and the report's floors share denominators."""
    measured = rates.measure("cuda")
    if "error" in measured:
        raise RuntimeError(f"tools.rates could not measure the device: {measured['error']}")
    return {"copy_GBps": measured["copy"]["gb_s"], "bf16_matmul_TFLOPs": measured["matmul"]["tflop_s"],
            "method": "tools.rates.measure('cuda'): medians of CUDA-event-timed calls", "rates": measured}


def make_cache(num_tokens: int, gen: torch.Generator) -> torch.Tensor:
    pages = math.ceil(num_tokens / PAGE)
    cache = dsv4_cache.empty_cache(pages, PAGE, "cuda")
    chunk = 1 << 16
    for lo in range(0, pages * PAGE, chunk):
        hi = min(lo + chunk, pages * PAGE)
        kv = torch.randn(hi - lo, dsv4_cache.HEAD_DIM, generator=gen).cuda()
        kv *= torch.exp2(torch.randint(-4, 5, (hi - lo, 1), generator=gen).float()).cuda()
        dsv4_cache.write_tokens(cache, torch.arange(lo, hi, device="cuda"), kv)
    return cache


def index_sets(batch, topk, num_tokens, n_sets, gen):
    """Top-k rows of clustered runs over the whole cache (all valid), one tensor a set."""
    sets = []
    for _ in range(n_sets):
        rows = []
        for _ in range(batch):
            row = check.row_indices(gen, topk, num_tokens)
            row[row < 0] = torch.randint(0, num_tokens, (int((row < 0).sum()),), generator=gen, dtype=torch.int32)
            rows.append(row)
        sets.append(torch.stack(rows).view(batch, 1, topk).cuda())
    return sets


def floors(batch, topk, heads, ceil):
    work = dsv4_cache.decode_work(batch, heads, topk)
    nbytes, flops = work["bytes"], work["flops"]
    return nbytes, flops, max(nbytes / (ceil["copy_GBps"] * 1e3), flops / (ceil["bf16_matmul_TFLOPs"] * 1e6))


def load_flashmla():
    try:
        import flash_mla  # noqa: F401

        if not flash_mla.has_legacy():
            return None, "flash_mla loaded without its legacy (SM90) kernels"
        return flash_mla, None
    except Exception as exc:  # reported in the table, not hidden
        return None, f"{type(exc).__name__}: {exc}"


def flashmla_fn(fm, q, cache, idx):
    sched, _ = fm.get_mla_metadata()

    def call():
        return fm.flash_mla_with_kvcache(
            q, cache, None, None, 512, sched, None, 512**-0.5, False, True, indices=idx, use_legacy=True
        )

    call()  # the first call fills the scheduling metadata, outside any graph
    return call


def time_impl(make_call, sets, q, cache, reps) -> dict:
    """Warm (one set replayed) and cold (sets rotated) graph medians, do_bench median, raw samples."""
    warm_call = make_call(q, cache, sets[0])
    warm = timing.graph_replay_us([warm_call], reps=reps)
    cold = timing.graph_replay_us([make_call(q, cache, s) for s in sets], reps=max(3, reps // 3)) if len(sets) > 1 else None
    db = timing.do_bench_us(warm_call)
    return {
        "warm_us": statistics.median(warm),
        "cold_us": statistics.median(cold) if cold else None,
        "do_bench_us": db,
        "warm_samples_us": warm,
        "cold_samples_us": cold,
    }


def run_table(ceil: dict, fm, fm_error) -> list[dict]:
    gen = torch.Generator().manual_seed(1234)
    cache_tokens = 1 << 19  # 306 MB of cache: index sets drawn over it are L2-cold when rotated
    cache = make_cache(cache_tokens, gen)
    up = upstream.load().flash_mla_sparse_decode_triton
    rows = []
    for batch, topk in TABLE_SHAPES:
        per_call = batch * topk * dsv4_cache.BYTES_PER_TOKEN
        n_sets = int(min(400, max(2, math.ceil(COLD_FOOTPRINT / per_call))))
        sets = index_sets(batch, topk, cache_tokens, n_sets, gen)
        q = (torch.randn(batch, 1, HEADS, 512, generator=gen) * 0.5).to(torch.bfloat16).cuda()
        nbytes, flops, floor_us = floors(batch, topk, HEADS, ceil)
        row = {"batch": batch, "topk": topk, "heads": HEADS, "bytes": nbytes, "flops": flops, "floor_us": floor_us,
               "cold_sets": n_sets, "splits": smd.plan_splits(batch, topk, HEADS, q.device),
               "config": tiles.choose_config(batch, topk, HEADS, tiles.device_arch(q.device)).__dict__}  # fmt: skip
        log(f"table B={batch} topk={topk} sets={n_sets}")
        row["rewrite"] = time_impl(lambda q_, c_, i_: (lambda: smd.sparse_mla_decode(q_, c_, i_, None, None, 512, None)),
                                   sets, q, cache, reps=30)  # fmt: skip
        up_reps = 5 if batch * topk >= 16 * 2048 else 10
        row["upstream"] = time_impl(lambda q_, c_, i_: (lambda: up(q_, c_, i_, None, None, 512, None)),
                                    sets, q, cache, reps=up_reps)  # fmt: skip
        if fm is not None:
            row["flashmla"] = time_impl(lambda q_, c_, i_: flashmla_fn(fm, q_, c_, i_), sets, q, cache, reps=30)
            # the call is right: compare its output with ours and the reference on set 0
            fo, fl = flashmla_fn(fm, q, cache, sets[0])()
            ro, rl = dsv4_cache.reference_sparse_decode(q, cache, sets[0])
            row["flashmla"]["vs_reference"] = check.compare(fo, fl.view(batch, HEADS, 1), ro, rl)
        else:
            row["flashmla"] = {"error": fm_error}
        for name in ("rewrite", "upstream", "flashmla"):
            r = row[name]
            if "warm_us" in r:
                r["GBps"] = nbytes / r["warm_us"] / 1e3
                r["TFLOPs"] = flops / r["warm_us"] / 1e6
                r["fraction_of_floor"] = floor_us / r["warm_us"]
                if r.get("cold_us"):
                    r["fraction_of_floor_cold"] = floor_us / r["cold_us"]
        for name in ("upstream", "flashmla"):
            if "warm_us" in row[name]:
                row[f"speedup_vs_{name}_warm"] = row[name]["warm_us"] / row["rewrite"]["warm_us"]
                if row[name].get("cold_us") and row["rewrite"].get("cold_us"):
                    row[f"speedup_vs_{name}_cold"] = row[name]["cold_us"] / row["rewrite"]["cold_us"]
        rows.append(row)
        del sets
    del cache
    torch.cuda.empty_cache()
    return rows


SWEEP_CONFIGS = {
    # name: KernelConfig fields (block_h, block_t, num_warps, num_stages, p_scratch, ablate[, d_halves]).
    # Run 1 also swept a hand-written register prefetch of the next tile (spilled; slower everywhere,
    # see sparse_mla_decode_run1_sweep_table.json); it has since been removed from the kernel.
    "h64t32w8s2": (64, 32, 8, 2, False, 0),
    "h64t64w8s2": (64, 64, 8, 2, False, 0),
    "h64t64w8s3": (64, 64, 8, 3, False, 0),
    "h64t32w8s1_scr": (64, 32, 8, 1, True, 0),
    "h64t64w8s1_scr": (64, 64, 8, 1, True, 0),
    "h64t128w8s1_scr": (64, 128, 8, 1, True, 0),
    "h64t64w16s1_scr": (64, 64, 16, 1, True, 0),
    "h64t32w16s1_scr": (64, 32, 16, 1, True, 0),
    "h16t32w4s2": (16, 32, 4, 2, False, 0),
    "h16t64w4s2": (16, 64, 4, 2, False, 0),
    # timing probes (wrong results, never checked): without Q K^T, without P V, without the gather
    "h64t64w8s1_scr_noqk": (64, 64, 8, 1, True, 1),
    "h64t64w8s1_scr_nopv": (64, 64, 8, 1, True, 2),
    "h64t64w8s1_scr_nogather": (64, 64, 8, 1, True, 3),
    "h64t64w8s2_nogather": (64, 64, 8, 2, False, 3),
    # output dims halved over two 4-warp programs (two programs an SM where shared memory allows)
    "dh64t32w4s1": (64, 32, 4, 1, False, 0, True),
    "dh64t32w4s2": (64, 32, 4, 2, False, 0, True),
    "dh64t16w4s1": (64, 16, 4, 1, False, 0, True),
    "dh64t16w4s2": (64, 16, 4, 2, False, 0, True),
    # the Hopper Gluon kernel (_split_kernel_sm90): dequantized per 64-dim group, or in 2 / 4 row blocks
    "sm90_groups": tiles.LARGE_SM90,
    "sm90_rows2": dataclasses.replace(tiles.LARGE_SM90, dequant_rows=2),
    "sm90_rows4": dataclasses.replace(tiles.LARGE_SM90, dequant_rows=4),
    # warp-specialized (_split_kernel_ws): 64-dim groups dequantized at a time, registers
    "ws_b1": dataclasses.replace(tiles.LARGE_WS, ws_batch=1, ws_regs=(216, 64)),
    "ws_b2": dataclasses.replace(tiles.LARGE_WS, ws_batch=2, ws_regs=(216, 64)),
    "ws_b4": dataclasses.replace(tiles.LARGE_WS, ws_batch=4, ws_regs=(216, 64)),
    "ws_b4_r208_80": tiles.LARGE_WS,
    # timing probes (wrong results, never checked): the producer idle (no gather or dequantization), the
    # consumers idle (no dots or softmax)
    "ws_noproducer": dataclasses.replace(tiles.LARGE_WS, ablate=1),
    "ws_noconsumer": dataclasses.replace(tiles.LARGE_WS, ablate=2),
}
SWEEP_SHAPES = {(1, 512): (2, 4, 8, 16), (4, 2048): (4, 8, 16), (16, 2048): (2, 4, 8), (64, 2048): (1, 2, 3, 4)}


def sweep_config(name: str) -> tiles.KernelConfig:
    if isinstance(SWEEP_CONFIGS[name], tiles.KernelConfig):
        return SWEEP_CONFIGS[name]
    bh, bt, nw, ns, ps, ab, *dh = SWEEP_CONFIGS[name]
    return tiles.KernelConfig(bh, bt, nw, ns, programs_per_sm=1, p_scratch=ps, ablate=ab,
                            d_halves=bool(dh and dh[0]))  # fmt: skip


def run_sweep(ceil, names, shapes) -> list[dict]:
    gen = torch.Generator().manual_seed(99)
    cache_tokens = 1 << 18
    cache = make_cache(cache_tokens, gen)
    results = []
    for name in names:
        cfg = sweep_config(name)
        entry = {"name": name, "config": cfg.__dict__, "checks": {}, "timings": []}
        try:
            for shape in ((16, 2048, 64, "one_cache"), (3, 300, 64, "two_caches_sink"), (2, 200, 16, "one_cache")):
                if cfg.ablate:
                    break
                b_, k_, h_, var = shape
                case = check.make_case(b_, k_, h_, "cuda", 7 + b_, **check.VARIANTS[var])
                res = check.check_case(case, with_upstream=False, num_splits=3, config=cfg)
                entry["checks"][f"{b_}x{k_}x{h_}_{var}"] = res["vs_reference"]
            entry["ok"] = all(c["ok"] for c in entry["checks"].values())
            for (batch, topk), split_list in shapes.items():
                sets = index_sets(batch, topk, cache_tokens, 1, gen)
                q = (torch.randn(batch, 1, HEADS, 512, generator=gen) * 0.5).to(torch.bfloat16).cuda()
                total = lambda s: s  # noqa: E731
                for splits in split_list:
                    out = torch.empty(batch, 1, HEADS, 512, dtype=torch.bfloat16, device="cuda")
                    lse = torch.empty(batch, HEADS, dtype=torch.float32, device="cuda")

                    def call(q=q, s=sets[0], splits=splits, out=out, lse=lse):
                        smd.sparse_mla_decode_into(out, lse, None, q, cache, s, None, None, 512, None,
                                                   num_splits=splits, config=cfg)  # fmt: skip

                    samples = timing.graph_replay_us([call], reps=15)
                    _, _, floor_us = floors(batch, topk, HEADS, ceil)
                    entry["timings"].append({"batch": batch, "topk": topk, "splits": total(splits),
                                             "us": statistics.median(samples), "floor_us": floor_us})  # fmt: skip
                    log(f"sweep {name} B={batch} topk={topk} S={splits}: {statistics.median(samples):.1f} us")
        except Exception as exc:  # a config that fails to compile or run is a result
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
            log(f"sweep {name} failed: {entry['error'][:300]}")
        results.append(entry)
    del cache
    torch.cuda.empty_cache()
    return results


def run_matrix() -> list[dict]:
    rows = []
    seed = int(time.time())
    for heads in (16, 64):
        for topk in (128, 512, 2048):
            for batch in (1, 3, 16, 64):
                res = check.run_check(batch, topk, heads, "cuda", seed)
                res["variants"]["clustered_two_caches"] = sparse_mla_grid.check_clustered(batch, topk, heads, "cuda",
                                                                                         seed + 3000)  # fmt: skip
                res["ok"] = all(v["ok"] for v in res["variants"].values())
                seed += 1
                rows.append(res)
                log(f"matrix B={batch} topk={topk} H={heads}: ok={res['ok']}")
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--matrix", action="store_true")
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--grid-budget-s", type=float, default=330.0)
    parser.add_argument("--grid-shapes", default="", help="e.g. '64x2048,1x512' (default: the whole grid)")
    parser.add_argument("--grid-impls", default="", help="comma-separated of rewrite,upstream,flashmla,probe (default: all)")
    parser.add_argument("--plan-arch", type=int, default=None, metavar="SM",
                        help="the rewrite planned as that GPU's (120: the sm_120 family, with Triton's wgmma lowering off "
                             "on a Hopper GPU); set before anything is compiled, so run it as a process of its own")
    parser.add_argument("--sweep-configs", default="", help="comma-separated names of SWEEP_CONFIGS")
    parser.add_argument("--sweep-shapes", default="", help="e.g. '64x2048:1,2;1x512:8,16'")
    parser.add_argument("--probe", default="", help="run one SWEEP_CONFIGS entry --iters times (for ncu) and exit")
    parser.add_argument("--probe-shape", default="64x2048:2")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    return parser


def main() -> int:
    args = _parser().parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    if args.plan_arch is not None:
        major, minor = torch.cuda.get_device_capability()
        os.environ.update(declared.plan_env(args.plan_arch, 10 * major + minor))
    if args.grid_impls:
        sparse_mla_grid.IMPLS = frozenset(args.grid_impls.split(","))
    if args.probe:
        shape, splits = args.probe_shape.split(":")
        batch, topk = (int(x) for x in shape.split("x"))
        gen = torch.Generator().manual_seed(5)
        cache = make_cache(1 << 18, gen)
        idx = index_sets(batch, topk, 1 << 18, 1, gen)[0]
        q = (torch.randn(batch, 1, HEADS, 512, generator=gen) * 0.5).to(torch.bfloat16).cuda()
        out = torch.empty(batch, 1, HEADS, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(batch, HEADS, dtype=torch.float32, device="cuda")
        for _ in range(args.iters):
            smd.sparse_mla_decode_into(out, lse, None, q, cache, idx, None, None, 512, None,
                                       num_splits=int(splits), config=sweep_config(args.probe))  # fmt: skip
        torch.cuda.synchronize()
        return 0
    result = {"env": env_info(), "command": " ".join(sys.argv)}
    t0 = time.time()
    result["ceilings"] = ceil = measure_ceilings()
    log(f"ceilings {ceil}")
    if args.sweep:
        names = args.sweep_configs.split(",") if args.sweep_configs else list(SWEEP_CONFIGS)
        shapes = SWEEP_SHAPES
        if args.sweep_shapes:
            shapes = {}
            for item in args.sweep_shapes.split(";"):
                shape, splits = item.split(":")
                b_, k_ = shape.split("x")
                shapes[(int(b_), int(k_))] = tuple(int(x) for x in splits.split(","))
        result["sweep"] = run_sweep(ceil, names, shapes)
    if args.table:
        fm, fm_error = load_flashmla()
        result["flashmla_error"] = fm_error
        result["table"] = run_table(ceil, fm, fm_error)
    if args.grid:
        fm, fm_error = load_flashmla()
        result["flashmla_error"] = fm_error
        result["env"]["flash_mla_version"] = getattr(fm, "__version__", None)
        args.out.mkdir(parents=True, exist_ok=True)
        shapes = [tuple(int(x) for x in item.split("x")) for item in args.grid_shapes.split(",")] if args.grid_shapes else None
        result["grid"] = sparse_mla_grid.run_grid(ceil, fm, fm_error, args.grid_budget_s,
                                                  args.out / "grid_partial.json", shapes)  # fmt: skip
    if args.matrix:
        result["matrix"] = run_matrix()
        result["matrix_ok"] = all(r["ok"] for r in result["matrix"])
    if args.plan_arch is not None and (args.grid or args.matrix or args.table):
        result["plan_arch"], result["sass"] = args.plan_arch, plan_sass()
    result["env"]["nvidia_smi_after"] = _run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                                              "--format=csv"])  # fmt: skip
    result["wall_s"] = time.time() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("sparse_mla_decode_grid.json" if args.grid else "sparse_mla_decode.json")
    path.write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    print_summary(result)
    log(f"wrote {path}")
    return 0


def plan_sass() -> dict:
    """The SASS mix of every Triton split-K and combine kernel this process compiled, and whether the planned
    architecture's tensor-core path is the one that ran: under the sm_120 plan each split kernel holds HMMA
    (mma.sync) and none of them HGMMA (wgmma, which sm_120 lacks); ``ok`` is False, never omitted, otherwise."""
    mix = timing.splitk_sass()
    if "error" in mix:
        return {"ok": False, **mix}
    if os.environ.get(declared.WGMMA_OFF_ENV) != "1":
        return {"ok": None, "why": "wgmma lowering on: nothing to assert", "kernels": mix}
    split = {name: row for name, row in mix.items() if name.startswith("_split")}
    ok = bool(split) and all(row["HMMA"] > 0 for row in split.values()) and not any(r["HGMMA"] for r in mix.values())
    return {"ok": ok, "kernels": mix}


def print_summary(result: dict) -> None:
    if "sass" in result:
        print(f"sass (plan sm_{result['plan_arch']}): ok={result['sass']['ok']} {json.dumps(result['sass'].get('kernels', result['sass']))}")
    if "grid" in result:
        cells = result["grid"]["cells"]
        print(f"grid: {len(cells)} cells, {len(result['grid']['skipped'])} skipped, {result['grid']['wall_s']:.0f} s")
        for cell in cells:
            if cell.get("flashmla_faster") or (cell["batch"], cell["topk"]) == (64, 2048):
                print(sparse_mla_grid.summary_line(cell))
    for entry in result.get("sweep", []):
        times = " ".join(f"{t['batch']}x{t['topk']}/S{t['splits']}:{t['us']:.1f}" for t in entry["timings"])
        print(f"sweep {entry['name']:20s} ok={entry.get('ok')} {entry.get('error', '')[:80]} {times}")
    if "matrix" in result:
        bad = [r["shape"] for r in result["matrix"] if not r["ok"]]
        print(f"matrix ok={result['matrix_ok']} failing={bad}")
    if result.get("flashmla_error"):
        print(f"FlashMLA not measured on this box: {result['flashmla_error']}")
    if "table" in result:
        print("B topk | upstream us | flashmla us | rewrite warm/cold/do_bench us | x upstream | x flashmla | "
              "GB/s TFLOP/s floor-frac")  # fmt: skip
        for r in result["table"]:
            rw, up_, fmr = r["rewrite"], r["upstream"], r["flashmla"]
            fm_s = f"{fmr['warm_us']:.1f}/{fmr['cold_us'] or 0:.1f}" if "warm_us" in fmr else "n/a"
            print(
                f"{r['batch']:2d} {r['topk']:4d} | {up_['warm_us']:.1f} | {fm_s} | {rw['warm_us']:.1f}/"
                f"{rw['cold_us'] or 0:.1f}/{rw['do_bench_us']:.1f} | {r.get('speedup_vs_upstream_warm', 0):.1f} | "
                f"{r.get('speedup_vs_flashmla_warm', 0):.2f} | {rw['GBps']:.0f} {rw['TFLOPs']:.0f} "
                f"{rw['fraction_of_floor']:.2f} S={r['splits']}"
            )


if __name__ == "__main__":
    sys.exit(main())
