"""Split-K sparse MLA decode (DeepSeek-V4 paged FP8 cache) in Triton.

Same function as SGLang's ``flash_mla_sparse_decode_triton`` (its ``_tiled_sparse_decode_kernel``),
organised for a GPU with many SMs and tensor cores:

* the top-k tokens of a row are split across ``num_splits`` programs (split-K), so batch 1
  still fills the chip;
* each program owns a block of ``block_h`` heads and one gathered KV tile serves all of them
  through two tensor-core dots (S = Q K^T, O += P V; K = V in MLA): the upstream grid
  ``(B, H)`` gathers and dequantizes every KV row once per head;
* each split writes a float32 partial (normalised output and base-2 LSE); a second small kernel
  merges the splits by log-sum-exp, and with them the optional extra cache (its splits are just
  more partials) and the attention sink.

``python -m tools.kernels.sparse_mla_decode check|bench ...`` runs the correctness check or a
timing at one shape and prints one JSON object (``sparse_mla_decode_cli``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
from typing import Optional

import torch
import triton
import triton.language as tl

from tools.kernels import dsv4_cache

try:  # Gluon, Triton's explicit-layout dialect: the Hopper (wgmma) kernel of the large regime
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy as _gl_async_copy,
        fence_async_shared as _gl_fence_async_shared,
        mbarrier as _gl_mbarrier,
        warpgroup_mma as _gl_wgmma,
        warpgroup_mma_wait as _gl_wgmma_wait,
    )

    # Triton 3.6 names (the H200 image) and their later ones (3.9 renamed both).
    _gl_cp_async = getattr(_gl_async_copy, "async_load", None) or _gl_async_copy.async_copy_global_to_shared
    _gl_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
except (ImportError, AttributeError):  # a Triton without Gluon: the Triton-language kernels only
    gluon = None

LOG2E = 1.4426950408889634
HEAD_DIM = dsv4_cache.HEAD_DIM  # 512
MAX_SPLITS = 64


@triton.jit
def _gather_tile(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx, page_size, page_bytes, scale_section_off):
    # A token's nope dims come in 7 groups of 64 sharing one scale; the rope part (64 bf16) is made
    # the 8th group, so a KV tile is handled as [tokens, 8, 64] and reshaped to [tokens, 512].
    """Raw bytes of the tokens ``idx`` [BLOCK_T] (-1: none): fp8 nope [BLOCK_T, 8, 64] (group 7 empty),
    scale bytes [BLOCK_T, 8], bf16 rope [BLOCK_T, 1, 64]. Tokens with idx < 0 read as zeros."""
    valid = idx >= 0
    safe = tl.where(valid, idx, 0)
    page = (safe // page_size).to(tl.int64)
    slot = (safe % page_size).to(tl.int64)
    data_base = page * page_bytes + slot * 576  # byte offset of the token's data (16-byte aligned)
    scale_base = page * page_bytes + scale_section_off + slot * 8
    g = tl.arange(0, 8)
    d = tl.arange(0, 64)
    is_nope = g < 7
    nope_ptrs = cache_fp8_ptr + data_base[:, None, None] + (g * 64)[None, :, None] + d[None, None, :]
    nope = tl.load(nope_ptrs, mask=valid[:, None, None] & is_nope[None, :, None], other=0.0)
    # UE8M0 scale bytes, one per group of 64 nope dims (the 8th byte is padding)
    sc = tl.load(cache_u8_ptr + scale_base[:, None] + g[None, :], mask=valid[:, None] & is_nope[None, :], other=127)
    # bf16 rope values at byte offset 448, i.e. element 224 of the bf16 view
    rope_base = page * (page_bytes // 2) + slot * 288 + 224
    rope = tl.load(cache_bf16_ptr + rope_base[:, None, None] + d[None, None, :], mask=valid[:, None, None], other=0.0)
    return nope, sc, rope


@triton.jit
def _dequant_tile(nope, sc, rope, BLOCK_T: tl.constexpr, INTERPRETER: tl.constexpr):
    """bf16 [BLOCK_T, 512] from ``_gather_tile``'s bytes: nope x 2^(scale - 127), rope as group 7."""
    scale = tl.math.exp2(sc.to(tl.float32) - 127.0)
    is_nope = tl.arange(0, 8) < 7
    if INTERPRETER:
        nope_bf16 = (nope.to(tl.float32) * scale[:, :, None]).to(tl.bfloat16)
    else:
        # A power-of-two scale times an e4m3 value is exact in bf16: the product is formed there.
        nope_bf16 = nope.to(tl.bfloat16) * scale.to(tl.bfloat16)[:, :, None]
    kv = tl.where(is_nope[None, :, None], nope_bf16, rope)
    return tl.reshape(kv, [BLOCK_T, 512])


@triton.jit
def _split_kernel(
    q_ptr,
    cache_fp8_ptr,
    cache_u8_ptr,
    cache_bf16_ptr,
    indices_ptr,
    topk_len_ptr,
    o_part_ptr,
    lse_part_ptr,
    p_scratch_base,
    alpha_scratch_base,
    qk_scale_log2,
    page_size,
    page_bytes,
    scale_section_off,
    heads,
    topk,
    num_splits,
    split_offset,
    total_splits,
    stride_qb,
    stride_qh,
    stride_ib,
    HAS_TOPK_LEN: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    P_SCRATCH: tl.constexpr,
    INTERPRETER: tl.constexpr,
    ABLATE: tl.constexpr,
):
    """One (head block, split, batch row): attention of BLOCK_H heads over one slice of the top-k.

    Writes the slice's normalised output (float32) and its base-2 LSE (-inf when the slice holds no
    valid token, with output 0) into the partial buffers at split ``split_offset + split``.
    S = Q K^T [BLOCK_H, BLOCK_T] and O += P K [BLOCK_H, 512] on tensor cores; K is one dequantized
    bf16 tile in shared memory serving both dots and all BLOCK_H heads.
    """
    hb = tl.program_id(0)
    split = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)

    n_valid = topk
    if HAS_TOPK_LEN:
        n_valid = tl.minimum(tl.load(topk_len_ptr + b).to(tl.int32), topk)
    n_valid = tl.maximum(n_valid, 0)
    # Split this row's valid prefix (not the padded top-k) evenly, in whole tiles.
    per_split = tl.cdiv(tl.cdiv(n_valid, num_splits), BLOCK_T) * BLOCK_T
    start = split * per_split
    end = tl.minimum(start + per_split, n_valid)

    h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    dim = tl.arange(0, 512)
    q = tl.load(q_ptr + b * stride_qb + h[:, None] * stride_qh + dim[None, :], mask=h_mask[:, None], other=0.0)
    idx_ptr = indices_ptr + b * stride_ib
    t_offs = tl.arange(0, BLOCK_T)

    m_i = tl.full([BLOCK_H], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, 512], dtype=tl.float32)
    if P_SCRATCH:
        pid = (tl.program_id(2) * tl.num_programs(1) + split) * tl.num_programs(0) + hb
        p_scratch = p_scratch_base + pid.to(tl.int64) * (2 * BLOCK_H * BLOCK_T)
        alpha_scratch = alpha_scratch_base + pid.to(tl.int64) * (2 * BLOCK_H)
        h_local = tl.arange(0, BLOCK_H)
        parity = 0
    for t0 in range(start, end, BLOCK_T):
        t = t0 + t_offs
        idx = tl.load(idx_ptr + t, mask=t < end, other=-1)
        nope, sc, rope = _gather_tile(
            cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx, page_size, page_bytes, scale_section_off
        )
        if ABLATE == 3:
            kv = tl.zeros([BLOCK_T, 512], dtype=tl.bfloat16) + idx.to(tl.bfloat16)[:, None]
        else:
            kv = _dequant_tile(nope, sc, rope, BLOCK_T, INTERPRETER)
        valid = idx >= 0
        if INTERPRETER:
            s = tl.dot(q.to(tl.float32), tl.trans(kv.to(tl.float32))) * qk_scale_log2
        elif ABLATE == 1:
            s = tl.zeros([BLOCK_H, BLOCK_T], dtype=tl.float32) + t0.to(tl.float32)
        else:
            s = tl.dot(q, tl.trans(kv)) * qk_scale_log2
        s = tl.where(valid[None, :], s, -1.0e30)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.where(valid[None, :], tl.math.exp2(s - m_new[:, None]), 0.0)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        p16 = p.to(tl.bfloat16)
        if P_SCRATCH:
            # Triton computes all of S in every warpgroup when S feeds a second dot (its layout
            # choice for chained dots); passing P and alpha through this program's global scratch
            # (double-buffered, one barrier a tile) hides the chain, and S is split over the
            # warpgroups instead.
            p_ptrs = p_scratch + (parity * BLOCK_H + h_local[:, None]) * BLOCK_T + t_offs[None, :]
            a_ptrs = alpha_scratch + parity * BLOCK_H + h_local
            tl.store(p_ptrs, p16)
            tl.store(a_ptrs, alpha)
            tl.debug_barrier()
            p16 = tl.load(p_ptrs)
            alpha = tl.load(a_ptrs)
            parity = 1 - parity
        if INTERPRETER:
            acc = tl.dot(p16.to(tl.float32), kv.to(tl.float32), acc * alpha[:, None])
        elif ABLATE == 2:
            acc = acc * alpha[:, None] + tl.sum(p16.to(tl.float32), axis=1)[:, None]
        else:
            acc = tl.dot(p16, kv, acc * alpha[:, None])
        m_i = m_new

    has_any = l_i > 0.0
    out = acc / tl.where(has_any, l_i, 1.0)[:, None]
    slot = (b * total_splits + split_offset + split) * heads + h
    tl.store(o_part_ptr + slot[:, None] * 512 + dim[None, :], out, mask=h_mask[:, None])
    lse2 = tl.where(has_any, m_i + tl.math.log2(tl.where(has_any, l_i, 1.0)), float("-inf"))
    tl.store(lse_part_ptr + slot, lse2, mask=h_mask)


@triton.jit
def _gather_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx, page_size, page_bytes, scale_section_off,
                 BLOCK_T: tl.constexpr, HALF: tl.constexpr, INTERPRETER: tl.constexpr):  # fmt: skip
    """Dims [256 HALF, 256 HALF + 256) of the tokens ``idx`` as bf16 [BLOCK_T, 256] (groups 4 HALF ..
    4 HALF + 3 of 64 dims; group 7 is the bf16 rope part). Tokens with idx < 0 read as zeros."""
    valid = idx >= 0
    safe = tl.where(valid, idx, 0)
    page = (safe // page_size).to(tl.int64)
    slot = (safe % page_size).to(tl.int64)
    data_base = page * page_bytes + slot * 576
    scale_base = page * page_bytes + scale_section_off + slot * 8
    g = 4 * HALF + tl.arange(0, 4)
    d = tl.arange(0, 64)
    is_nope = g < 7
    nope_ptrs = cache_fp8_ptr + data_base[:, None, None] + (g * 64)[None, :, None] + d[None, None, :]
    nope = tl.load(nope_ptrs, mask=valid[:, None, None] & is_nope[None, :, None], other=0.0)
    sc = tl.load(cache_u8_ptr + scale_base[:, None] + g[None, :], mask=valid[:, None] & is_nope[None, :], other=127)
    scale = tl.math.exp2(sc.to(tl.float32) - 127.0)
    if INTERPRETER:
        kv = (nope.to(tl.float32) * scale[:, :, None]).to(tl.bfloat16)
    else:
        kv = nope.to(tl.bfloat16) * scale.to(tl.bfloat16)[:, :, None]
    if HALF == 1:
        rope_base = page * (page_bytes // 2) + slot * 288 + 224
        rope = tl.load(cache_bf16_ptr + rope_base[:, None, None] + d[None, None, :], mask=valid[:, None, None],
                       other=0.0)  # fmt: skip
        kv = tl.where(is_nope[None, :, None], kv, rope)
    return tl.reshape(kv, [BLOCK_T, 256])


@triton.jit
def _split_dhalf_kernel(
    q_ptr,
    cache_fp8_ptr,
    cache_u8_ptr,
    cache_bf16_ptr,
    indices_ptr,
    topk_len_ptr,
    o_part_ptr,
    lse_part_ptr,
    qk_scale_log2,
    page_size,
    page_bytes,
    scale_section_off,
    heads,
    topk,
    num_splits,
    split_offset,
    total_splits,
    stride_qb,
    stride_qh,
    stride_ib,
    HAS_TOPK_LEN: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    INTERPRETER: tl.constexpr,
):
    """``_split_kernel`` with the output dims halved over two programs (axis 0 = 2 head block + half).

    Each program computes the full S = Q K^T (as two 256-dim halves) but accumulates only its half of
    O += P V: a [BLOCK_H, 256] float32 accumulator fits one warpgroup (4 warps), so S and P stay in
    that warpgroup, and two such programs fit on an SM and overlap each other's gathers and barriers.
    """
    hb = tl.program_id(0) // 2
    half = tl.program_id(0) % 2
    split = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)

    n_valid = topk
    if HAS_TOPK_LEN:
        n_valid = tl.minimum(tl.load(topk_len_ptr + b).to(tl.int32), topk)
    n_valid = tl.maximum(n_valid, 0)
    per_split = tl.cdiv(tl.cdiv(n_valid, num_splits), BLOCK_T) * BLOCK_T
    start = split * per_split
    end = tl.minimum(start + per_split, n_valid)

    h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    dim = tl.arange(0, 256)
    q_row = q_ptr + b * stride_qb + h[:, None] * stride_qh + dim[None, :]
    q_lo = tl.load(q_row, mask=h_mask[:, None], other=0.0)
    q_hi = tl.load(q_row + 256, mask=h_mask[:, None], other=0.0)
    idx_ptr = indices_ptr + b * stride_ib
    t_offs = tl.arange(0, BLOCK_T)

    m_i = tl.full([BLOCK_H], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, 256], dtype=tl.float32)
    for t0 in range(start, end, BLOCK_T):
        t = t0 + t_offs
        idx = tl.load(idx_ptr + t, mask=t < end, other=-1)
        k_lo = _gather_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx, page_size, page_bytes,
                            scale_section_off, BLOCK_T, 0, INTERPRETER)  # fmt: skip
        k_hi = _gather_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx, page_size, page_bytes,
                            scale_section_off, BLOCK_T, 1, INTERPRETER)  # fmt: skip
        valid = idx >= 0
        if INTERPRETER:
            s = tl.dot(q_lo.to(tl.float32), tl.trans(k_lo.to(tl.float32)))
            s = tl.dot(q_hi.to(tl.float32), tl.trans(k_hi.to(tl.float32)), s)
        else:
            s = tl.dot(q_lo, tl.trans(k_lo))
            s = tl.dot(q_hi, tl.trans(k_hi), s)
        s = tl.where(valid[None, :], s * qk_scale_log2, -1.0e30)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.where(valid[None, :], tl.math.exp2(s - m_new[:, None]), 0.0)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        p16 = p.to(tl.bfloat16)
        acc = acc * alpha[:, None]
        if INTERPRETER:
            if half == 0:
                acc = tl.dot(p16.to(tl.float32), k_lo.to(tl.float32), acc)
            else:
                acc = tl.dot(p16.to(tl.float32), k_hi.to(tl.float32), acc)
        else:
            if half == 0:
                acc = tl.dot(p16, k_lo, acc)
            else:
                acc = tl.dot(p16, k_hi, acc)
        m_i = m_new

    has_any = l_i > 0.0
    out = acc / tl.where(has_any, l_i, 1.0)[:, None]
    slot = (b * total_splits + split_offset + split) * heads + h
    tl.store(o_part_ptr + slot[:, None] * 512 + half * 256 + dim[None, :], out, mask=h_mask[:, None])
    if half == 0:
        lse2 = tl.where(has_any, m_i + tl.math.log2(tl.where(has_any, l_i, 1.0)), float("-inf"))
        tl.store(lse_part_ptr + slot, lse2, mask=h_mask)


if gluon is not None:

    @gluon.jit
    def _sm90_token_offsets(idx_ptr, t0, end, page_size, page_bytes, scale_section_off, BLOCK_T: gl.constexpr,
                            layout: gl.constexpr):  # fmt: skip
        """Validity, data byte offset and scale byte offset of tokens t0 .. t0 + BLOCK_T (layout: 1-D)."""
        t = t0 + gl.arange(0, BLOCK_T, layout=layout)
        idx = gl.load(idx_ptr + t, mask=t < end, other=-1)
        valid = idx >= 0
        safe = gl.where(valid, idx, 0)
        page = (safe // page_size).to(gl.int64)
        slot = (safe % page_size).to(gl.int64)
        return valid, page * page_bytes + slot * 576, page * page_bytes + scale_section_off + slot * 8

    @gluon.jit
    def _sm90_issue_tile(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx_ptr, t0, end, nope_s, rope_s, scale_s,
                         page_size, page_bytes, scale_section_off, BLOCK_T: gl.constexpr):  # fmt: skip
        """cp.async of one tile's raw bytes into shared memory: nope fp8 as [8 groups, tokens, 64] (group 7
        empty; group-major, so each group's [tokens, 64] block is contiguous for the dequantizing reads),
        rope bf16 [tokens, 64], scale bytes [tokens, 8]. Tokens with idx < 0 or past ``end`` are
        zero-filled (never read from global memory)."""
        # a warp copies 64 contiguous bytes of 8 tokens per instruction; a thread owns one token
        cpn: gl.constexpr = gl.BlockedLayout([1, 1, 16], [1, 8, 4], [1, 8, 1], [2, 1, 0])
        valid, data, _ = _sm90_token_offsets(idx_ptr, t0, end, page_size, page_bytes, scale_section_off, BLOCK_T,
                                             gl.SliceLayout(0, gl.SliceLayout(2, cpn)))  # fmt: skip
        g = gl.expand_dims(gl.expand_dims(gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, cpn))), 1), 2)
        d = gl.expand_dims(gl.expand_dims(gl.arange(0, 64, layout=gl.SliceLayout(0, gl.SliceLayout(1, cpn))), 0), 1)
        data3 = gl.expand_dims(gl.expand_dims(data, 0), 2)
        valid3 = gl.expand_dims(gl.expand_dims(valid, 0), 2)
        _gl_cp_async(nope_s, cache_fp8_ptr + data3 + g * 64 + d, valid3 & (g < 7) & (d >= 0))
        cpr: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
        valid_r, data_r, _ = _sm90_token_offsets(idx_ptr, t0, end, page_size, page_bytes, scale_section_off,
                                                 BLOCK_T, gl.SliceLayout(1, cpr))  # fmt: skip
        dr = gl.arange(0, 64, layout=gl.SliceLayout(0, cpr))
        rope_ptrs = cache_bf16_ptr + gl.expand_dims(data_r // 2 + 224, 1) + gl.expand_dims(dr, 0)
        _gl_cp_async(rope_s, rope_ptrs, gl.expand_dims(valid_r, 1) & gl.expand_dims(dr >= 0, 0))
        cps: gl.constexpr = gl.BlockedLayout([1, 8], [32, 1], [2, 4], [1, 0])
        valid_s, _, scale_off = _sm90_token_offsets(idx_ptr, t0, end, page_size, page_bytes, scale_section_off,
                                                    BLOCK_T, gl.SliceLayout(1, cps))  # fmt: skip
        ds = gl.arange(0, 8, layout=gl.SliceLayout(0, cps))
        scale_ptrs = cache_u8_ptr + gl.expand_dims(scale_off, 1) + gl.expand_dims(ds, 0)
        _gl_cp_async(scale_s, scale_ptrs, gl.expand_dims(valid_s, 1) & gl.expand_dims(ds >= 0, 0))
        _gl_async_copy.commit_group()

    @gluon.jit
    def _split_kernel_sm90(
        q_ptr,
        cache_fp8_ptr,
        cache_u8_ptr,
        cache_bf16_ptr,
        indices_ptr,
        topk_len_ptr,
        o_part_ptr,
        lse_part_ptr,
        qk_scale_log2,
        page_size,
        page_bytes,
        scale_section_off,
        heads,
        topk,
        num_splits,
        split_offset,
        total_splits,
        stride_qb,
        stride_qh,
        stride_ib,
        HAS_TOPK_LEN: gl.constexpr,
        BLOCK_T: gl.constexpr,
        DEQUANT_ROWS: gl.constexpr,
    ):
        """``_split_kernel`` for Hopper in Gluon: 64 heads, 8 warps (two warpgroups), wgmma.

        Same contract as ``_split_kernel`` (one head block, split and row; writes the slice's normalised
        float32 output and base-2 LSE). The raw bytes of tile i + 2 are fetched by cp.async into a
        two-stage shared-memory ring while tile i is computed, so no global load is on the tile's
        critical path; each tile is dequantized once from shared memory into a bf16 [tokens, 512] tile
        that is the B operand of both wgmma dots (S = Q K^T with Q in shared memory, split over the
        warpgroups by tokens; O += P V with P in registers, split by output dims), and the P V dot runs
        while the next copies are issued. Shared memory: Q 64 KB, the bf16 tile 64 KB, the ring 81 KB.
        """
        BLOCK_H: gl.constexpr = 64
        hb = gl.program_id(0)
        split = gl.program_id(1)
        b = gl.program_id(2).to(gl.int64)

        n_valid = topk
        if HAS_TOPK_LEN:
            n_valid = gl.minimum(gl.load(topk_len_ptr + b).to(gl.int32), topk)
        n_valid = gl.maximum(n_valid, 0)
        per_split = gl.cdiv(gl.cdiv(n_valid, num_splits), BLOCK_T) * BLOCK_T
        start = split * per_split
        end = gl.minimum(start + per_split, n_valid)
        n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_T)
        idx_ptr = indices_ptr + b * stride_ib

        # S [heads, tokens]: warpgroup w takes tokens [w T/2, (w+1) T/2); O [heads, 512]: dims [256 w, 256 w + 256)
        mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                         instr_shape=[16, BLOCK_T // 2, 16])  # fmt: skip
        mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                         instr_shape=[16, 256, 16])  # fmt: skip
        p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
        deq: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [8, 1], [1, 0])  # [tokens, 64]: 16 B a thread
        deq_full: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [1, 8], [1, 0])  # [tokens, 512]: a warp a group
        q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
        kv_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        nope_layout: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 1, [2, 1, 0])
        row_layout: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])

        h = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, q_layout))
        dq = gl.arange(0, 512, layout=gl.SliceLayout(0, q_layout))
        q_mask = gl.expand_dims(h < heads, 1) & gl.expand_dims(dq >= 0, 0)
        q_offs = b * stride_qb + gl.expand_dims(h, 1) * stride_qh + gl.expand_dims(dq, 0)
        q = gl.load(q_ptr + q_offs, mask=q_mask, other=0.0)
        q_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, 512], kv_layout, q)
        kv_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_T, 512], kv_layout)
        nope_s = gl.allocate_shared_memory(gl.float8e4nv, [2, 8, BLOCK_T, 64], nope_layout)
        rope_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_T, 64], row_layout)
        scale_s = gl.allocate_shared_memory(gl.uint8, [2, BLOCK_T, 8], row_layout)

        for j in gl.static_range(2):
            _sm90_issue_tile(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx_ptr, start + j * BLOCK_T, end,
                             nope_s.index(j), rope_s.index(j), scale_s.index(j), page_size, page_bytes,
                             scale_section_off, BLOCK_T)  # fmt: skip

        m_i = gl.full([BLOCK_H], -1.0e30, gl.float32, layout=gl.SliceLayout(1, mma_s))
        # running sums of P kept per thread and reduced once at the end (no cross-warpgroup sum a tile)
        l_acc = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, layout=mma_s)
        acc = gl.zeros([BLOCK_H, 512], gl.float32, layout=mma_o)
        t_s = gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma_s))
        for i in range(n_tiles):
            t0 = start + i * BLOCK_T
            stage = i % 2
            t = t0 + t_s
            idx_s = gl.load(idx_ptr + t, mask=t < end, other=-1)
            _gl_async_copy.wait_group(1)  # this thread's copies of tile i have landed
            _gl_cta_barrier()  # ... and every thread's
            raw_nope = nope_s.index(stage)
            if DEQUANT_ROWS == 0:
                # per group of 64 dims: fp8 x 2^(scale - 127) is exact in bf16
                for g in gl.static_range(7):
                    raw = raw_nope.reshape([8 * BLOCK_T, 64]).slice(g * BLOCK_T, BLOCK_T, dim=0).load(deq)
                    sc = scale_s.index(stage).slice(g, 1, dim=1).load(deq)
                    scale = gl.exp2(sc.to(gl.float32) - 127.0).to(gl.bfloat16)
                    kv_s.slice(64 * g, 64, dim=1).store(raw.to(gl.bfloat16) * scale)
            else:
                # whole rows at once (fewer shared-memory barriers, more registers)
                ROWS: gl.constexpr = BLOCK_T // DEQUANT_ROWS
                for r in gl.static_range(DEQUANT_ROWS):
                    raw3 = gl.permute(raw_nope.slice(r * ROWS, ROWS, dim=1).load(
                        gl.BlockedLayout([1, 1, 16], [1, 8, 4], [8, 1, 1], [2, 1, 0])), (1, 0, 2))
                    sc = scale_s.index(stage).slice(r * ROWS, ROWS, dim=0).load(gl.SliceLayout(2, raw3.type.layout))
                    scale = gl.exp2(sc.to(gl.float32) - 127.0).to(gl.bfloat16)
                    kv3 = raw3.to(gl.bfloat16) * gl.expand_dims(scale, 2)
                    kv_s.slice(r * ROWS, ROWS, dim=0).store(gl.reshape(kv3, [ROWS, 512]))
                _gl_cta_barrier()  # group 7 above holds garbage: every thread's store lands before the rope's
            # the rope part is group 7
            kv_s.slice(448, 64, dim=1).store(rope_s.index(stage).load(deq))
            _gl_fence_async_shared()  # generic-proxy stores, read next by wgmma
            _gl_cta_barrier()
            s = _gl_wgmma(q_s, kv_s.permute((1, 0)), gl.zeros([BLOCK_H, BLOCK_T], gl.float32, layout=mma_s),
                          use_acc=False, is_async=True)  # fmt: skip
            s = _gl_wgmma_wait(0, deps=[s])
            valid = gl.expand_dims(idx_s >= 0, 0)
            s = gl.where(valid, s * qk_scale_log2, -1.0e30)
            m_new = gl.maximum(m_i, gl.max(s, axis=1))
            alpha = gl.exp2(m_i - m_new)
            p = gl.where(valid, gl.exp2(s - gl.expand_dims(m_new, 1)), 0.0)
            l_acc = l_acc * gl.expand_dims(alpha, 1) + p
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, mma_o)), 1)
            acc = _gl_wgmma(gl.convert_layout(p.to(gl.bfloat16), p_op), kv_s, acc, is_async=True)
            # this stage was dequantized above: refill it with tile i + 2 while the P V dot runs
            _sm90_issue_tile(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, idx_ptr, t0 + 2 * BLOCK_T, end,
                             raw_nope, rope_s.index(stage), scale_s.index(stage), page_size, page_bytes,
                             scale_section_off, BLOCK_T)  # fmt: skip
            acc = _gl_wgmma_wait(0, deps=[acc])
            m_i = m_new
        _gl_async_copy.wait_group(0)

        l_i = gl.sum(l_acc, axis=1)
        has_any = l_i > 0.0
        l_safe = gl.where(has_any, l_i, 1.0)
        out = acc / gl.expand_dims(gl.convert_layout(l_safe, gl.SliceLayout(1, mma_o)), 1)
        ho = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_o))
        do = gl.arange(0, 512, layout=gl.SliceLayout(0, mma_o))
        slot_o = (b * total_splits + split_offset + split) * heads + ho
        o_mask = gl.expand_dims(ho < heads, 1) & gl.expand_dims(do >= 0, 0)
        gl.store(o_part_ptr + gl.expand_dims(slot_o, 1) * 512 + gl.expand_dims(do, 0), out, mask=o_mask)
        lse2 = gl.where(has_any, m_i + gl.log2(l_safe), float("-inf"))
        hs = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_s))
        gl.store(lse_part_ptr + (b * total_splits + split_offset + split) * heads + hs, lse2, mask=hs < heads)

    # ---- The warp-specialized Hopper kernel (_split_kernel_ws) ----------------------------------------
    # Three partitions of one warpgroup each share a ring of dequantized bf16 KV tiles in shared memory:
    # a producer gathers, dequantizes and stores tile i + 1 while two consumers run the dots of tile i,
    # each for half of the 512 output dims. mbarriers hand the ring's stages over: "full" (producer ->
    # consumers, one arrival) and "empty" (consumers -> producer, one arrival from each consumer).

    @gluon.jit
    def _ws_consume(q_s, kv_s, bias_s, full_bars, empty_bars, o_part_ptr, lse_part_ptr, n_tiles, qk_scale_log2,
                    slot_base, heads, hb, HALF: gl.constexpr, ABLATE: gl.constexpr):  # fmt: skip
        """One consumer warpgroup: for every tile, S = Q K^T over all 64 tokens (both consumers compute the
        same S, so they need no exchange), the online softmax, and O[:, 256 HALF : 256 HALF + 256] += P V.
        Writes its half of the normalised float32 partial; HALF 0 also writes the base-2 LSE."""
        BLOCK_T: gl.constexpr = kv_s.type.shape[1]
        STAGES: gl.constexpr = kv_s.type.shape[0]
        mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_T, 16])  # fmt: skip
        mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, 256, 16])  # fmt: skip
        p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
        m_i = gl.full([64], -1.0e30, gl.float32, layout=gl.SliceLayout(1, mma_s))
        l_i = gl.zeros([64], gl.float32, layout=gl.SliceLayout(1, mma_s))
        acc = gl.zeros([64, 256], gl.float32, layout=mma_o)
        for i in range(n_tiles):
            stage = i % STAGES
            _gl_mbarrier.wait(full_bars.index(stage), (i // STAGES) & 1)
            kv = kv_s.index(stage)
            if ABLATE != 2:  # ABLATE 2 (a timing probe): hand the stage back untouched
                s = _gl_wgmma(q_s, kv.permute((1, 0)), gl.zeros([64, BLOCK_T], gl.float32, layout=mma_s),
                              use_acc=False, is_async=True)  # fmt: skip
                bias = bias_s.index(stage).load(gl.SliceLayout(0, mma_s))  # 0 or -inf: invalid tokens drop out
                s = _gl_wgmma_wait(0, deps=[s])
                s = s * qk_scale_log2 + gl.expand_dims(bias, 0)
                m_new = gl.maximum(m_i, gl.max(s, axis=1))
                alpha = gl.exp2(m_i - m_new)
                p = gl.exp2(s - gl.expand_dims(m_new, 1))
                l_i = l_i * alpha + gl.sum(p, axis=1)
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, mma_o)), 1)
                acc = _gl_wgmma(gl.convert_layout(p.to(gl.bfloat16), p_op), kv.slice(HALF * 256, 256, dim=1), acc,
                                is_async=True)  # fmt: skip
                acc = _gl_wgmma_wait(0, deps=[acc])
                m_i = m_new
            _gl_mbarrier.arrive(empty_bars.index(stage), count=1)
        has_any = l_i > 0.0
        l_safe = gl.where(has_any, l_i, 1.0)
        out = acc / gl.expand_dims(gl.convert_layout(l_safe, gl.SliceLayout(1, mma_o)), 1)
        ho = hb * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, mma_o))
        do = HALF * 256 + gl.arange(0, 256, layout=gl.SliceLayout(0, mma_o))
        o_mask = gl.expand_dims(ho < heads, 1) & gl.expand_dims(do >= 0, 0)
        gl.store(o_part_ptr + gl.expand_dims(slot_base + ho, 1) * 512 + gl.expand_dims(do, 0), out, mask=o_mask)
        if HALF == 0:
            lse2 = gl.where(has_any, m_i + gl.log2(l_safe), float("-inf"))
            hs = hb * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, mma_s))
            gl.store(lse_part_ptr + slot_base + hs, lse2, mask=hs < heads)

    @gluon.jit
    def _ws_fp8_to_bf16_bits(raw):
        """fp8 e4m3 bytes -> bf16 with the same value times 2^-120 (sign to bit 15, the 7 exponent and
        mantissa bits to bits 4..10: exact for normal, subnormal and zero codes), four bytes an instance.
        Integer ops only: Hopper has no fp8 -> bf16 conversion, and fp8 -> f16 -> bf16 costs one slow
        F2F per element."""
        return gl.inline_asm_elementwise(
            "{ .reg .b32 lo, hi, s;"
            " prmt.b32 lo, $2, 0, 0x4140; prmt.b32 hi, $2, 0, 0x4342;"  # bytes 0, 1 / 2, 3 to 16-bit lanes
            # per lane b: (b & 0x7F) << 4 | (b & 0x80) << 8 == (b + 15 (b & 0x80)) << 4
            " and.b32 s, lo, 0x00800080; mad.lo.u32 lo, s, 15, lo; shl.b32 $0, lo, 4;"
            " and.b32 s, hi, 0x00800080; mad.lo.u32 hi, s, 15, hi; shl.b32 $1, hi, 4; }",
            "=r,=r,r", [raw], dtype=gl.bfloat16, is_pure=True, pack=4,
        )  # fmt: skip

    @gluon.jit
    def _ws_dequant(raw, sc):
        """fp8 e4m3 bytes ``raw`` [R, C] (uint8) times 2^(``sc`` - 127) (``sc`` uint8 [R, 1], same layout),
        as bf16: exact wherever the product is representable (x 2^120 and x 2^(sc - 127) are exact
        power-of-two products of bf16 values, subnormal ones included)."""
        e = sc.to(gl.int16)
        scale = gl.where(e == 0, 0x40, e << 7).to(gl.bfloat16, bitcast=True)  # 2^(sc - 127); sc 0 is subnormal
        two120 = gl.full(raw.shape, 1.329227995784916e36, gl.bfloat16, layout=raw.type.layout)  # 2^120
        return _ws_fp8_to_bf16_bits(raw) * two120 * scale

    @gluon.jit
    def _ws_token_offsets(idx, t, end, PAGE_SIZE: gl.constexpr, page_bytes, scale_section_off):
        """Validity (a valid index, inside the split), data byte offset and scale byte offset of tokens
        with indices ``idx`` at positions ``t`` (any 1-D layout)."""
        valid = (idx >= 0) & (t < end)
        safe = gl.where(valid, idx, 0)
        page = (safe // PAGE_SIZE).to(gl.int64) * page_bytes
        slot_t = (safe % PAGE_SIZE).to(gl.int64)
        return valid, page + slot_t * 576, page + scale_section_off + slot_t * 8

    @gluon.jit
    def _ws_issue_half(raw_s, sc_s, cache_u8_ptr, idx, t, end, slot, PAGE_SIZE: gl.constexpr, page_bytes,
                       scale_section_off):  # fmt: skip
        """cp.async of 32 tokens' nope bytes (7 groups of [32, 64]) and scale bytes into ring slot ``slot``
        (one commit group). ``idx``: the tokens' indices (SliceLayout(1, deq)); invalid or out-of-range
        tokens are zero-filled, never read."""
        row8: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
        valid, data, scale_off = _ws_token_offsets(idx, t, end, PAGE_SIZE, page_bytes, scale_section_off)
        # all 7 groups in one copy (group 7 of the slot stays empty): Triton puts a CTA barrier between
        # separate async copies into one allocation
        cpn: gl.constexpr = gl.BlockedLayout([1, 1, 16], [1, 8, 4], [1, 4, 1], [2, 1, 0])
        g = gl.expand_dims(gl.expand_dims(gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, cpn))), 1), 2)
        d = gl.expand_dims(gl.expand_dims(gl.arange(0, 64, layout=gl.SliceLayout(0, gl.SliceLayout(1, cpn))), 0), 1)
        rows3: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, cpn))
        data3 = gl.expand_dims(gl.expand_dims(gl.convert_layout(data, rows3), 0), 2)
        valid3 = gl.expand_dims(gl.expand_dims(gl.convert_layout(valid, rows3), 0), 2)
        _gl_cp_async(raw_s.index(slot), cache_u8_ptr + data3 + g * 64 + d, valid3 & (g < 7) & (d >= 0))
        c8 = gl.arange(0, 8, layout=gl.SliceLayout(0, row8))
        sc_off = gl.convert_layout(scale_off, gl.SliceLayout(1, row8))
        valid8 = gl.convert_layout(valid, gl.SliceLayout(1, row8))
        _gl_cp_async(sc_s.index(slot), cache_u8_ptr + gl.expand_dims(sc_off, 1) + gl.expand_dims(c8, 0),
                     gl.expand_dims(valid8, 1) & gl.expand_dims(c8 >= 0, 0))  # fmt: skip
        _gl_async_copy.commit_group()

    @gluon.jit
    def _ws_issue_rope(kv, cache_bf16_ptr, idx, t, end, PAGE_SIZE: gl.constexpr, page_bytes):
        """cp.async of 32 tokens' bf16 rope values straight into their place in the dequantized tile
        (dims 448..511 of ``kv``, a [32, 512] slice); one commit group."""
        row8: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
        valid, data, _ = _ws_token_offsets(gl.convert_layout(idx, gl.SliceLayout(1, row8)),
                                           gl.convert_layout(t, gl.SliceLayout(1, row8)), end, PAGE_SIZE, page_bytes, 0)
        dr = gl.arange(0, 64, layout=gl.SliceLayout(0, row8))
        _gl_cp_async(kv.slice(448, 64, dim=1), cache_bf16_ptr + gl.expand_dims(data // 2 + 224, 1) + gl.expand_dims(dr, 0),
                     gl.expand_dims(valid, 1) & gl.expand_dims(dr >= 0, 0))  # fmt: skip

    @gluon.jit
    def _ws_dequant_half(raw_s, sc_s, kv, slot, BATCH: gl.constexpr):
        """Ring slot ``slot`` (32 tokens, raw fp8 and scale bytes) -> dims 0..447 of ``kv`` ([32, 512] bf16):
        fp8 x 2^(scale - 127), exact in bf16. Each thread reads back the nope chunks it copied. BATCH (1,
        2 or 4): groups whose loads and conversions are in flight at once (the producer has one warp a
        scheduler: little else to hide shared-memory latency behind)."""
        deq: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
        rows = raw_s.index(slot).reshape([8 * 32, 64])
        scs = sc_s.index(slot)
        if BATCH == 4:
            r0 = rows.slice(0, 32, dim=0).load(deq)
            r1 = rows.slice(32, 32, dim=0).load(deq)
            r2 = rows.slice(64, 32, dim=0).load(deq)
            r3 = rows.slice(96, 32, dim=0).load(deq)
            v0 = _ws_dequant(r0, scs.slice(0, 1, dim=1).load(deq))
            v1 = _ws_dequant(r1, scs.slice(1, 1, dim=1).load(deq))
            v2 = _ws_dequant(r2, scs.slice(2, 1, dim=1).load(deq))
            v3 = _ws_dequant(r3, scs.slice(3, 1, dim=1).load(deq))
            kv.slice(0, 64, dim=1).store(v0)
            kv.slice(64, 64, dim=1).store(v1)
            kv.slice(128, 64, dim=1).store(v2)
            kv.slice(192, 64, dim=1).store(v3)
            r4 = rows.slice(128, 32, dim=0).load(deq)
            r5 = rows.slice(160, 32, dim=0).load(deq)
            r6 = rows.slice(192, 32, dim=0).load(deq)
            v4 = _ws_dequant(r4, scs.slice(4, 1, dim=1).load(deq))
            v5 = _ws_dequant(r5, scs.slice(5, 1, dim=1).load(deq))
            v6 = _ws_dequant(r6, scs.slice(6, 1, dim=1).load(deq))
            kv.slice(256, 64, dim=1).store(v4)
            kv.slice(320, 64, dim=1).store(v5)
            kv.slice(384, 64, dim=1).store(v6)
        elif BATCH == 2:
            for gp in gl.static_range(3):
                r0 = rows.slice(2 * gp * 32, 32, dim=0).load(deq)
                r1 = rows.slice((2 * gp + 1) * 32, 32, dim=0).load(deq)
                v0 = _ws_dequant(r0, scs.slice(2 * gp, 1, dim=1).load(deq))
                v1 = _ws_dequant(r1, scs.slice(2 * gp + 1, 1, dim=1).load(deq))
                kv.slice(128 * gp, 64, dim=1).store(v0)
                kv.slice(128 * gp + 64, 64, dim=1).store(v1)
            kv.slice(384, 64, dim=1).store(_ws_dequant(rows.slice(192, 32, dim=0).load(deq), scs.slice(6, 1, dim=1).load(deq)))
        else:
            for g in gl.static_range(7):
                sc = scs.slice(g, 1, dim=1).load(deq)  # [32, 1]: each thread its rows' byte
                kv.slice(64 * g, 64, dim=1).store(_ws_dequant(rows.slice(g * 32, 32, dim=0).load(deq), sc))

    @gluon.jit
    def _ws_produce(kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                    start, end, n_tiles, PAGE_SIZE: gl.constexpr, page_bytes, scale_section_off, BATCH: gl.constexpr,
                    ABLATE: gl.constexpr):  # fmt: skip
        """The producer warpgroup. The raw bytes of each 32-token half tile arrive by cp.async in a
        two-slot ring, requested two halves ahead (so a half's gather overlaps the dequantization of the
        one before); once tile i's ring stage is empty, its rope values are copied straight into place,
        both halves are dequantized into it, its validity is written as a 0 / -inf bias, and it is marked
        full. Pending copy groups are always (oldest first) half h, then the next two requests, so
        ``wait_group(2)`` is "half h has landed". Invalid and out-of-range tokens are zero, never read."""
        deq: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
        STAGES: gl.constexpr = kv_s.type.shape[0]
        BLOCK_T: gl.constexpr = kv_s.type.shape[1]
        ar = gl.arange(0, 32, layout=gl.SliceLayout(1, deq))
        t_a = start + ar
        t_b = start + 32 + ar
        idx_a = gl.load(idx_ptr + t_a, mask=t_a < end, other=-1)
        idx_b = gl.load(idx_ptr + t_b, mask=t_b < end, other=-1)
        n_copied = n_tiles
        if ABLATE == 1:  # a timing probe: the stages go round with no gather or dequantization
            n_copied = 0
            for i in range(n_tiles):
                _gl_mbarrier.wait(empty_bars.index(i % STAGES), ((i // STAGES) & 1) ^ 1)
                _gl_mbarrier.arrive(full_bars.index(i % STAGES), count=1)
        else:
            _ws_issue_half(raw_s, sc_s, cache_u8_ptr, idx_a, t_a, end, 0, PAGE_SIZE, page_bytes, scale_section_off)
            _ws_issue_half(raw_s, sc_s, cache_u8_ptr, idx_b, t_b, end, 1, PAGE_SIZE, page_bytes, scale_section_off)
        for i in range(n_copied):
            stage = i % STAGES
            idx_na = gl.load(idx_ptr + t_a + BLOCK_T, mask=t_a + BLOCK_T < end, other=-1)  # the next requests'
            idx_nb = gl.load(idx_ptr + t_b + BLOCK_T, mask=t_b + BLOCK_T < end, other=-1)
            _gl_mbarrier.wait(empty_bars.index(stage), ((i // STAGES) & 1) ^ 1)
            kv = kv_s.index(stage)
            _ws_issue_rope(kv.slice(0, 32, dim=0), cache_bf16_ptr, idx_a, t_a, end, PAGE_SIZE, page_bytes)
            _ws_issue_rope(kv.slice(32, 32, dim=0), cache_bf16_ptr, idx_b, t_b, end, PAGE_SIZE, page_bytes)
            _gl_async_copy.commit_group()
            _gl_async_copy.wait_group(2)  # pending: half 2i, half 2i+1, rope(i)
            _gl_cta_barrier()
            _ws_dequant_half(raw_s, sc_s, kv.slice(0, 32, dim=0), 0, BATCH)
            _gl_cta_barrier()  # slot 0 is read: refill it
            _ws_issue_half(raw_s, sc_s, cache_u8_ptr, idx_na, t_a + BLOCK_T, end, 0, PAGE_SIZE, page_bytes,
                           scale_section_off)  # fmt: skip
            _gl_async_copy.wait_group(2)  # pending: half 2i+1, rope(i), half 2i+2
            _gl_cta_barrier()
            _ws_dequant_half(raw_s, sc_s, kv.slice(32, 32, dim=0), 1, BATCH)
            _gl_cta_barrier()
            _ws_issue_half(raw_s, sc_s, cache_u8_ptr, idx_nb, t_b + BLOCK_T, end, 1, PAGE_SIZE, page_bytes,
                           scale_section_off)  # fmt: skip
            _gl_async_copy.wait_group(2)  # pending: rope(i), half 2i+2, half 2i+3
            bias = bias_s.index(stage)
            bias.slice(0, 32).store(gl.where((idx_a >= 0) & (t_a < end), 0.0, float("-inf")))
            bias.slice(32, 32).store(gl.where((idx_b >= 0) & (t_b < end), 0.0, float("-inf")))
            _gl_fence_async_shared()  # generic-proxy stores, read next by the consumers' wgmma
            _gl_cta_barrier()
            _gl_mbarrier.arrive(full_bars.index(stage), count=1)
            idx_a = idx_na
            idx_b = idx_nb
            t_a = t_a + BLOCK_T
            t_b = t_b + BLOCK_T
        _gl_async_copy.wait_group(0)

    # Worker partitions take one argument list; each picks its part.
    @gluon.jit
    def _ws_consumer_lo(q_s, kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                        o_part_ptr, lse_part_ptr, start, end, n_tiles, qk_scale_log2, PAGE_SIZE: gl.constexpr, page_bytes,
                        scale_section_off, slot_base, heads, hb, BATCH: gl.constexpr, ABLATE: gl.constexpr):  # fmt: skip
        _ws_consume(q_s, kv_s, bias_s, full_bars, empty_bars, o_part_ptr, lse_part_ptr, n_tiles, qk_scale_log2,
                    slot_base, heads, hb, 0, ABLATE)  # fmt: skip

    @gluon.jit
    def _ws_consumer_hi(q_s, kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                        o_part_ptr, lse_part_ptr, start, end, n_tiles, qk_scale_log2, PAGE_SIZE: gl.constexpr, page_bytes,
                        scale_section_off, slot_base, heads, hb, BATCH: gl.constexpr, ABLATE: gl.constexpr):  # fmt: skip
        _ws_consume(q_s, kv_s, bias_s, full_bars, empty_bars, o_part_ptr, lse_part_ptr, n_tiles, qk_scale_log2,
                    slot_base, heads, hb, 1, ABLATE)  # fmt: skip

    @gluon.jit
    def _ws_producer(q_s, kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                     o_part_ptr, lse_part_ptr, start, end, n_tiles, qk_scale_log2, PAGE_SIZE: gl.constexpr, page_bytes,
                     scale_section_off, slot_base, heads, hb, BATCH: gl.constexpr, ABLATE: gl.constexpr):  # fmt: skip
        _ws_produce(kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                    start, end, n_tiles, PAGE_SIZE, page_bytes, scale_section_off, BATCH, ABLATE)  # fmt: skip

    @gluon.jit
    def _split_kernel_ws(
        q_ptr,
        cache_fp8_ptr,
        cache_u8_ptr,
        cache_bf16_ptr,
        indices_ptr,
        topk_len_ptr,
        o_part_ptr,
        lse_part_ptr,
        qk_scale_log2,
        PAGE_SIZE: gl.constexpr,
        page_bytes,
        scale_section_off,
        heads,
        topk,
        num_splits,
        split_offset,
        total_splits,
        stride_qb,
        stride_qh,
        stride_ib,
        HAS_TOPK_LEN: gl.constexpr,
        BLOCK_T: gl.constexpr,
        STAGES: gl.constexpr,
        CONSUMER_REGS: gl.constexpr,
        PRODUCER_REGS: gl.constexpr,
        BATCH: gl.constexpr,
        ABLATE: gl.constexpr,
    ):
        """``_split_kernel`` for Hopper, warp-specialized (launch with ``num_warps=4``: the default
        partition is the first consumer; two more warpgroups are the second consumer and the producer).

        Same contract as ``_split_kernel``. The producer fills a ``STAGES``-deep ring of dequantized bf16
        [BLOCK_T, 512] tiles while the consumers run wgmma on the previous one, so the gather and the
        dequantization leave the dots' critical path (``_split_kernel_sm90`` runs them in series).
        Shared memory: Q 64 KB, the bf16 ring (64 KB a 64-token stage), the raw ring (two 32-token
        slots, 32 KB) and the barriers. PAGE_SIZE is a compile-time constant (its division and modulo
        are on the producer's path); ABLATE 1 / 2 idles the producer / consumers (timing probes).
        BLOCK_T must be 64 (two 32-token halves a tile) and the launch needs ``maxnreg=WS_MAXNREG``."""
        hb = gl.program_id(0)
        split = gl.program_id(1)
        b = gl.program_id(2).to(gl.int64)
        n_valid = topk
        if HAS_TOPK_LEN:
            n_valid = gl.minimum(gl.load(topk_len_ptr + b).to(gl.int32), topk)
        n_valid = gl.maximum(n_valid, 0)
        per_split = gl.cdiv(gl.cdiv(n_valid, num_splits), BLOCK_T) * BLOCK_T
        start = split * per_split
        end = gl.minimum(start + per_split, n_valid)
        n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_T)
        idx_ptr = indices_ptr + b * stride_ib
        slot_base = (b * total_splits + split_offset + split) * heads

        kv_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        q_s = gl.allocate_shared_memory(gl.bfloat16, [64, 512], kv_layout)
        h = hb * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, q_layout))
        for c in gl.static_range(4):  # in 128-dim chunks: the prologue runs before registers are handed out
            dq = c * 128 + gl.arange(0, 128, layout=gl.SliceLayout(0, q_layout))
            q = gl.load(q_ptr + b * stride_qb + gl.expand_dims(h, 1) * stride_qh + gl.expand_dims(dq, 0),
                        mask=gl.expand_dims(h < heads, 1) & gl.expand_dims(dq >= 0, 0), other=0.0)  # fmt: skip
            q_s.slice(c * 128, 128, dim=1).store(q)
        kv_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_T, 512], kv_layout)
        raw_s = gl.allocate_shared_memory(gl.uint8, [2, 8, 32, 64], gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))
        sc_s = gl.allocate_shared_memory(gl.uint8, [2, 32, 8], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        bias_s = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_T], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        full_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], _gl_mbarrier.MBarrierLayout())
        empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], _gl_mbarrier.MBarrierLayout())
        for j in gl.static_range(STAGES):
            _gl_mbarrier.init(full_bars.index(j), count=1)  # the producer
            _gl_mbarrier.init(empty_bars.index(j), count=2)  # the two consumers
        _gl_fence_async_shared()
        args = (q_s, kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                o_part_ptr, lse_part_ptr, start, end, n_tiles, qk_scale_log2, PAGE_SIZE, page_bytes,
                scale_section_off, slot_base, heads, hb, BATCH, ABLATE)  # fmt: skip
        gl.warp_specialize([(_ws_consumer_lo, args), (_ws_consumer_hi, args), (_ws_producer, args)], [4, 4],
                           [CONSUMER_REGS, PRODUCER_REGS])  # fmt: skip


@triton.jit
def _combine_kernel(
    o_part_ptr,
    lse_part_ptr,
    sink_ptr,
    out_ptr,
    lse_ptr,
    heads,
    total_splits,
    stride_ob,
    stride_oh,
    HAS_SINK: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Merge one (row, head)'s split partials, and the attention sink, by log-sum-exp: bf16 output
    dims [BLOCK_D chunk], natural LSE. All splits are loaded at once (no serial chain of loads)."""
    bh = tl.program_id(0)
    chunk = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = bh % heads
    s = tl.arange(0, SPLITS_PAD)
    s_mask = s < total_splits
    slot = (b * total_splits + s) * heads + h
    lse_s = tl.load(lse_part_ptr + slot, mask=s_mask, other=float("-inf"))
    m = tl.max(lse_s, axis=0)
    if HAS_SINK:
        sink2 = tl.load(sink_ptr + h).to(tl.float32) * 1.4426950408889634
        m = tl.maximum(m, sink2)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.math.exp2(lse_s - m_safe)
    den = tl.sum(w, axis=0)
    if HAS_SINK:
        den += tl.math.exp2(sink2 - m_safe)
    d = chunk * BLOCK_D + tl.arange(0, BLOCK_D)
    o = tl.load(o_part_ptr + slot[:, None] * 512 + d[None, :], mask=s_mask[:, None], other=0.0)
    acc = tl.sum(w[:, None] * o, axis=0)
    has_any = den > 0.0
    safe_den = tl.where(has_any, den, 1.0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + d, (acc / safe_den).to(tl.bfloat16))
    if chunk == 0:
        lse = tl.where(has_any, (m_safe + tl.math.log2(safe_den)) * 0.6931471805599453, float("-inf"))
        tl.store(lse_ptr + b * heads + h, lse)


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch options of the split kernel."""

    block_h: int  # heads sharing one gathered KV tile (tensor-core M)
    block_t: int  # tokens a tile
    num_warps: int
    num_stages: int
    programs_per_sm: int  # resident programs an SM holds at this tile shape (for the split heuristic)
    p_scratch: bool = False  # pass P through global scratch between the two dots (see _split_kernel)
    # Timing probes only (wrong results): 1 drops the Q K^T dot, 2 the P V dot, 3 the KV gather.
    ablate: int = 0
    d_halves: bool = False  # output dims halved over two programs (_split_dhalf_kernel)
    sm90: bool = False  # the Gluon wgmma kernel (_split_kernel_sm90): compute capability 9.0 only
    dequant_rows: int = 0  # _split_kernel_sm90's dequantization: 0 per group of 64 dims, n in n row blocks
    # _split_kernel_ws (compute capability 9.0 only): registers a thread of the second consumer and of the
    # producer warpgroup (the first consumer gets what is left of 168 x 384)
    ws_regs: tuple[int, int] = ()
    ws_batch: int = 1  # _split_kernel_ws: 64-dim groups dequantized at a time (1, 2 or 4)
    # Fewest tiles a split may get: a warp-specialized program overlaps its producer with its consumers
    # only from its second tile on, so one-tile splits pay the pipeline's fill and drain whole.
    min_tiles_per_split: int = 1


# The three tile shapes the wrapper uses, each the fastest of its regime in the H200 sweep committed
# as benchmarks/results/sparse_mla_decode_run3_sweep.json (B x top-k work, H = 64).
SMALL = KernelConfig(block_h=16, block_t=32, num_warps=4, num_stages=2, programs_per_sm=2)
MEDIUM = KernelConfig(block_h=64, block_t=32, num_warps=4, num_stages=2, programs_per_sm=1, d_halves=True)
LARGE = KernelConfig(block_h=64, block_t=64, num_warps=8, num_stages=1, programs_per_sm=1, p_scratch=True)
# Hopper: the same regime on wgmma, with cp.async prefetch and no global round trip (see _split_kernel_sm90);
# kept as the sweeps' baseline for LARGE_WS.
LARGE_SM90 = KernelConfig(block_h=64, block_t=64, num_warps=8, num_stages=2, programs_per_sm=1, sm90=True)
# Hopper, warp-specialized: a producer warpgroup dequantizes into a two-stage ring (see _split_kernel_ws).
LARGE_WS = KernelConfig(block_h=64, block_t=64, num_warps=4, num_stages=2, programs_per_sm=1, sm90=True,
                        ws_regs=(208, 80), ws_batch=4, min_tiles_per_split=2)  # fmt: skip
WS_MAXNREG = 168  # 65536 registers over the 12 warps of the three warpgroups, rounded down to 8
SM90_ARCH = 90
SMALL_TOKENS = 512  # batch * topk at or below which SMALL wins (1x512: 9.7 us against 10.5 and 13.5)
MEDIUM_TOKENS = 8192  # ... and MEDIUM (1x2048: 12.6 us against 14.7; 4x2048: 19.4 against 20.7)
# ... on Hopper, where LARGE_WS takes over sooner (run 7 sweep: 2x2048 MEDIUM 15.2 us against 15.5;
# 4x2048 LARGE_WS 17.7 against 19.6; 16x512 17.2 against 19.6; 8x1024 17.0 against 18.9)
HOPPER_MEDIUM_TOKENS = 4096


@functools.lru_cache(maxsize=1024)
def choose_config(batch: int, topk: int, heads: int, arch: Optional[int] = None) -> KernelConfig:
    """Tile shape for a problem (see SMALL, MEDIUM, LARGE, LARGE_WS).

    Below 64 heads (a TP shard, the CPU tests): 16-head blocks on 4 warps (mma.sync), one program
    per 16 heads. With 64 heads, by the work B x top-k: tiny problems are latency-bound and spread
    16-head blocks over more SMs (SMALL); mid-sized ones split the 512 output dims over two 4-warp
    programs (MEDIUM, ``_split_dhalf_kernel``); large ones read each KV tile once for all 64 heads
    with 8 warps and 64-token tiles (LARGE), on Hopper (``arch`` 90, see ``device_arch``) with the
    warp-specialized Gluon kernel (LARGE_WS), which Triton-language code cannot express, and which
    takes over from MEDIUM at half MEDIUM_TOKENS (HOPPER_MEDIUM_TOKENS).
    """
    work = batch * topk
    if heads < 64 or work <= SMALL_TOKENS:
        return SMALL
    hopper = arch == SM90_ARCH and gluon is not None
    if work <= (HOPPER_MEDIUM_TOKENS if hopper else MEDIUM_TOKENS):
        return MEDIUM
    return LARGE_WS if hopper else LARGE


# Cost, in tile-steps of one program, of writing one split's float32 partial and merging it back
# (a [block_h, 512] float32 store plus its read in the combine kernel, against one tile's gather
# and two dots). Fitted to the split sweeps in benchmarks/results/sparse_mla_decode_run3_sweep.json:
# with it the model picks the measured best split count at every swept shape.
_PARTIAL_COST_TILES = 2.0


@functools.lru_cache(maxsize=1024)
def choose_num_splits(batch: int, topk: int, heads: int, sm_count: int, arch: Optional[int] = None) -> int:
    """Split count for the top-k dimension (per cache), for the tile shape ``choose_config`` picks.

    Minimises the modelled time ``waves * (tiles per split + partial cost)``, where
    ``waves = ceil(programs / (sm_count * programs_per_sm))`` and ``programs = batch * head_blocks *
    splits`` (twice that when the output dims are halved): enough splits to put a program on every
    SM, without a last wave that is mostly empty, and without splits so thin that writing and
    merging their float32 partials outweighs the tiles they share. Ties go to fewer splits. Never
    fewer than the config's ``min_tiles_per_split`` tiles a split, nor more than MAX_SPLITS splits. ``arch`` as for ``choose_config``.
    """
    cfg = choose_config(batch, topk, heads, arch)
    head_blocks = triton.cdiv(heads, cfg.block_h) * (2 if cfg.d_halves else 1)
    tiles = max(1, triton.cdiv(topk, cfg.block_t))
    slots = max(1, sm_count * cfg.programs_per_sm)
    best, best_cost = 1, math.inf
    for splits in range(1, min(max(1, tiles // cfg.min_tiles_per_split), MAX_SPLITS) + 1):
        waves = triton.cdiv(batch * head_blocks * splits, slots)
        cost = waves * (triton.cdiv(tiles, splits) + (_PARTIAL_COST_TILES if splits > 1 else 0.0))
        if cost < best_cost - 1e-9:
            best, best_cost = splits, cost
    return best


def _interpreting() -> bool:
    """Under TRITON_INTERPRET=1 bf16 arithmetic is done on float32 copies: the same values (bf16 ->
    float32 is exact, and each product is exact in both), but Triton 3.9's interpreter stores bf16
    as uint16 and multiplies (elementwise and in tl.dot) the raw bit patterns."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device_arch(device: torch.device) -> Optional[int]:
    """Compute capability of a CUDA device as 10 * major + minor (90 on the H100/H200); None on the CPU
    and under the interpreter (which runs no Gluon)."""
    if device.type != "cuda" or _interpreting():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the CPU interpreter: a few splits, so the split and merge paths run


def _flat_views(k_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    num_pages, stride = k_cache.shape[0], k_cache.stride(0)
    raw = k_cache.as_strided((num_pages * stride,), (1,)).view(torch.uint8)
    return raw.view(torch.float8_e4m3fn), raw, raw.view(torch.bfloat16)


def _check_inputs(q, k_cache, indices, head_dim_v):
    if q.dim() != 4 or q.shape[1] != 1 or q.shape[3] != HEAD_DIM:
        raise ValueError(f"q must be [B, 1, H, {HEAD_DIM}], got {list(q.shape)}")
    if q.dtype != torch.bfloat16:
        raise ValueError(f"q must be bfloat16, got {q.dtype}")
    if head_dim_v != HEAD_DIM:
        raise ValueError(f"head_dim_v must be {HEAD_DIM}, got {head_dim_v}")
    if k_cache.dim() != 4 or k_cache.shape[-1] != dsv4_cache.BYTES_PER_TOKEN:
        raise ValueError(f"k_cache must be [pages, page_size, 1, {dsv4_cache.BYTES_PER_TOKEN}]")
    if k_cache.stride(0) % dsv4_cache.DATA_STRIDE != 0:
        raise ValueError("k_cache page stride must be a multiple of 576 bytes")
    if indices.shape[0] != q.shape[0]:
        raise ValueError("indices and q disagree on the batch size")


def _launch_splits(q3, k_cache, indices, topk_length, o_part, lse_part, softmax_scale, splits, split_offset, cfg):
    batch, heads, _ = q3.shape
    idx = indices.reshape(batch, -1)
    if idx.dtype != torch.int32:
        idx = idx.to(torch.int32)
    if idx.stride(-1) != 1:
        idx = idx.contiguous()
    topk = idx.shape[1]
    page_size, page_bytes = k_cache.shape[1], k_cache.stride(0)
    fp8, u8, bf16 = _flat_views(k_cache)
    has_len = topk_length is not None
    lens = topk_length.reshape(-1).to(torch.int32) if has_len else idx  # any tensor when unused
    if cfg.sm90:
        if gluon is None or device_arch(q3.device) != SM90_ARCH:
            raise RuntimeError("the sm90 kernel needs Triton's Gluon and a compute capability 9.0 GPU")
        if cfg.ws_regs:
            _split_kernel_ws[(triton.cdiv(heads, 64), splits, batch)](
                q3, fp8, u8, bf16, idx, lens, o_part, lse_part,
                float(softmax_scale) * LOG2E, page_size, page_bytes, page_size * dsv4_cache.DATA_STRIDE,
                heads, topk, splits, split_offset, o_part.shape[1],
                q3.stride(0), q3.stride(1), idx.stride(0),
                HAS_TOPK_LEN=has_len, BLOCK_T=cfg.block_t, STAGES=cfg.num_stages, CONSUMER_REGS=cfg.ws_regs[0],
                PRODUCER_REGS=cfg.ws_regs[1], BATCH=cfg.ws_batch, ABLATE=cfg.ablate, num_warps=4, maxnreg=WS_MAXNREG,
            )  # fmt: skip
            return
        _split_kernel_sm90[(triton.cdiv(heads, 64), splits, batch)](
            q3, fp8, u8, bf16, idx, lens, o_part, lse_part,
            float(softmax_scale) * LOG2E, page_size, page_bytes, page_size * dsv4_cache.DATA_STRIDE,
            heads, topk, splits, split_offset, o_part.shape[1],
            q3.stride(0), q3.stride(1), idx.stride(0),
            HAS_TOPK_LEN=has_len, BLOCK_T=cfg.block_t, DEQUANT_ROWS=cfg.dequant_rows, num_warps=cfg.num_warps,
        )  # fmt: skip
        return
    if cfg.d_halves:
        _split_dhalf_kernel[(2 * triton.cdiv(heads, cfg.block_h), splits, batch)](
            q3, fp8, u8, bf16, idx, lens, o_part, lse_part,
            float(softmax_scale) * LOG2E, page_size, page_bytes, page_size * dsv4_cache.DATA_STRIDE,
            heads, topk, splits, split_offset, o_part.shape[1],
            q3.stride(0), q3.stride(1), idx.stride(0),
            HAS_TOPK_LEN=has_len, BLOCK_H=cfg.block_h, BLOCK_T=cfg.block_t, INTERPRETER=_interpreting(),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        return
    grid = (triton.cdiv(heads, cfg.block_h), splits, batch)
    programs = grid[0] * grid[1] * grid[2]
    if cfg.p_scratch:
        scratch = torch.empty(programs * 2 * cfg.block_h * cfg.block_t, dtype=torch.bfloat16, device=q3.device)
        alpha_scratch = torch.empty(programs * 2 * cfg.block_h, dtype=torch.float32, device=q3.device)
    else:
        scratch = alpha_scratch = o_part
    _split_kernel[grid](
        q3, fp8, u8, bf16, idx, lens, o_part, lse_part, scratch, alpha_scratch,
        float(softmax_scale) * LOG2E, page_size, page_bytes, page_size * dsv4_cache.DATA_STRIDE,
        heads, topk, splits, split_offset, o_part.shape[1],
        q3.stride(0), q3.stride(1), idx.stride(0),
        HAS_TOPK_LEN=has_len, BLOCK_H=cfg.block_h, BLOCK_T=cfg.block_t, P_SCRATCH=cfg.p_scratch,
        INTERPRETER=_interpreting(), ABLATE=cfg.ablate,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip


def plan_splits(batch, topk, heads, device, num_splits=None) -> int:
    """The split count the wrapper uses: ``num_splits`` if given, else ``choose_num_splits``."""
    if num_splits is not None:
        if num_splits < 1:
            raise ValueError("num_splits must be >= 1")
        return int(num_splits)
    return choose_num_splits(batch, topk, heads, _sm_count(device), device_arch(device))


def sparse_mla_decode_into(
    out: torch.Tensor,
    lse: torch.Tensor,
    workspace: tuple[torch.Tensor, torch.Tensor] | None,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: Optional[torch.Tensor],
    attn_sink: Optional[torch.Tensor],
    head_dim_v: int,
    softmax_scale: Optional[float],
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    *,
    num_splits: Optional[int] = None,
    config: Optional[KernelConfig] = None,
) -> None:
    """``sparse_mla_decode`` writing into given buffers: out ``[B, 1, H, 512]`` bf16, lse ``[B, H]`` float32.

    ``workspace`` is (o_part ``[B, S, H, 512]`` float32, lse_part ``[B, S, H]`` float32) with S the
    total split count (both caches), or None to allocate it. The check passes poisoned buffers here
    so that an element no kernel writes shows up as NaN.
    """
    _check_inputs(q, k_cache, indices, head_dim_v)
    batch, _, heads, _ = q.shape
    if softmax_scale is None:
        softmax_scale = HEAD_DIM**-0.5
    q3 = q[:, 0]
    if q3.stride(-1) != 1:
        q3 = q3.contiguous()
    has_extra = extra_k_cache is not None and extra_indices is not None
    topk = indices.reshape(batch, -1).shape[1]
    cfg = config or choose_config(batch, topk, heads, device_arch(q.device))
    splits = plan_splits(batch, topk, heads, q.device, num_splits)
    extra_splits = 0
    if has_extra:
        _check_inputs(q, extra_k_cache, extra_indices, head_dim_v)
        extra_topk = extra_indices.reshape(batch, -1).shape[1]
        extra_splits = plan_splits(batch, extra_topk, heads, q.device, num_splits)
    total = splits + extra_splits
    if workspace is None:
        o_part = torch.empty(batch, total, heads, HEAD_DIM, dtype=torch.float32, device=q.device)
        lse_part = torch.empty(batch, total, heads, dtype=torch.float32, device=q.device)
    else:
        o_part, lse_part = workspace
        if tuple(o_part.shape) != (batch, total, heads, HEAD_DIM) or tuple(lse_part.shape) != (batch, total, heads):
            raise ValueError(f"workspace must be [{batch}, {total}, {heads}, 512] and [{batch}, {total}, {heads}]")
    _launch_splits(q3, k_cache, indices, topk_length, o_part, lse_part, softmax_scale, splits, 0, cfg)
    if has_extra:
        _launch_splits(
            q3, extra_k_cache, extra_indices, extra_topk_length, o_part, lse_part, softmax_scale, extra_splits,
            splits, cfg,
        )  # fmt: skip
    sink = attn_sink.float().contiguous() if attn_sink is not None else lse_part
    splits_pad = triton.next_power_of_2(total)
    block_d = max(64, min(512, 4096 // splits_pad))  # about 4096 partial values a program
    _combine_kernel[(batch * heads, HEAD_DIM // block_d)](
        o_part, lse_part, sink, out, lse, heads, total, out.stride(0), out.stride(2),
        HAS_SINK=attn_sink is not None, SPLITS_PAD=splits_pad, BLOCK_D=block_d, num_warps=4,
    )  # fmt: skip


def workspace_shape(batch, heads, topk, device, num_splits=None, extra_topk=None) -> int:
    """Total split count (both caches) the wrapper will use, for sizing a workspace."""
    total = plan_splits(batch, topk, heads, device, num_splits)
    if extra_topk is not None:
        total += plan_splits(batch, extra_topk, heads, device, num_splits)
    return total


def sparse_mla_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: Optional[torch.Tensor],
    attn_sink: Optional[torch.Tensor],
    head_dim_v: int,
    softmax_scale: Optional[float],
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    *,
    num_splits: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode over a DSV4 paged FP8 cache, split-K; drop-in for SGLang's Triton wrapper.

    q ``[B, 1, H, 512]`` bf16; k_cache ``[pages, page_size, 1, 584]`` (stride(0) = page stride in
    bytes); indices ``[B, 1, topk]`` int32, -1 invalid; topk_length ``[B]`` (tokens past it are
    ignored) or None; attn_sink ``[H]`` or None (joins the softmax denominator; the returned LSE
    includes it); softmax_scale None means 512^-0.5. The extra cache, when given, is attended too
    and merged by LSE. ``num_splits`` overrides ``choose_num_splits`` (per cache).
    A row with no valid token gives output 0 and LSE -inf (the sink's value when there is a sink).
    Returns (out ``[B, 1, H, 512]`` bf16, lse ``[B, H, 1]`` float32).
    """
    batch, _, heads, _ = q.shape
    out = torch.empty(batch, 1, heads, HEAD_DIM, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=q.device)
    sparse_mla_decode_into(
        out, lse, None, q, k_cache, indices, topk_length, attn_sink, head_dim_v, softmax_scale,
        extra_k_cache, extra_indices, extra_topk_length, num_splits=num_splits,
    )  # fmt: skip
    return out, lse.view(batch, heads, 1)


if __name__ == "__main__":
    from tools.kernels.sparse_mla_decode_cli import main

    sys.exit(main())
