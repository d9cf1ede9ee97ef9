"""What the traces cannot hold about a fusion candidate: its intermediates' bytes and the fused op the engine has.

- Intermediates (modelled): the trace holds no tensor sizes, so each operation's intermediate takes the
  shape the reference engine's function hands between its kernels (tools/engines/reference/model.py,
  tools/kernels/dsv4_cache.py), from the model's shapes the run recorded; where a function is called on
  several shapes, the widest (a bound). An operation not in the table takes the widest of the hidden,
  projection, head and expert widths (an assumption, said in its row).
- Known fused ops (source-backed): for the operations tools/engines/reference/mirrors.py maps to an SGLang
  symbol, the scan of that symbol in SGLang's source (tools/gates/fused.py, its result on the version the
  table was written for, tools/engines/reference/mirrors_sglang.json): where it is defined, where the
  engine calls it and the switches around those calls; and the gates scan's verdicts for the declared GPU
  on the gates inside it or around its calls. Named only when the run's engine source is that version.
"""

from __future__ import annotations

from collections.abc import Callable

from tools.engines.reference.mirrors import recorded_scan
from tools.kernels.dsv4_layout import ROPE_DIM

FLOAT32, BF16 = 4, 2


def _dim(shapes: dict, *keys: str) -> int | None:
    values = [shapes.get(k) for k in keys]
    if not all(isinstance(v, int | float) and v > 0 for v in values):
        return None
    out = 1
    for v in values:
        out *= int(v)
    return out


def _indexer_scores(shapes: dict) -> int | None:
    """The lightning indexer's scores a token, [index_heads, compressed tokens] (model.py's indexer einsum): the
    compressed tokens are the context over the smallest compress ratio the run's layers have."""
    ratios = [r for r in shapes.get("layer_compress_ratios") or [] if isinstance(r, int) and r > 1]
    heads, context = _dim(shapes, "index_heads"), _dim(shapes, "context_len")
    return heads * (context // min(ratios)) if ratios and heads and context else None


# operation -> (dtype bytes, [(label, elements a token from the shapes)]): its widest call's intermediate
_SHAPES: dict[str, tuple[int, str, list[tuple[str, Callable[[dict], int | None]]]]] = {
    "rms_norm": (FLOAT32, "float32 (x.float() and its squares, mean, rsqrt products)", [
        ("hidden", lambda s: _dim(s, "hidden")), ("q_lora_rank", lambda s: _dim(s, "q_lora_rank")),
        ("heads_per_rank x head_dim (the per-head q norm)", lambda s: _dim(s, "heads_per_rank", "head_dim")),
        ("head_dim (the kv norm)", lambda s: _dim(s, "head_dim"))]),
    "apply_rope": (FLOAT32, "float32 (the rotated pairs)", [
        (f"heads_per_rank x {ROPE_DIM} rope dims (q)", lambda s: _dim(s, "heads_per_rank") and s["heads_per_rank"] * ROPE_DIM),
        (f"index_heads x {ROPE_DIM} rope dims (the indexer's q)", lambda s: _dim(s, "index_heads") and s["index_heads"] * ROPE_DIM),
        (f"{ROPE_DIM} rope dims (kv)", lambda s: ROPE_DIM)]),
    "quantize_tokens": (FLOAT32, "float32 (kv.float() and its scaled tiles)", [("head_dim (one kv token)", lambda s: _dim(s, "head_dim"))]),
    "write_tokens": (FLOAT32, "float32 (the quantized token's parts, as quantize_tokens)", [("head_dim (one kv token)", lambda s: _dim(s, "head_dim"))]),
    "indexer_topk": (FLOAT32, "float32 (the indexer's scores, relu'd, then weighted)", [
        ("index_heads x compressed tokens (the indexer's scores)", _indexer_scores)]),
    "select_experts": (FLOAT32, "float32 (router scores)", [("experts_run (router scores)", lambda s: _dim(s, "experts_run"))]),
    "grouped_experts": (BF16, "bf16 (rows sorted by expert, gate/up, activation)", [
        ("experts_per_token x hidden (the sorted rows)", lambda s: _dim(s, "experts_per_token", "hidden")),
        ("experts_per_token x 2 x moe_intermediate_per_rank (gate/up)",
         lambda s: _dim(s, "experts_per_token", "moe_intermediate_per_rank") and 2 * _dim(s, "experts_per_token", "moe_intermediate_per_rank"))]),
}


def widest_activation(shapes: dict | None) -> int | None:
    """Elements a token of the widest activation a decode step hands between kernels, from the model's shapes."""
    if not shapes:
        return None
    widths = [_dim(shapes, "hidden"), _dim(shapes, "q_lora_rank"), _dim(shapes, "o_lora_rank"),
              _dim(shapes, "kernel_heads", "head_dim"), _dim(shapes, "index_heads", "index_head_dim")]
    moe = _dim(shapes, "experts_per_token", "moe_intermediate_per_rank")
    widths.append(2 * moe if moe else None)
    widths = [w for w in widths if w]
    return max(widths) if widths else None


def intermediate_of(operation: str, shapes: dict | None, batch: int | None, rate_gb_s: float) -> tuple[float, str] | None:
    """(us to write and read once one intermediate of ``operation``, how it was modelled), or None without shapes."""
    if not shapes or not batch or rate_gb_s <= 0:
        return None
    if operation in _SHAPES:
        size, dtype, options = _SHAPES[operation]
        sized = [(label, width(shapes)) for label, width in options]
        sized = [(label, int(w)) for label, w in sized if w]
        if not sized:
            return None
        label, width = max(sized, key=lambda item: item[1])
        how = f"{batch} x {width} ({label}{', the widest it is called on' if len(sized) > 1 else ''}) {dtype}"
    else:
        width, size = widest_activation(shapes), FLOAT32
        if not width:
            return None
        how = (f"{batch} x {width} float32 (no shape for this operation: the widest of the hidden, projection, "
               "head and expert widths, an assumption, not its own)")
    nbytes = batch * width * size
    # the measured copy rate counts bytes read + written: one intermediate written and read once is 2x its bytes
    us = 2 * nbytes / (rate_gb_s * 1e9) * 1e6
    return us, f"{how} = {nbytes / 1e6:.3g} MB, written and read once at the measured copy rate {rate_gb_s:.4g} GB/s: {us:.3g} us each"


def _gated(entry: dict, failing: set[str]) -> list[str]:
    """The failing gates (file:line) inside the symbol's definition or on an if around one of its calls."""
    path, start = entry["at"].rsplit(":", 1)
    inside = sorted(f for f in failing if f.rsplit(":", 1)[0] == path and int(start) <= int(f.rsplit(":", 1)[1]) <= entry["end_line"])
    around = [f"{c['at'].rsplit(':', 1)[0]}:{g['line']}" for c in entry.get("calls", []) for g in c["guards"]]
    return list(dict.fromkeys(inside + [a for a in around if a in failing]))


def _describe(entry: dict, failing: set[str] | None, version: str) -> str:
    text = f"SGLang {version} `{entry['symbol']}` ({entry['at']}): {entry['does']}"
    calls = entry.get("calls", [])
    if calls:
        first = calls[0]
        guards = "; ".join(f"{g['branch']} {g['test']}" for g in first["guards"][:2]) or "no if around it in its caller"
        text += (f"; called at {len(calls) if entry['call_count'] <= len(calls) else entry['call_count']} site(s), "
                 f"first {first['at']} in {first['caller']} ({guards})")
    if entry.get("decorators"):
        text += f"; registered by {', '.join(entry['decorators'])}"
    text += (f"; switches read around its calls: {', '.join(entry['switches'])}" if entry.get("switches")
             else "; no environment variable or server argument read around its calls")
    if failing is not None:
        gated = _gated(entry, failing)
        text += (f"; the declared GPU fails the gates scan's gate(s) at {', '.join(gated[:3])}" if gated
                 else "; the gates scan has no gate the declared GPU fails inside it or around its calls")
    return text


def known_fused(engine_version: str | None, failing: list[str] | None) -> tuple[dict[str, list[dict]], str]:
    """operation -> the SGLang fused ops doing its work ({"short", "text"}); and where they come from."""
    scan = recorded_scan()
    version = scan["engine"].get("version")
    source = f"tools/gates/fused.py's scan of sglang {version} (tools/engines/reference/mirrors_sglang.json)"
    if engine_version != version:
        return {}, (f"no fused op named: the table's scan is of sglang {version}, the run's engine source is "
                    f"{engine_version or 'not recorded'}")
    failing_set = set(failing) if failing is not None else None
    out: dict[str, list[dict]] = {}
    for entry in scan["entries"]:
        if entry["found"]:
            gated = _gated(entry, failing_set) if failing_set is not None else []
            short = f"{entry['symbol']} ({entry['at']}){'; the declared GPU fails a gate of it' if gated else ''}"
            out.setdefault(entry["operation"], []).append({"short": short, "text": _describe(entry, failing_set, version)})
    return out, source
