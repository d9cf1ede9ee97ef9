"""Ahead-of-time compile of the kernels the split-K decode's sm_120 plan can launch, for sm_120, with no GPU.

Every config the sm_120 plan can pick (``tiles.SM120_CONFIGS``: ``_split_kernel_sm120``, with and without
valid lengths) and the combine kernel at every split-count padding the split rule can give (with and
without a sink) is compiled by this interpreter's Triton for ``GPUTarget('cuda', 120, 32)`` through
``tools.kernel_source.resources`` (the grid step's compile: Triton's own binder and ptxas, cross-checked
against the cubin's resource table); registers, spills, stack and shared memory of each, and the verdict
(0 spill bytes, no stack, within 101,376 B of shared memory), are written as JSON with the Triton version
and the hash of the kernel sources compiled, so that a test can tell a stale result from a current one.

    python -m scripts.sm120_splitk_compile OUT.json            # the sm_120 plan's kernels
    python -m scripts.sm120_splitk_compile --compare OUT.json  # the same kernels for sm_90 and sm_120, SASS mix
    python -m scripts.sm120_splitk_compile --loops OUT.json    # ... and the opcodes of each loop of their SASS

``--compare`` builds each sm_120 config for both sm_120 and sm_90, the sm_90 build with Triton's wgmma
lowering off (``DISABLE_MMA_V3=1``, in a child process: the variable is read by Triton's compiler), as
the H200 proxy runs them: registers, spills, shared memory and the SASS instruction mix (cuobjdump) of
each, since Triton's pass pipeline differs by architecture and equal MMA counts alone would not make the
proxy faithful.

Also recorded, as information: the plain-Triton configs of the other plans (SMALL, MEDIUM, LARGE), which
spill on sm_120, and the two Gluon Hopper kernels, which do not build for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from tools.kernel_source.resources import compile_resources  # noqa: E402
from tools.kernels.splitk import tiles  # noqa: E402

SOURCE = REPO / "tools" / "kernels" / "sparse_mla_decode.py"
SM120_SOURCE = REPO / "tools" / "kernels" / "splitk" / "sm120.py"
SMEM_OPTIN_SM120 = 101376  # bytes a block may opt in to on sm_120 (the grid step's arch limits)


def sources_hash() -> str:
    """sha256 of the kernel sources the compile reads (the sm_120 kernel's file and the combine's)."""
    digest = hashlib.sha256()
    for path in (SM120_SOURCE, SOURCE):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _t(name, dtype):
    return {"name": name, "kind": "tensor", "dtype": dtype}


def _i(name, value=None):
    return {"name": name, "kind": "int", "value": value}


def _c(name, value):
    return {"name": name, "kind": "constexpr", "value": value}


def split_args(cfg: tiles.KernelConfig, has_len: bool) -> list[dict]:
    """The split kernel's arguments as ``_launch_splits`` passes them (64 heads, page 64)."""
    args = [_t("q_ptr", "bfloat16"), _t("cache_fp8_ptr", "float8_e4m3fn"), _t("cache_u8_ptr", "uint8"), _t("cache_bf16_ptr", "bfloat16"),
            _t("indices_ptr", "int32"), _t("topk_len_ptr", "int32"), _t("o_part_ptr", "float32"), _t("lse_part_ptr", "float32")]
    if not (cfg.d_halves or cfg.sm120):
        args += [_t("p_scratch_base", "bfloat16" if cfg.p_scratch else "float32"), _t("alpha_scratch_base", "float32")]
    args += [{"name": "qk_scale_log2", "kind": "float", "value": 0.0638}, _i("page_size", 64), _i("page_bytes", 64 * 584),
             _i("scale_section_off", 64 * 576), _i("heads", 64), _i("topk"), _i("num_splits"), _i("split_offset"),
             _i("total_splits"), _i("stride_qb", 64 * 512), _i("stride_qh", 512), _i("stride_ib")]
    args += [_c("HAS_TOPK_LEN", has_len), _c("BLOCK_H", cfg.block_h), _c("BLOCK_T", cfg.block_t)]
    if cfg.sm120:
        args += [_c("INTERPRETER", False), _c("PREFETCH", cfg.prefetch),
                 _c("FLAT_S", cfg.flat_s), _c("HALVES", cfg.pv_halves), _c("DV_SPLIT", cfg.d_halves)]
    elif cfg.d_halves:
        args += [_c("INTERPRETER", False)]
    else:
        args += [_c("P_SCRATCH", cfg.p_scratch), _c("INTERPRETER", False), _c("ABLATE", 0)]
    return args


def combine_args(splits_pad: int, has_sink: bool) -> list[dict]:
    block_d = max(64, min(512, 4096 // splits_pad))
    return [_t("o_part_ptr", "float32"), _t("lse_part_ptr", "float32"), _t("sink_ptr", "float32"), _t("out_ptr", "bfloat16"),
            _t("lse_ptr", "float32"), _i("heads", 64), _i("total_splits"), _i("stride_ob", 64 * 512), _i("stride_oh", 512),
            _c("HAS_SINK", has_sink), _c("SPLITS_PAD", splits_pad), _c("BLOCK_D", block_d)]


def split_request(arch: str, cfg: tiles.KernelConfig, has_len: bool, sass_mix: bool = False) -> dict:
    kernel = "_split_kernel_sm120" if cfg.sm120 else "_split_dhalf_kernel" if cfg.d_halves else "_split_kernel"
    return {"arch": arch, "kernel_file": str(SM120_SOURCE if cfg.sm120 else SOURCE), "kernel_name": kernel,
            "args": split_args(cfg, has_len), "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
            "sass_mix": sass_mix}  # fmt: skip


def plan_requests(arch: str) -> list[tuple[str, dict]]:
    """Every kernel the sm_120 plan can launch: its split configs and the combine."""
    out = []
    for cfg in tiles.SM120_CONFIGS:
        for has_len in (False, True):
            out.append((f"{tiles.config_name(cfg)} _split_kernel_sm120 HAS_TOPK_LEN={has_len}", split_request(arch, cfg, has_len)))
    # total splits of both caches: up to 2 * MAX_SPLITS, padded to a power of two
    for splits_pad in (1, 2, 4, 8, 16, 32, 64, 128):
        for has_sink in (False, True):
            out.append((f"combine SPLITS_PAD={splits_pad} HAS_SINK={has_sink}",
                        {"arch": arch, "kernel_file": str(SOURCE), "kernel_name": "_combine_kernel",
                         "args": combine_args(splits_pad, has_sink), "num_warps": 4}))
    return out


def clean(usage: dict) -> bool:
    """0 spill bytes, no stack frame, within sm_120's shared memory a block."""
    return bool(usage["ok"] and not usage["spill_stores"] and not usage["spill_loads"] and not usage["stack_frame"]
                and usage["shared_per_block"] <= SMEM_OPTIN_SM120)  # fmt: skip


def _line(label: str, usage: dict) -> str:
    return (f"{label:48s} ok={usage['ok']} regs={usage['registers']} spill_st={usage['spill_stores']} "
            f"spill_ld={usage['spill_loads']} stack={usage['stack_frame']} smem={usage['shared_per_block']} "
            f"{(usage['error'] or '')[:200]}")  # fmt: skip


def compile_plan(arch: str = "sm_120") -> dict:
    import triton

    results = []
    for label, request in plan_requests(arch):
        usage = compile_resources(request)
        usage["label"] = label
        results.append(usage)
        print(_line(label, usage), flush=True)
    others = []
    for name in ("small", "medium", "large"):  # the other plans' plain kernels, for information
        usage = compile_resources(split_request(arch, tiles.NAMED[name], True))
        usage["label"] = f"{name} (not in the sm_120 plan) HAS_TOPK_LEN=True"
        others.append(usage)
        print(_line(usage["label"], usage), flush=True)
    ok = all(clean(r) for r in results)
    print(f"every kernel of the sm_120 plan compiles without spills, within {SMEM_OPTIN_SM120} B: {ok}")
    return {"arch": arch, "triton": triton.__version__, "sources_sha256": sources_hash(),
            "configs": {tiles.config_name(c): vars(c) for c in tiles.SM120_CONFIGS},
            "all_compile_without_spills_within_smem": ok, "smem_optin_bytes": SMEM_OPTIN_SM120,
            "results": results, "other_plans": others, "gluon_hopper_kernels": gluon_attempts(arch)}  # fmt: skip


def compare_archs() -> dict:
    """Each sm_120 config built for sm_120 and for sm_90 with MMA v3 off (the H200 proxy's build), side by side."""
    import triton

    rows = []
    for cfg in tiles.SM120_CONFIGS:
        name = tiles.config_name(cfg)
        sm120 = compile_resources(split_request("sm_120", cfg, True, sass_mix=True))
        proxy = _child_compile(split_request("sm_90", cfg, True, sass_mix=True), {"DISABLE_MMA_V3": "1"})
        hopper = compile_resources(split_request("sm_90", cfg, True, sass_mix=True))
        rows.append({"config": name, "sm_120": sm120, "sm_90_mma_v2": proxy, "sm_90_default": hopper})
        for label, usage in (("sm_120", sm120), ("sm_90 MMA v3 off", proxy), ("sm_90 default", hopper)):
            mix = usage.get("sass_mix") or {}
            print(f"{name:13s} {label:17s} regs={usage['registers']} spill={usage['spill_stores']}/{usage['spill_loads']} "
                  f"smem={usage['shared_per_block']} HMMA={mix.get('HMMA', 0)} HGMMA={mix.get('HGMMA', 0)} "
                  f"LDS={mix.get('LDS', 0)} LDSM={mix.get('LDSM', 0)} LDG={mix.get('LDG', 0)} "
                  f"instructions={sum(mix.values())}", flush=True)  # fmt: skip
    return {"triton": triton.__version__, "sources_sha256": sources_hash(), "rows": rows}


LOOP_OPS = ("LDG", "LDGSTS", "LDGDEPBAR", "DEPBAR", "STS", "LDS", "LDSM", "BAR", "HMMA", "F2FP", "HMUL2", "FMUL",
            "FFMA", "MUFU", "SHFL", "LDL", "STL")  # fmt: skip


def loop_structure() -> dict:
    """The loops of each sm_120 config's SASS, built for sm_120 and for sm_90 with MMA v3 off (the proxy): per
    loop its instructions and the opcodes that tell where a tile's time can go (global loads and their waits,
    shared-memory traffic and barriers, mma.sync, dequantization, spills). The innermost loop is S's group loop
    (8 trips a tile), the longest the tile loop."""
    import triton

    rows = []
    for cfg in tiles.SM120_CONFIGS:
        name = tiles.config_name(cfg)
        request = {**split_request("sm_120", cfg, False), "sass_loops": True}
        builds = {"sm_120": compile_resources(request),
                  "sm_90_mma_v2": _child_compile({**request, "arch": "sm_90"}, {"DISABLE_MMA_V3": "1"})}  # fmt: skip
        row = {"config": name}
        for label, usage in builds.items():
            loops = [{**loop, "mix": {op: loop["mix"].get(op, 0) for op in LOOP_OPS}} for loop in usage.get("sass_loops", [])]
            row[label] = {"registers": usage["registers"], "spill_stores": usage["spill_stores"],
                          "shared_per_block": usage["shared_per_block"], "loops": loops}  # fmt: skip
            for loop in loops:
                print(f"{name:13s} {label:13s} loop {loop['start']}-{loop['end']} {loop['instructions']:5d} instr "
                      + " ".join(f"{op}={n}" for op, n in loop["mix"].items() if n), flush=True)  # fmt: skip
        rows.append(row)
    return {"triton": triton.__version__, "sources_sha256": sources_hash(), "rows": rows}


def _child_compile(request: dict, env: dict) -> dict:
    """``compile_resources`` in a child interpreter with ``env`` added (a variable Triton's compiler reads)."""
    proc = subprocess.run([sys.executable, "-m", "tools.kernel_source.resources"], input=json.dumps(request),
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=900)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"the child compile failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


GLUON_LABELS = ("_split_kernel_ws (LARGE_WS)", "_split_kernel_sm90 (LARGE_SM90)")


def gluon_attempts(arch: str) -> list[dict]:
    """The Hopper kernels (Gluon) compiled for ``arch``, each in a child process (a backend that cannot
    lower an op aborts the process: LLVM's "Cannot select"): whether Triton builds them, and its error or
    the child's last output if not."""
    out = []
    for i, label in enumerate(GLUON_LABELS):
        proc = subprocess.run([sys.executable, "-m", "scripts.sm120_splitk_compile", "--gluon-one", str(i), arch],
                              capture_output=True, text=True, cwd=REPO, timeout=900)  # fmt: skip
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            result = {"label": label, "ok": False, "returncode": proc.returncode,
                      "error": (proc.stderr.strip() or proc.stdout.strip())[-3000:]}  # fmt: skip
        out.append(result)
        print(f"{label:48s} ok={result['ok']} {result.get('error', '')[-300:]}", flush=True)
    return out


def gluon_one(index: int, arch: str) -> dict:
    """One Hopper kernel compiled for ``arch`` in this process."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from tools.kernels.splitk import sm90, sm90_ws

    cc = int(arch.removeprefix("sm_"))
    pointers = {"q_ptr": "*bf16", "cache_fp8_ptr": "*fp8e4nv", "cache_u8_ptr": "*u8", "cache_bf16_ptr": "*bf16",
                "indices_ptr": "*i32", "topk_len_ptr": "*i32", "o_part_ptr": "*fp32", "lse_part_ptr": "*fp32",
                "x_cache_u8_ptr": "*u8", "x_cache_bf16_ptr": "*bf16", "x_indices_ptr": "*i32", "x_topk_len_ptr": "*i32"}
    ws = tiles.LARGE_WS
    kernels = [
        ("_split_kernel_ws (LARGE_WS)", sm90_ws._split_kernel_ws,
         {"HAS_TOPK_LEN": True, "PAGE_SIZE": 64, "BLOCK_T": ws.block_t, "STAGES": ws.num_stages,
          "CONSUMER_REGS": ws.ws_regs[0], "PRODUCER_REGS": ws.ws_regs[1], "BATCH": ws.ws_batch, "ABLATE": 0,
          "X_PAGE_SIZE": 64, "HAS_EXTRA": False, "HAS_X_TOPK_LEN": False},
         {"num_warps": ws.num_warps, "maxnreg": tiles.WS_MAXNREG}),
        ("_split_kernel_sm90 (LARGE_SM90)", sm90._split_kernel_sm90,
         {"HAS_TOPK_LEN": True, "BLOCK_T": tiles.LARGE_SM90.block_t, "DEQUANT_ROWS": tiles.LARGE_SM90.dequant_rows},
         {"num_warps": tiles.LARGE_SM90.num_warps}),
    ]  # fmt: skip
    label, fn, constexprs, options = kernels[index]
    signature, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            consts[(i,)] = constexprs[name]
        else:
            signature[name] = pointers.get(name, "fp32" if name == "qk_scale_log2" else "i32")
            if name in pointers or name in ("page_bytes", "scale_section_off", "stride_qb", "stride_qh"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    try:
        kernel = triton.compile(GluonASTSource(fn, signature, consts, attrs), target=GPUTarget("cuda", cc, 32),
                                options=options)  # fmt: skip
        return {"label": label, "ok": True, "shared": int(kernel.metadata.shared)}
    except Exception as exc:  # Triton's refusal is the result
        return {"label": label, "ok": False, "error": f"{type(exc).__name__}: {str(exc).strip()[:3000]}"}


def main() -> int:
    if sys.argv[1] == "--gluon-one":
        print(json.dumps(gluon_one(int(sys.argv[2]), sys.argv[3])))
        return 0
    if sys.argv[1] == "--loops":
        Path(sys.argv[2]).write_text(json.dumps(loop_structure(), indent=1, default=str))
        return 0
    if sys.argv[1] == "--compare":
        Path(sys.argv[2]).write_text(json.dumps(compare_archs(), indent=1, default=str))
        return 0
    result = compile_plan(sys.argv[2] if len(sys.argv) > 2 else "sm_120")
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["all_compile_without_spills_within_smem"] else 1


if __name__ == "__main__":
    sys.exit(main())
