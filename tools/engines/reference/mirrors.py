"""Which SGLang function each reference-engine operation stands for, where SGLang does it as one fused op.

The reference engine runs DeepSeek-V4-Flash's decode in plain PyTorch (model.py), one small kernel per
torch op; SGLang runs the same operations through fused ops. This table names, for each operation the
``--by-op`` attribution can name (a function of model.py or tools/kernels/dsv4_cache.py), the SGLang
symbol that does that operation's work: a path under the sglang package and a qualified name. It holds
no line numbers: tools/gates/fused.py finds each symbol's definition, its call sites and the switches
around them in a source tree by parsing it, and a test runs that scan on the installed sglang.

What each symbol does is said beside it, as the SGLang source documents it (its docstring or name); the
launch count of the fused op is not claimed here: only that SGLang calls one op where the reference runs
the sequence the trace shows.
"""

from __future__ import annotations

from typing import NamedTuple

SGLANG_VERSION = "0.5.23"  # the version the table was written against (tools/kernels/upstream.py pins it too)


class Mirror(NamedTuple):
    operation: str  # the reference engine's function (the --by-op operation name)
    path: str  # file under the sglang package
    symbol: str  # qualified name in that file: "function" or "Class.method"
    does: str  # what the SGLang op does of the operation's work


MIRRORS: tuple[Mirror, ...] = (
    Mirror("rms_norm", "srt/layers/layernorm.py", "RMSNorm.forward_cuda",
           "RMSNorm on CUDA: one norm kernel (a fused add+RMSNorm when a residual is passed)"),
    Mirror("rms_norm", "kernels/ops/attention/dsv4/norm_rope.py", "fused_q_norm_rope",
           "DSV4's per-head q RMSNorm and RoPE in one op"),
    Mirror("apply_rope", "kernels/ops/attention/dsv4/norm_rope.py", "fused_q_norm_rope",
           "DSV4's per-head q RMSNorm and RoPE in one op"),
    Mirror("apply_rope", "kernels/ops/attention/dsv4/norm_rope.py", "fused_norm_rope_inplace",
           "DSV4's kv RMSNorm and RoPE in one in-place op"),
    Mirror("quantize_tokens", "kernels/ops/attention/dsv4/attn.py", "fused_store_cache",
           "DSV4's FP8 quantization of new KV tokens and their store into the paged cache in one op"),
    Mirror("write_tokens", "kernels/ops/attention/dsv4/attn.py", "fused_store_cache",
           "DSV4's FP8 quantization of new KV tokens and their store into the paged cache in one op"),
    Mirror("select_experts", "kernels/ops/moe/moe_fused_gate.py", "moe_fused_gate",
           "the MoE router's scoring, bias, top-k and weight normalization in one op"),
    Mirror("grouped_experts", "srt/layers/moe/moe_runner/triton.py", "fused_experts_none_to_triton",
           "the routed experts' gate/up GEMM, activation and down GEMM through SGLang's fused MoE (Triton runner)"),
)


def mirrors_of(operation: str) -> list[Mirror]:
    return [m for m in MIRRORS if m.operation == operation]


SCAN_FILE = "mirrors_sglang.json"  # python -m tools.gates.fused --write tools/engines/reference/mirrors_sglang.json


def recorded_scan() -> dict:
    """tools/gates/fused.py's scan of the sglang this table was written for, as written beside it (a test
    scans the installed sglang and holds this file to it)."""
    import json
    from pathlib import Path

    return json.loads((Path(__file__).with_name(SCAN_FILE)).read_text())
