"""DeepSeek-V4 paged FP8 KV cache: layout, packing, dequantization and a float32 sparse-decode reference.

A token is 584 bytes: 448 float8_e4m3fn "nope" values and 64 bfloat16 "rope" values (576 bytes) in the
page's data section, then 8 bytes in the page's scale section (7 UE8M0 exponents, one per 64 nope
dims, and one pad byte). A page of ``page_size`` tokens holds the data section first
(``page_size * 576`` bytes), then the scale section; its stride is rounded up to a multiple of 576.
The cache is handed to kernels as a ``[num_pages, page_size, 1, 584]`` view whose ``stride(0)`` is
that page stride, as SGLang and FlashMLA do.
"""

from __future__ import annotations

import torch

from tools.kernels.dsv4_layout import (  # noqa: F401  (the cache's layout, torch-free, re-exported)
    BYTES_PER_TOKEN, DATA_STRIDE, FP8_MAX, HEAD_DIM, NOPE_DIM, NUM_TILES, ROPE_DIM, SCALE_STRIDE, TILE,
    decode_work, page_bytes,
)


def empty_cache(num_pages: int, page_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A cache of random bytes (never zeros: zeros hide unwritten or mis-indexed reads)."""
    flat = torch.randint(0, 256, (num_pages * page_bytes(page_size),), dtype=torch.uint8, device=device)
    return as_cache_view(flat, num_pages, page_size)


def as_cache_view(flat: torch.Tensor, num_pages: int, page_size: int) -> torch.Tensor:
    """The ``[num_pages, page_size, 1, 584]`` float8 view kernels take, over a flat uint8 buffer."""
    stride = page_bytes(page_size)
    view = flat.view(torch.float8_e4m3fn).as_strided(
        (num_pages, page_size, 1, BYTES_PER_TOKEN), (stride, BYTES_PER_TOKEN, BYTES_PER_TOKEN, 1)
    )
    return view


def _flat_bytes(k_cache: torch.Tensor) -> torch.Tensor:
    num_pages, stride = k_cache.shape[0], k_cache.stride(0)
    return k_cache.as_strided((num_pages * stride,), (1,)).view(torch.uint8)


def _byte_offsets(k_cache: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Byte offsets of each token's data and of its scales in the flat buffer."""
    page_size, stride = k_cache.shape[1], k_cache.stride(0)
    page = token_ids.long() // page_size
    slot = token_ids.long() % page_size
    data = page * stride + slot * DATA_STRIDE
    scales = page * stride + page_size * DATA_STRIDE + slot * SCALE_STRIDE
    return data, scales


def quantize_tokens(kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``kv [N, 512]`` (any float dtype) to (nope fp8 [N, 448], scale bytes [N, 7], rope bf16 [N, 64]).

    Each 64-dim tile of the nope part gets a power-of-two scale 2^e with the smallest e for which
    amax / 2^e fits fp8 e4m3 (448); the stored byte is e + 127 (UE8M0).
    """
    kv = kv.float()
    nope = kv[:, :NOPE_DIM].reshape(-1, NUM_TILES, TILE)
    amax = nope.abs().amax(dim=-1).clamp(min=1e-30)
    exponent = torch.ceil(torch.log2(amax / FP8_MAX)).clamp(-127, 127)
    scaled = nope / torch.exp2(exponent).unsqueeze(-1)
    nope_fp8 = scaled.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).reshape(-1, NOPE_DIM)
    scale_bytes = (exponent + 127).to(torch.uint8)
    rope = kv[:, NOPE_DIM:].to(torch.bfloat16)
    return nope_fp8, scale_bytes, rope


def write_tokens(k_cache: torch.Tensor, token_ids: torch.Tensor, kv: torch.Tensor) -> None:
    """Quantize ``kv [N, 512]`` and store it at cache slots ``token_ids [N]`` (in place)."""
    flat = _flat_bytes(k_cache)
    nope_fp8, scale_bytes, rope = quantize_tokens(kv)
    data, scales = _byte_offsets(k_cache, token_ids)
    ar = torch.arange
    dev = flat.device
    flat[data[:, None] + ar(NOPE_DIM, device=dev)] = nope_fp8.view(torch.uint8).to(dev)
    flat[data[:, None] + NOPE_DIM + ar(2 * ROPE_DIM, device=dev)] = rope.contiguous().view(torch.uint8).to(dev)
    flat[scales[:, None] + ar(NUM_TILES, device=dev)] = scale_bytes.to(dev)


def read_tokens(k_cache: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Dequantize the tokens at ``token_ids`` (any shape, all >= 0) to float32 ``[..., 512]``."""
    flat = _flat_bytes(k_cache)
    shape = token_ids.shape
    ids = token_ids.reshape(-1)
    data, scales = _byte_offsets(k_cache, ids)
    dev = flat.device
    nope = flat[data[:, None] + torch.arange(NOPE_DIM, device=dev)].view(torch.float8_e4m3fn).float()
    rope_bytes = flat[data[:, None] + NOPE_DIM + torch.arange(2 * ROPE_DIM, device=dev)].contiguous()
    rope = rope_bytes.view(torch.bfloat16).float()
    exps = flat[scales[:, None] + torch.arange(NUM_TILES, device=dev)].float() - 127.0
    nope = (nope.view(-1, NUM_TILES, TILE) * torch.exp2(exps).unsqueeze(-1)).view(-1, NOPE_DIM)
    return torch.cat([nope, rope], dim=-1).view(*shape, HEAD_DIM)


def _partial_attention(q, k_cache, indices, topk_length, softmax_scale):
    """Float32 sparse attention of q [B, H, 512] over one cache; returns (out [B, H, 512], lse [B, H])."""
    batch, topk = q.shape[0], indices.shape[-1]
    idx = indices.reshape(batch, topk)
    valid = idx >= 0
    if topk_length is not None:
        valid &= torch.arange(topk, device=idx.device)[None, :] < topk_length.view(batch, 1)
    kv = read_tokens(k_cache, idx.clamp(min=0))  # [B, T, 512]
    scores = torch.einsum("bhd,btd->bht", q, kv) * softmax_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse.unsqueeze(-1).clamp(min=-1e30))
    weights = torch.nan_to_num(weights, nan=0.0)
    out = torch.einsum("bht,btd->bhd", weights, kv)
    return out, lse


def reference_sparse_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: torch.Tensor | None = None,
    attn_sink: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    extra_k_cache: torch.Tensor | None = None,
    extra_indices: torch.Tensor | None = None,
    extra_topk_length: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 sparse MLA decode with the semantics of SGLang's Triton wrapper.

    q ``[B, 1, H, 512]``; indices ``[B, 1, topk]`` (-1 invalid). Tokens past ``topk_length`` or with
    a negative index are masked out; a row with no valid token gives output 0 and LSE -inf. The
    extra cache is attended separately and merged by LSE. An attention sink ``[H]`` joins the
    softmax denominator only, and the returned LSE includes it (as the Triton wrapper's does).
    Returns (out ``[B, 1, H, 512]`` float32, lse ``[B, H, 1]`` float32).
    """
    batch, _, heads, dim = q.shape
    if softmax_scale is None:
        softmax_scale = dim ** -0.5
    qf = q.float().reshape(batch, heads, dim)
    out, lse = _partial_attention(qf, k_cache, indices, topk_length, softmax_scale)
    if extra_k_cache is not None and extra_indices is not None:
        out2, lse2 = _partial_attention(qf, extra_k_cache, extra_indices, extra_topk_length, softmax_scale)
        merged = torch.logaddexp(lse, lse2)
        w1 = torch.nan_to_num(torch.exp(lse - merged), nan=0.0)
        w2 = torch.nan_to_num(torch.exp(lse2 - merged), nan=0.0)
        out = w1.unsqueeze(-1) * out + w2.unsqueeze(-1) * out2
        lse = merged
    if attn_sink is not None:
        combined = torch.logaddexp(lse, attn_sink.float().view(1, heads))
        w = torch.nan_to_num(torch.exp(lse - combined), nan=0.0)
        out = out * w.unsqueeze(-1)
        lse = combined
    return out.view(batch, 1, heads, dim), lse.view(batch, heads, 1)


def check_decode_inputs(q, k_cache, indices, head_dim_v) -> None:
    """ValueError unless q, one cache and its indices have the shapes and dtypes a sparse decode call takes."""
    if q.dim() != 4 or q.shape[1] != 1 or q.shape[3] != HEAD_DIM:
        raise ValueError(f"q must be [B, 1, H, {HEAD_DIM}], got {list(q.shape)}")
    if q.dtype != torch.bfloat16:
        raise ValueError(f"q must be bfloat16, got {q.dtype}")
    if head_dim_v != HEAD_DIM:
        raise ValueError(f"head_dim_v must be {HEAD_DIM}, got {head_dim_v}")
    if k_cache.dim() != 4 or k_cache.shape[-1] != BYTES_PER_TOKEN:
        raise ValueError(f"k_cache must be [pages, page_size, 1, {BYTES_PER_TOKEN}]")
    if k_cache.stride(0) % DATA_STRIDE != 0:
        raise ValueError("k_cache page stride must be a multiple of 576 bytes")
    if indices.shape[0] != q.shape[0]:
        raise ValueError("indices and q disagree on the batch size")
