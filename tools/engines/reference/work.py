"""The sparse MLA decode's work per decode step: bytes moved and FLOPs, call by call, from the shapes.

Pure arithmetic over ``RankShapes``, mirroring what ``model.make_layer_state`` builds and
``model.attention_block`` calls. The bench output reports it (``attention_work``) so that the agent
can set each profiled attention kernel's time against its floor (bytes / bandwidth, FLOPs / rate).

One attention call over one cache, for a batch B, kernel heads H (after padding) and T valid tokens a
request:

- bytes = B x T x 584 (every gathered cache token read once: 576 data bytes + 8 scale bytes)
          + B x H x 512 x 2 (q, bf16) + B x H x 512 x 2 (out, bf16);
  the index row (4 bytes a slot) and the LSE (4 bytes a head) are left out: under 1% of either term.
- FLOPs = 4 x B x H x T x 512 (QK and PV, a multiply-add each per dim).

It is the minimum any kernel doing this call must move and compute (a token read once, not once per
head), so a floor from it is a lower bound on the call's time.

Valid tokens a request at decode position P = context_len (``make_layer_state``): the window cache
min(window, P + 1); a c128 layer's compressed cache P // 128 (all its compressed tokens); a c4
layer's compressed cache min(top-k, P // 4) (the indexer's choice).
"""

from __future__ import annotations

from typing import Any

from tools.kernels.dsv4_cache import BYTES_PER_TOKEN, HEAD_DIM, decode_work

from .spec import RankShapes

# Backends whose attention call is exactly one kernel launch per cache, by the kernel's name:
# the upstream wrapper runs its kernel on the window cache, then on the compressed cache.
KERNEL_PER_CACHE = {"sglang-triton": "_tiled_sparse_decode_kernel"}


def cache_tokens(shapes: RankShapes, ratio: int) -> list[tuple[str, int]]:
    """(cache, valid tokens a request) of each attention call of a layer with compress ``ratio``."""
    position = shapes.context_len
    calls = [("window", min(shapes.sliding_window, position + 1))]
    if ratio == 128:
        calls.append(("c128", position // 128))
    elif ratio == 4:
        calls.append(("c4", min(shapes.topk, position // 4)))
    return calls


def attention_work(shapes: RankShapes, batch: int, attention: str) -> dict[str, Any]:
    """Per decode step of the layers run: every attention call (layer, cache, tokens, bytes, FLOPs),
    their totals, and per kernel name the backend launches for them (calls, bytes and FLOPs per step).
    ``kernels`` is empty, with a note saying why, for a backend not launched one kernel per cache."""
    heads = shapes.kernel_heads
    calls = []
    for layer, ratio in zip(shapes.layer_ids, shapes.layer_compress_ratios):
        for cache, tokens in cache_tokens(shapes, ratio):
            calls.append({"layer": layer, "cache": cache, "tokens": tokens, **decode_work(batch, heads, tokens)})
    per_step = {"calls": len(calls), "bytes": sum(c["bytes"] for c in calls), "flops": sum(c["flops"] for c in calls)}
    kernels, note = {}, ""
    name = KERNEL_PER_CACHE.get(attention)
    if name:
        kernels[name] = {"calls_per_step": per_step["calls"], "bytes_per_step": per_step["bytes"],
                         "flops_per_step": per_step["flops"]}
    else:
        note = f"the {attention} backend does not launch one known kernel per cache: no per-kernel work model"
    return {"batch": batch, "kernel_heads": heads, "bytes_per_token": BYTES_PER_TOKEN, "head_dim": HEAD_DIM,
            "calls": calls, "per_step": per_step, "kernels": kernels, "note": note}
