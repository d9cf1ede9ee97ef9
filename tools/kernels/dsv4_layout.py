"""DeepSeek-V4 paged FP8 KV cache's layout: sizes and the work of one sparse decode call over it, without torch
(the agent's modelling reads them; tools/kernels/dsv4_cache.py packs and reads the cache itself). The layout is
described there."""

from __future__ import annotations

import math

NOPE_DIM = 448
ROPE_DIM = 64
HEAD_DIM = NOPE_DIM + ROPE_DIM  # 512
TILE = 64  # nope dims sharing one scale
NUM_TILES = NOPE_DIM // TILE  # 7
DATA_STRIDE = NOPE_DIM + 2 * ROPE_DIM  # 576 bytes a token in the data section
SCALE_STRIDE = NUM_TILES + 1  # 8 bytes a token in the scale section
BYTES_PER_TOKEN = DATA_STRIDE + SCALE_STRIDE  # 584
FP8_MAX = 448.0


def decode_work(batch: int, heads: int, tokens: int) -> dict[str, int]:
    """Bytes and FLOPs of one sparse MLA decode call over this cache: ``batch`` rows, ``heads`` query
    heads, ``tokens`` valid top-k tokens a row. Bytes: every gathered token read once (584 bytes), plus
    q and out (bf16, [batch, heads, 512] each); FLOPs: QK and PV, a multiply-add each per dim. The
    minimum any kernel doing the call must move and compute."""
    return {
        "bytes": batch * tokens * BYTES_PER_TOKEN + 2 * batch * heads * HEAD_DIM * 2,
        "flops": 4 * batch * heads * tokens * HEAD_DIM,
    }


def page_bytes(page_size: int) -> int:
    """Byte stride between pages: the page's payload rounded up to a multiple of 576."""
    return math.ceil(page_size * BYTES_PER_TOKEN / DATA_STRIDE) * DATA_STRIDE
