"""The split-K decode's kernel for sm_120 (RTX PRO 6000 Blackwell): ``_split_kernel_sm120``, Triton language.

sm_120 has mma.sync tensor cores (Triton's MMA v2) but no wgmma, at most 101,376 B of shared memory a
block and 255 registers a thread; the Hopper kernels (``sm90``, ``sm90_ws``) do not run there, and the
plain ``_split_kernel`` / ``_split_dhalf_kernel`` spill on it (their Q block, [heads, 512] bf16, stays in
registers across the tile loop as the A operand of Q K^T: 128 registers a thread at 16 heads on 4 warps).
This kernel is shaped for those resources:

* Q is never held: S = Q K^T is summed over the 8 groups of 64 dims in a loop that is not unrolled, each
  group reading its [BLOCK_H, 64] slice of Q and dequantizing its [BLOCK_T, 64] slice of K (fp8 x its
  UE8M0 scale, or the bf16 rope group) just before its dot, so one group's operands are live at a time;
* P V reads the tile whole ([BLOCK_T, 512], the same bytes again, from L1) into one dot with the float32
  accumulator [BLOCK_H, 512], the only large value carried over the tile loop: BLOCK_H x 512 / threads
  registers (64 at 16 heads on 4 warps, 32 heads on 8, 128 at 64 heads on 8);
* everything else (the split of the row's valid prefix, the online softmax in base 2, the float32
  partial and its LSE) is ``_split_kernel``'s, so ``_combine_kernel`` merges these partials unchanged.

Kept in a file of its own, with its helpers, because the grid reader (``kernel.grid``) evaluates a kernel
within its own file; the launch is ``tools.kernels.sparse_mla_decode._launch_splits``'s. The tile configs
(``tiles.SM120_SMALL`` ...) were chosen by Triton's ahead-of-time compile for sm_120 (Triton 3.6 and 3.9):
0 spill bytes and within the shared memory, every one (``scripts/sm120_splitk_compile.py``).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _dot(a, b, acc, INTERPRETER: tl.constexpr):
    """a @ b + acc on the tensor cores; with float32 operands under the CPU interpreter, which has no bf16 dot."""
    if INTERPRETER:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        out = tl.dot(a, b, acc)
    return out


@triton.jit
def _sm120_rows(idx, page_size, page_bytes, scale_section_off):
    """Byte offsets of the tokens ``idx`` (-1: none) in the paged cache: data (fp8 nope, 576 bytes a token
    from the page start), its 8 scale bytes, and the bf16 rope (element offset in the bf16 view)."""
    valid = idx >= 0
    safe = tl.where(valid, idx, 0)
    page = (safe // page_size).to(tl.int64)
    slot = (safe % page_size).to(tl.int64)
    data_base = page * page_bytes + slot * 576
    scale_base = page * page_bytes + scale_section_off + slot * 8
    rope_base = page * (page_bytes // 2) + slot * 288 + 224
    return valid, data_base, scale_base, rope_base


@triton.jit
def _sm120_group(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base, g,
                 INTERPRETER: tl.constexpr):  # fmt: skip
    """bf16 [BLOCK_T, 64] of dims [64 g, 64 g + 64): group g < 7 is fp8 nope x 2^(scale - 127), group 7 the
    bf16 rope. Invalid tokens read as zeros."""
    d = tl.arange(0, 64)
    if g < 7:
        nope = tl.load(cache_fp8_ptr + data_base[:, None] + g * 64 + d[None, :], mask=valid[:, None], other=0.0)
        sc = tl.load(cache_u8_ptr + scale_base + g, mask=valid, other=127)
        scale = tl.math.exp2(sc.to(tl.float32) - 127.0)
        if INTERPRETER:
            k = (nope.to(tl.float32) * scale[:, None]).to(tl.bfloat16)
        else:
            # a power-of-two scale times an e4m3 value is exact in bf16: the product is formed there
            k = nope.to(tl.bfloat16) * scale.to(tl.bfloat16)[:, None]
    else:
        k = tl.load(cache_bf16_ptr + rope_base[:, None] + d[None, :], mask=valid[:, None], other=0.0)
    return k


@triton.jit
def _sm120_tile_bytes(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base):
    """The raw bytes of the tokens' P V operand: fp8 nope [BLOCK_T, 8, 64] (group 7 empty), its scale bytes
    [BLOCK_T, 8], bf16 rope [BLOCK_T, 1, 64]; issued early, they are in flight while S is formed."""
    g = tl.arange(0, 8)
    d = tl.arange(0, 64)
    is_nope = g < 7
    nope = tl.load(cache_fp8_ptr + data_base[:, None, None] + (g * 64)[None, :, None] + d[None, None, :],
                   mask=valid[:, None, None] & is_nope[None, :, None], other=0.0)  # fmt: skip
    sc = tl.load(cache_u8_ptr + scale_base[:, None] + g[None, :], mask=valid[:, None] & is_nope[None, :], other=127)
    rope = tl.load(cache_bf16_ptr + rope_base[:, None, None] + d[None, None, :], mask=valid[:, None, None], other=0.0)
    return nope, sc, rope


@triton.jit
def _sm120_tile(nope, sc, rope, BLOCK_T: tl.constexpr, INTERPRETER: tl.constexpr):
    """bf16 [BLOCK_T, 512] (the P V dot's operand) from ``_sm120_tile_bytes``: the 8 groups of
    ``_sm120_group``, reshaped."""
    is_nope = tl.arange(0, 8) < 7
    scale = tl.math.exp2(sc.to(tl.float32) - 127.0)
    if INTERPRETER:
        kv = (nope.to(tl.float32) * scale[:, :, None]).to(tl.bfloat16)
    else:
        kv = nope.to(tl.bfloat16) * scale.to(tl.bfloat16)[:, :, None]
    kv = tl.where(is_nope[None, :, None], kv, rope)
    return tl.reshape(kv, [BLOCK_T, 512])


@triton.jit
def _sm120_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base,
                HALF: tl.constexpr, BLOCK_T: tl.constexpr, INTERPRETER: tl.constexpr):  # fmt: skip
    """bf16 [BLOCK_T, 256]: dims [256 HALF, 256 HALF + 256) of the P V operand (groups 4 HALF .. 4 HALF + 3;
    the second half ends with the bf16 rope), loaded and dequantized in one piece."""
    g = HALF * 4 + tl.arange(0, 4)
    d = tl.arange(0, 64)
    is_nope = g < 7
    nope = tl.load(cache_fp8_ptr + data_base[:, None, None] + (g * 64)[None, :, None] + d[None, None, :],
                   mask=valid[:, None, None] & is_nope[None, :, None], other=0.0)  # fmt: skip
    sc = tl.load(cache_u8_ptr + scale_base[:, None] + g[None, :], mask=valid[:, None] & is_nope[None, :], other=127)
    scale = tl.math.exp2(sc.to(tl.float32) - 127.0)
    if INTERPRETER:
        kv = (nope.to(tl.float32) * scale[:, :, None]).to(tl.bfloat16)
    else:
        kv = nope.to(tl.bfloat16) * scale.to(tl.bfloat16)[:, :, None]
    if HALF == 1:
        rope = tl.load(cache_bf16_ptr + rope_base[:, None, None] + d[None, None, :], mask=valid[:, None, None], other=0.0)
        kv = tl.where(is_nope[None, :, None], kv, rope)
    return tl.reshape(kv, [BLOCK_T, 256])


@triton.jit
def _split_kernel_sm120(
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
    PREFETCH: tl.constexpr = False,
    FLAT_S: tl.constexpr = False,
    HALVES: tl.constexpr = False,
    DV_SPLIT: tl.constexpr = False,
):
    """One (head block, split, batch row): ``_split_kernel``'s contract (the slice's normalised float32
    output and base-2 LSE at split ``split_offset + split``; -inf and 0 for a slice with no valid token),
    with S = Q K^T summed group by group (Q read a [BLOCK_H, 64] slice at a time, never held) and
    O += P V in one dot over the whole tile, both on mma.sync.

    Kept whole: a Triton kernel body, the program one launch runs (its tile loop carries the online
    softmax's running max, sum and accumulator).
    """
    hb = tl.program_id(0)
    if DV_SPLIT:
        # two programs a head block, one for each half of the 512 output dims: each forms S whole (the K bytes
        # twice through L2, once from HBM when the pair runs together) and keeps half the accumulator
        half = hb % 2
        hb = hb // 2
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
    d64 = tl.arange(0, 64)
    q_group = q_ptr + b * stride_qb + h[:, None] * stride_qh + d64[None, :]
    idx_ptr = indices_ptr + b * stride_ib
    t_offs = tl.arange(0, BLOCK_T)

    m_i = tl.full([BLOCK_H], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    if DV_SPLIT:
        acc = tl.zeros([BLOCK_H, 256], dtype=tl.float32)
    elif HALVES:
        # the 512 output dims as two accumulators: each P V dot's B operand is half the tile, so the registers
        # its fragments take while the other half's accumulator waits are half as many
        acc = tl.zeros([BLOCK_H, 256], dtype=tl.float32)
        acc_hi = tl.zeros([BLOCK_H, 256], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_H, 512], dtype=tl.float32)
    idx_next = tl.load(idx_ptr + start + t_offs, mask=start + t_offs < end, other=-1)
    for t0 in range(start, end, BLOCK_T):
        if PREFETCH:
            # the tile's indices were loaded an iteration ahead, and its P V bytes are issued before S is formed:
            # the two loads a tile waits on are in flight behind other work (one program an SM hides no latency)
            idx = idx_next
            t_next = t0 + BLOCK_T + t_offs
            idx_next = tl.load(idx_ptr + t_next, mask=t_next < end, other=-1)
        else:
            t = t0 + t_offs
            idx = tl.load(idx_ptr + t, mask=t < end, other=-1)
        valid, data_base, scale_base, rope_base = _sm120_rows(idx, page_size, page_bytes, scale_section_off)
        if PREFETCH:
            nope, sc, rope = _sm120_tile_bytes(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base,
                                               rope_base)  # fmt: skip
        s = tl.zeros([BLOCK_H, BLOCK_T], dtype=tl.float32)
        if FLAT_S:
            # the 7 fp8 groups in a loop with no branch (Triton's pipeliner takes loads in straight-line code
            # only: the K gathers become cp.async into shared memory, stages ahead), the rope group after it
            for g in range(0, 7):
                q = tl.load(q_group + g * 64, mask=h_mask[:, None], other=0.0)
                kraw = tl.load(cache_fp8_ptr + data_base[:, None] + g * 64 + d64[None, :], mask=valid[:, None], other=0.0)
                sc_g = tl.load(cache_u8_ptr + scale_base + g, mask=valid, other=127)
                scale = tl.math.exp2(sc_g.to(tl.float32) - 127.0)
                if INTERPRETER:
                    k = (kraw.to(tl.float32) * scale[:, None]).to(tl.bfloat16)
                else:
                    k = kraw.to(tl.bfloat16) * scale.to(tl.bfloat16)[:, None]
                s = _dot(q, tl.trans(k), s, INTERPRETER)
            q = tl.load(q_group + 448, mask=h_mask[:, None], other=0.0)
            kr = tl.load(cache_bf16_ptr + rope_base[:, None] + d64[None, :], mask=valid[:, None], other=0.0)
            s = _dot(q, tl.trans(kr), s, INTERPRETER)
        else:
            for g in range(0, 8):  # a loop, not unrolled: one group's Q and K slices live at a time
                q = tl.load(q_group + g * 64, mask=h_mask[:, None], other=0.0)
                k = _sm120_group(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base,
                                 g, INTERPRETER)  # fmt: skip
                s = _dot(q, tl.trans(k), s, INTERPRETER)
        s = tl.where(valid[None, :], s * qk_scale_log2, -1.0e30)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.where(valid[None, :], tl.math.exp2(s - m_new[:, None]), 0.0)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        p16 = p.to(tl.bfloat16)
        if DV_SPLIT:
            if half == 0:
                kv = _sm120_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base, 0,
                                 BLOCK_T, INTERPRETER)  # fmt: skip
            else:
                kv = _sm120_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base, 1,
                                 BLOCK_T, INTERPRETER)  # fmt: skip
            acc = _dot(p16, kv, acc * alpha[:, None], INTERPRETER)
        elif HALVES:
            kv_lo = _sm120_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base, 0,
                                BLOCK_T, INTERPRETER)  # fmt: skip
            acc = _dot(p16, kv_lo, acc * alpha[:, None], INTERPRETER)
            kv_hi = _sm120_half(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base, scale_base, rope_base, 1,
                                BLOCK_T, INTERPRETER)  # fmt: skip
            acc_hi = _dot(p16, kv_hi, acc_hi * alpha[:, None], INTERPRETER)
        else:
            if not PREFETCH:
                nope, sc, rope = _sm120_tile_bytes(cache_fp8_ptr, cache_u8_ptr, cache_bf16_ptr, valid, data_base,
                                                   scale_base, rope_base)  # fmt: skip
            kv = _sm120_tile(nope, sc, rope, BLOCK_T, INTERPRETER)
            acc = _dot(p16, kv, acc * alpha[:, None], INTERPRETER)
        m_i = m_new

    has_any = l_i > 0.0
    inv = 1.0 / tl.where(has_any, l_i, 1.0)
    slot = (b * total_splits + split_offset + split) * heads + h
    if DV_SPLIT:
        dim = half * 256 + tl.arange(0, 256)
        tl.store(o_part_ptr + slot[:, None] * 512 + dim[None, :], acc * inv[:, None], mask=h_mask[:, None])
    elif HALVES:
        dim = tl.arange(0, 256)
        tl.store(o_part_ptr + slot[:, None] * 512 + dim[None, :], acc * inv[:, None], mask=h_mask[:, None])
        tl.store(o_part_ptr + slot[:, None] * 512 + 256 + dim[None, :], acc_hi * inv[:, None], mask=h_mask[:, None])
    else:
        dim = tl.arange(0, 512)
        tl.store(o_part_ptr + slot[:, None] * 512 + dim[None, :], acc * inv[:, None], mask=h_mask[:, None])
    lse2 = tl.where(has_any, m_i + tl.math.log2(tl.where(has_any, l_i, 1.0)), float("-inf"))
    tl.store(lse_part_ptr + slot, lse2, mask=h_mask)
