"""Ahead-of-time compile of the split-K decode's plain Triton kernels for sm_120, with no GPU.

Every configuration the wrapper can launch off Hopper (SMALL and LARGE through ``_split_kernel``,
MEDIUM through ``_split_dhalf_kernel``, with and without valid lengths; the combine kernel at every
split-count padding the split rule can give, with and without a sink) is compiled by this machine's
Triton for ``GPUTarget('cuda', 120, 32)`` through ``tools.kernel_source.resources`` (the grid step's
compile: Triton's own binder and ptxas, cross-checked against the cubin's resource table); the
registers, spills, stack and shared memory of each are printed and written as JSON.

    python scripts/sm120_splitk_compile.py OUT.json [ARCH]

Also compiled, as information (they do not decide the verdict): ALTERNATIVES, other tile shapes of the
same kernels, for a per-architecture config; and the two Gluon Hopper kernels for the same target, to
record what the Hopper path needs that the target lacks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.kernel_source.resources import compile_resources  # noqa: E402
from tools.kernels.splitk import tiles  # noqa: E402

SOURCE = REPO / "tools" / "kernels" / "sparse_mla_decode.py"
SMEM_OPTIN_SM120 = 101376  # bytes a block may opt in to on sm_120 (the grid step's arch limits)


def _t(name, dtype):
    return {"name": name, "kind": "tensor", "dtype": dtype}


def _i(name, value=None):
    return {"name": name, "kind": "int", "value": value}


def _c(name, value):
    return {"name": name, "kind": "constexpr", "value": value}


def split_args(cfg: tiles.KernelConfig, has_len: bool) -> list[dict]:
    args = [_t("q_ptr", "bfloat16"), _t("cache_fp8_ptr", "float8_e4m3fn"), _t("cache_u8_ptr", "uint8"), _t("cache_bf16_ptr", "bfloat16"),
            _t("indices_ptr", "int32"), _t("topk_len_ptr", "int32"), _t("o_part_ptr", "float32"), _t("lse_part_ptr", "float32")]
    if not cfg.d_halves:
        args += [_t("p_scratch_base", "bfloat16" if cfg.p_scratch else "float32"), _t("alpha_scratch_base", "float32")]
    args += [{"name": "qk_scale_log2", "kind": "float", "value": 0.0638}, _i("page_size", 64), _i("page_bytes", 64 * 584),
             _i("scale_section_off", 64 * 576), _i("heads", 64), _i("topk"), _i("num_splits"), _i("split_offset"),
             _i("total_splits"), _i("stride_qb", 64 * 512), _i("stride_qh", 512), _i("stride_ib")]
    args += [_c("HAS_TOPK_LEN", has_len), _c("BLOCK_H", cfg.block_h), _c("BLOCK_T", cfg.block_t)]
    if cfg.d_halves:
        args += [_c("INTERPRETER", False)]
    else:
        args += [_c("P_SCRATCH", cfg.p_scratch), _c("INTERPRETER", False), _c("ABLATE", 0)]
    return args


def combine_args(splits_pad: int, has_sink: bool) -> list[dict]:
    block_d = max(64, min(512, 4096 // splits_pad))
    return [_t("o_part_ptr", "float32"), _t("lse_part_ptr", "float32"), _t("sink_ptr", "float32"), _t("out_ptr", "bfloat16"),
            _t("lse_ptr", "float32"), _i("heads", 64), _i("total_splits"), _i("stride_ob", 64 * 512), _i("stride_oh", 512),
            _c("HAS_SINK", has_sink), _c("SPLITS_PAD", splits_pad), _c("BLOCK_D", block_d)]


# Other tile shapes of the plain kernels (KernelConfig fields as in benchmarks/sparse_mla_decode.py's sweep)
ALTERNATIVES = {
    "small_s1": tiles.KernelConfig(16, 32, 4, 1, programs_per_sm=2),
    "small_t16_s2": tiles.KernelConfig(16, 16, 4, 2, programs_per_sm=2),
    "medium_s1": tiles.KernelConfig(64, 32, 4, 1, programs_per_sm=1, d_halves=True),
    "medium_t16_s1": tiles.KernelConfig(64, 16, 4, 1, programs_per_sm=1, d_halves=True),
    "medium_t16_s2": tiles.KernelConfig(64, 16, 4, 2, programs_per_sm=1, d_halves=True),
    "large_t32_scr": tiles.KernelConfig(64, 32, 8, 1, programs_per_sm=1, p_scratch=True),
    "h32_t32_w4_s1": tiles.KernelConfig(32, 32, 4, 1, programs_per_sm=1),
}


def _split_request(arch: str, cfg: tiles.KernelConfig, has_len: bool) -> dict:
    kernel = "_split_dhalf_kernel" if cfg.d_halves else "_split_kernel"
    return {"arch": arch, "kernel_file": str(SOURCE), "kernel_name": kernel, "args": split_args(cfg, has_len),
            "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def gluon_attempts(arch: str) -> list[dict]:
    """The Hopper kernels (Gluon) compiled for ``arch``, each in a child process (a backend that cannot
    lower an op aborts the process: LLVM's "Cannot select"): whether Triton builds them, and its error or
    the child's last output if not."""
    out = []
    for i, label in enumerate(GLUON_LABELS):
        proc = subprocess.run([sys.executable, __file__, "--gluon-one", str(i), arch], capture_output=True, text=True,
                              timeout=900)  # fmt: skip
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            result = {"label": label, "ok": False, "returncode": proc.returncode,
                      "error": (proc.stderr.strip() or proc.stdout.strip())[-3000:]}  # fmt: skip
        out.append(result)
        print(f"{label:45s} ok={result['ok']} {result.get('error', '')[-300:]}", flush=True)
    return out


GLUON_LABELS = ("_split_kernel_ws (LARGE_WS)", "_split_kernel_sm90 (LARGE_SM90)")


def gluon_one(index: int, arch: str) -> dict:
    """One Hopper kernel compiled for ``arch`` in this process."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from tools.kernels.splitk import sm90, sm90_ws

    cc = int(arch.removeprefix("sm_"))
    pointers = {"q_ptr": "*bf16", "cache_fp8_ptr": "*fp8e4nv", "cache_u8_ptr": "*u8", "cache_bf16_ptr": "*bf16",
                "indices_ptr": "*i32", "topk_len_ptr": "*i32", "o_part_ptr": "*fp32", "lse_part_ptr": "*fp32"}
    ws = tiles.LARGE_WS
    kernels = [
        ("_split_kernel_ws (LARGE_WS)", sm90_ws._split_kernel_ws,
         {"HAS_TOPK_LEN": True, "PAGE_SIZE": 64, "BLOCK_T": ws.block_t, "STAGES": ws.num_stages,
          "CONSUMER_REGS": ws.ws_regs[0], "PRODUCER_REGS": ws.ws_regs[1], "BATCH": ws.ws_batch, "ABLATE": 0},
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


def requests(arch: str) -> list[tuple[str, dict]]:
    out = []
    for name in ("small", "medium", "large"):
        cfg = tiles.NAMED[name]
        kernel = "_split_dhalf_kernel" if cfg.d_halves else "_split_kernel"
        for has_len in (False, True):
            out.append((f"{name} {kernel} HAS_TOPK_LEN={has_len}", _split_request(arch, cfg, has_len)))
    # total splits of both caches: up to 2 * MAX_SPLITS, padded to a power of two
    for splits_pad in (1, 2, 4, 8, 16, 32, 64, 128):
        for has_sink in (False, True):
            out.append((f"combine SPLITS_PAD={splits_pad} HAS_SINK={has_sink}",
                        {"arch": arch, "kernel_file": str(SOURCE), "kernel_name": "_combine_kernel",
                         "args": combine_args(splits_pad, has_sink), "num_warps": 4}))
    return out


def main() -> int:
    if sys.argv[1] == "--gluon-one":
        print(json.dumps(gluon_one(int(sys.argv[2]), sys.argv[3])))
        return 0
    out_path = Path(sys.argv[1])
    arch = sys.argv[2] if len(sys.argv) > 2 else "sm_120"
    results = []
    for label, request in requests(arch):
        usage = compile_resources(request)
        usage["label"] = label
        results.append(usage)
        print(f"{label:45s} ok={usage['ok']} regs={usage['registers']} spill_st={usage['spill_stores']} "
              f"spill_ld={usage['spill_loads']} stack={usage['stack_frame']} smem={usage['shared_per_block']} "
              f"{(usage['error'] or '')[:200]}", flush=True)  # fmt: skip
    ok = all(r["ok"] and not r["spill_stores"] and not r["spill_loads"] and not r["stack_frame"]
             and r["shared_per_block"] <= SMEM_OPTIN_SM120 for r in results)  # fmt: skip
    alternatives = []
    for name, cfg in ALTERNATIVES.items():
        usage = compile_resources(_split_request(arch, cfg, True))
        usage["label"] = f"{name} {usage['num_warps']}w/{usage['num_stages']}s HAS_TOPK_LEN=True"
        alternatives.append(usage)
        print(f"alt {usage['label']:41s} ok={usage['ok']} regs={usage['registers']} spill_st={usage['spill_stores']} "
              f"spill_ld={usage['spill_loads']} smem={usage['shared_per_block']}", flush=True)  # fmt: skip
    import triton

    out_path.write_text(json.dumps({"arch": arch, "triton": triton.__version__,
                                    "all_compile_without_spills_within_smem": ok, "smem_optin_bytes": SMEM_OPTIN_SM120,
                                    "results": results, "alternatives": alternatives, "alternative_configs":
                                    {k: v.__dict__ for k, v in ALTERNATIVES.items()},
                                    "gluon_hopper_kernels": gluon_attempts(arch)}, indent=1, default=str))  # fmt: skip
    print(f"all compile without spills, within {SMEM_OPTIN_SM120} bytes of shared memory: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
