"""The Hopper (sm_90) kernel in Gluon: ``_split_kernel_sm90``, wgmma fed by a cp.async ring.

Tile config ``LARGE_SM90``: kept as the sweeps' baseline for the warp-specialized kernel (``sm90_ws``),
which replaced it in the large regime. Defined only where this Triton has Gluon (``gluon_lang``).
"""

from __future__ import annotations

from tools.kernels.splitk.gluon_lang import gluon

if gluon is not None:
    from tools.kernels.splitk.gluon_lang import (
        _gl_async_copy,
        _gl_cp_async,
        _gl_cta_barrier,
        _gl_fence_async_shared,
        _gl_wgmma,
        _gl_wgmma_wait,
        gl,
    )

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

        Kept whole: a Gluon kernel body, the program one launch runs (the cp.async ring with its waits and
        barriers, and the wgmma accumulators in their layouts, are one pipeline); the committed H200
        measurements were taken of this source.
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
