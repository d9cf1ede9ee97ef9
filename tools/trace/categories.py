"""Kernel categories from name patterns: one ordered table, first match wins, the rest is "other".

The table is data, not code: ``summarize(..., categories=[(category, regex), ...])`` replaces it and
``python -m tools.trace --categories FILE.json`` reads one (a JSON list of ``[category, regex]``).
Patterns are searched case-insensitively in the kernel's name. Memory copies and sets are matched by
the names the profiler gives their device activity ("Memcpy HtoD (Pageable -> Device)", "Memset
(Device)"); on CPU-only traces the names are aten ops and record_function ranges, hence the
``aten::`` entries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

OTHER = "other"

DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("memory", r"^(Memcpy|Memset)\b|^aten::(copy_|_to_copy|to|clone|contiguous|fill_|zero_)$"),
    (
        "communication",
        r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|broadcast|"
        r"cross_device_reduce|custom_?ar|deep_?ep|gloo:|c10d::|record_param_comms",
    ),
    (
        "attention",
        # FlashInfer's RMSNorm (flashinfer::norm::) is a norm, not attention
        r"attn|attention|flash(?!infer::norm)|fmha|\bmha|mla|sdpa|scaled_dot_product|sparse_decode|paged|"
        r"_fwd_(grouped_)?kernel_stage|merge_state|decode_kernel|"
        # the split-K rewrite's kernels (tools/kernels/sparse_mla_decode.py), by their exact names
        r"^_split_(dhalf_)?kernel(_ws|_sm90|_sm120)?$|^_combine_kernel$",
    ),
    (
        "gemm/moe",
        r"gemm|gemv|matmul|cutlass|cublas|nvjet|xmma|_mm\b|\bmm_|moe|expert|"
        r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$",
    ),
    (
        "elementwise/reduce",
        r"elementwise|reduce|norm|softmax|silu|gelu|relu|act_and_mul|rotary|rope|topk|sort|"
        r"index|gather|scatter|(^|_|::)cat(_|$|\b)|catarray|fill|copy|where|cumsum|argmax|sample|"
        r"triton_(poi|red|per)_|"
        # DeepSeek-V4's hyper-connection mixing (TileLang's mhc_pre/mhc_post, the _hc_head kernel) and the
        # activations' FP8 group quantization, as the real sglang 0.5.17 server's decode trace names them
        r"(^|_)mhc_|^_hc_head_kernel$|per_token_group_quant|"
        r"^aten::(add|sub|mul|div|neg|exp|log|pow|sqrt|rsqrt|abs|sum|mean|amax|max|min|sigmoid|tanh|clamp\w*)_?$",
    ),
)


def validate_rules(rules: Sequence[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """Check a category table (pairs of category name and regex); raise ValueError on a bad one."""
    checked = []
    for entry in rules:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
            raise ValueError(f"a category rule is a [category, regex] pair of strings, got {entry!r}")
        category, pattern = entry
        if not category:
            raise ValueError("a category name is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"category {category!r}: bad regex {pattern!r}: {exc}") from exc
        checked.append((category, pattern))
    return tuple(checked)


def categorizer(rules: Sequence[tuple[str, str]] = DEFAULT_RULES):
    """A function name -> category for this table (memoised per name; build one per analysis)."""
    compiled = [(category, re.compile(pattern, re.IGNORECASE)) for category, pattern in rules]
    memo: dict[str, str] = {}

    def categorize(name: str) -> str:
        found = memo.get(name)
        if found is None:
            found = next((category for category, regex in compiled if regex.search(name)), OTHER)
            memo[name] = found
        return found

    return categorize


def category_names(rules: Sequence[tuple[str, str]]) -> list[str]:
    """The categories a table can produce, in table order, "other" last."""
    names = []
    for category, _ in rules:
        if category not in names:
            names.append(category)
    if OTHER not in names:
        names.append(OTHER)
    return names
