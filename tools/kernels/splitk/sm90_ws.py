"""The warp-specialized Hopper (sm_90) kernel in Gluon: ``_split_kernel_ws`` (tile config ``LARGE_WS``).

Three partitions of one warpgroup each share a ring of dequantized bf16 KV tiles in shared memory:
a producer gathers, dequantizes and stores tile i + 1 while two consumers run the dots of tile i,
each for half of the 512 output dims. mbarriers hand the ring's stages over: "full" (producer ->
consumers, one arrival) and "empty" (consumers -> producer, one arrival from each consumer).
Defined only where this Triton has Gluon (``gluon_lang``).
"""

from __future__ import annotations

from tools.kernels.splitk.gluon_lang import gluon

if gluon is not None:
    from tools.kernels.splitk.gluon_lang import (
        _gl_async_copy,
        _gl_cp_async,
        _gl_cta_barrier,
        _gl_fence_async_shared,
        _gl_mbarrier,
        _gl_wgmma,
        _gl_wgmma_wait,
        gl,
    )

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
    def _ws_load_idx(idx_ptr, x_idx_ptr, t, end, n_main, p_main, HAS_EXTRA: gl.constexpr):
        """Indices at row positions ``t``, -1 past ``end``. With an extra cache the row is the main cache's
        ``n_main`` tokens padded to ``p_main`` (a whole number of tiles), then the extra cache's from its 0."""
        if HAS_EXTRA:
            main = gl.load(idx_ptr + t, mask=(t < end) & (t < n_main), other=-1)
            extra = gl.load(x_idx_ptr + (t - p_main), mask=(t < end) & (t >= p_main), other=-1)
            idx = gl.where(t < p_main, main, extra)
        else:
            idx = gl.load(idx_ptr + t, mask=t < end, other=-1)
        return idx

    @gluon.jit
    def _ws_issue(raw_s, sc_s, u8_ptr, x_u8_ptr, idx, t, end, slot, in_main, PAGE_SIZE: gl.constexpr, page_bytes,
                  scale_section_off, X_PAGE_SIZE: gl.constexpr, x_page_bytes, x_scale_section_off,
                  HAS_EXTRA: gl.constexpr):  # fmt: skip
        """``_ws_issue_half`` from the cache the half lies in (``in_main``: a tile is wholly in one cache)."""
        if HAS_EXTRA:
            if in_main:
                _ws_issue_half(raw_s, sc_s, u8_ptr, idx, t, end, slot, PAGE_SIZE, page_bytes, scale_section_off)
            else:
                _ws_issue_half(raw_s, sc_s, x_u8_ptr, idx, t, end, slot, X_PAGE_SIZE, x_page_bytes, x_scale_section_off)
        else:
            _ws_issue_half(raw_s, sc_s, u8_ptr, idx, t, end, slot, PAGE_SIZE, page_bytes, scale_section_off)

    @gluon.jit
    def _ws_rope(kv, bf16_ptr, x_bf16_ptr, idx, t, end, in_main, PAGE_SIZE: gl.constexpr, page_bytes,
                 X_PAGE_SIZE: gl.constexpr, x_page_bytes, HAS_EXTRA: gl.constexpr):  # fmt: skip
        """``_ws_issue_rope`` from the cache the half lies in (as ``_ws_issue``)."""
        if HAS_EXTRA:
            if in_main:
                _ws_issue_rope(kv, bf16_ptr, idx, t, end, PAGE_SIZE, page_bytes)
            else:
                _ws_issue_rope(kv, x_bf16_ptr, idx, t, end, X_PAGE_SIZE, x_page_bytes)
        else:
            _ws_issue_rope(kv, bf16_ptr, idx, t, end, PAGE_SIZE, page_bytes)

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
                    ABLATE: gl.constexpr, x_u8_ptr, x_bf16_ptr, x_idx_ptr, X_PAGE_SIZE: gl.constexpr, x_page_bytes,
                    x_scale_section_off, n_main, p_main, HAS_EXTRA: gl.constexpr):  # fmt: skip
        """The producer warpgroup. The raw bytes of each 32-token half tile arrive by cp.async in a
        two-slot ring, requested two halves ahead (so a half's gather overlaps the dequantization of the
        one before); once tile i's ring stage is empty, its rope values are copied straight into place,
        both halves are dequantized into it, its validity is written as a 0 / -inf bias, and it is marked
        full. Pending copy groups are always (oldest first) half h, then the next two requests, so
        ``wait_group(2)`` is "half h has landed". Invalid and out-of-range tokens are zero, never read.
        With an extra cache (HAS_EXTRA) each tile is read from the cache its row positions lie in (see
        ``_ws_load_idx``)."""
        deq: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
        STAGES: gl.constexpr = kv_s.type.shape[0]
        BLOCK_T: gl.constexpr = kv_s.type.shape[1]
        ar = gl.arange(0, 32, layout=gl.SliceLayout(1, deq))
        t_a = start + ar
        t_b = start + 32 + ar
        idx_a = _ws_load_idx(idx_ptr, x_idx_ptr, t_a, end, n_main, p_main, HAS_EXTRA)
        idx_b = _ws_load_idx(idx_ptr, x_idx_ptr, t_b, end, n_main, p_main, HAS_EXTRA)
        pos = start  # the current tile's first row position
        n_copied = n_tiles
        if ABLATE == 1:  # a timing probe: the stages go round with no gather or dequantization
            n_copied = 0
            for i in range(n_tiles):
                _gl_mbarrier.wait(empty_bars.index(i % STAGES), ((i // STAGES) & 1) ^ 1)
                _gl_mbarrier.arrive(full_bars.index(i % STAGES), count=1)
        else:
            _ws_issue(raw_s, sc_s, cache_u8_ptr, x_u8_ptr, idx_a, t_a, end, 0, pos < p_main, PAGE_SIZE, page_bytes,
                      scale_section_off, X_PAGE_SIZE, x_page_bytes, x_scale_section_off, HAS_EXTRA)  # fmt: skip
            _ws_issue(raw_s, sc_s, cache_u8_ptr, x_u8_ptr, idx_b, t_b, end, 1, pos < p_main, PAGE_SIZE, page_bytes,
                      scale_section_off, X_PAGE_SIZE, x_page_bytes, x_scale_section_off, HAS_EXTRA)  # fmt: skip
        for i in range(n_copied):
            stage = i % STAGES
            idx_na = _ws_load_idx(idx_ptr, x_idx_ptr, t_a + BLOCK_T, end, n_main, p_main, HAS_EXTRA)  # the next requests'
            idx_nb = _ws_load_idx(idx_ptr, x_idx_ptr, t_b + BLOCK_T, end, n_main, p_main, HAS_EXTRA)
            in_main = pos < p_main
            next_in_main = pos + BLOCK_T < p_main
            _gl_mbarrier.wait(empty_bars.index(stage), ((i // STAGES) & 1) ^ 1)
            kv = kv_s.index(stage)
            _ws_rope(kv.slice(0, 32, dim=0), cache_bf16_ptr, x_bf16_ptr, idx_a, t_a, end, in_main, PAGE_SIZE, page_bytes,
                     X_PAGE_SIZE, x_page_bytes, HAS_EXTRA)  # fmt: skip
            _ws_rope(kv.slice(32, 32, dim=0), cache_bf16_ptr, x_bf16_ptr, idx_b, t_b, end, in_main, PAGE_SIZE, page_bytes,
                     X_PAGE_SIZE, x_page_bytes, HAS_EXTRA)  # fmt: skip
            _gl_async_copy.commit_group()
            _gl_async_copy.wait_group(2)  # pending: half 2i, half 2i+1, rope(i)
            _gl_cta_barrier()
            _ws_dequant_half(raw_s, sc_s, kv.slice(0, 32, dim=0), 0, BATCH)
            _gl_cta_barrier()  # slot 0 is read: refill it
            _ws_issue(raw_s, sc_s, cache_u8_ptr, x_u8_ptr, idx_na, t_a + BLOCK_T, end, 0, next_in_main, PAGE_SIZE,
                      page_bytes, scale_section_off, X_PAGE_SIZE, x_page_bytes, x_scale_section_off, HAS_EXTRA)  # fmt: skip
            _gl_async_copy.wait_group(2)  # pending: half 2i+1, rope(i), half 2i+2
            _gl_cta_barrier()
            _ws_dequant_half(raw_s, sc_s, kv.slice(32, 32, dim=0), 1, BATCH)
            _gl_cta_barrier()
            _ws_issue(raw_s, sc_s, cache_u8_ptr, x_u8_ptr, idx_nb, t_b + BLOCK_T, end, 1, next_in_main, PAGE_SIZE,
                      page_bytes, scale_section_off, X_PAGE_SIZE, x_page_bytes, x_scale_section_off, HAS_EXTRA)  # fmt: skip
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
            pos = pos + BLOCK_T
        _gl_async_copy.wait_group(0)

    # Worker partitions take one argument list; each picks its part.
    @gluon.jit
    def _ws_consumer_lo(q_s, kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                        o_part_ptr, lse_part_ptr, start, end, n_tiles, qk_scale_log2, PAGE_SIZE: gl.constexpr, page_bytes,
                        scale_section_off, slot_base, heads, hb, BATCH: gl.constexpr, ABLATE: gl.constexpr, x_u8_ptr,
                        x_bf16_ptr, x_idx_ptr, X_PAGE_SIZE: gl.constexpr, x_page_bytes, x_scale_section_off, n_main,
                        p_main, HAS_EXTRA: gl.constexpr):  # fmt: skip
        _ws_consume(q_s, kv_s, bias_s, full_bars, empty_bars, o_part_ptr, lse_part_ptr, n_tiles, qk_scale_log2,
                    slot_base, heads, hb, 0, ABLATE)  # fmt: skip

    @gluon.jit
    def _ws_consumer_hi(q_s, kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                        o_part_ptr, lse_part_ptr, start, end, n_tiles, qk_scale_log2, PAGE_SIZE: gl.constexpr, page_bytes,
                        scale_section_off, slot_base, heads, hb, BATCH: gl.constexpr, ABLATE: gl.constexpr, x_u8_ptr,
                        x_bf16_ptr, x_idx_ptr, X_PAGE_SIZE: gl.constexpr, x_page_bytes, x_scale_section_off, n_main,
                        p_main, HAS_EXTRA: gl.constexpr):  # fmt: skip
        _ws_consume(q_s, kv_s, bias_s, full_bars, empty_bars, o_part_ptr, lse_part_ptr, n_tiles, qk_scale_log2,
                    slot_base, heads, hb, 1, ABLATE)  # fmt: skip

    @gluon.jit
    def _ws_producer(q_s, kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                     o_part_ptr, lse_part_ptr, start, end, n_tiles, qk_scale_log2, PAGE_SIZE: gl.constexpr, page_bytes,
                     scale_section_off, slot_base, heads, hb, BATCH: gl.constexpr, ABLATE: gl.constexpr, x_u8_ptr,
                     x_bf16_ptr, x_idx_ptr, X_PAGE_SIZE: gl.constexpr, x_page_bytes, x_scale_section_off, n_main,
                     p_main, HAS_EXTRA: gl.constexpr):  # fmt: skip
        _ws_produce(kv_s, raw_s, sc_s, bias_s, full_bars, empty_bars, cache_u8_ptr, cache_bf16_ptr, idx_ptr,
                    start, end, n_tiles, PAGE_SIZE, page_bytes, scale_section_off, BATCH, ABLATE, x_u8_ptr, x_bf16_ptr,
                    x_idx_ptr, X_PAGE_SIZE, x_page_bytes, x_scale_section_off, n_main, p_main, HAS_EXTRA)  # fmt: skip

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
        x_cache_u8_ptr,
        x_cache_bf16_ptr,
        x_indices_ptr,
        x_topk_len_ptr,
        X_PAGE_SIZE: gl.constexpr,
        x_page_bytes,
        x_scale_section_off,
        x_topk,
        stride_xb,
        HAS_TOPK_LEN: gl.constexpr,
        BLOCK_T: gl.constexpr,
        STAGES: gl.constexpr,
        CONSUMER_REGS: gl.constexpr,
        PRODUCER_REGS: gl.constexpr,
        BATCH: gl.constexpr,
        ABLATE: gl.constexpr,
        HAS_EXTRA: gl.constexpr,
        HAS_X_TOPK_LEN: gl.constexpr,
    ):
        """``_split_kernel`` for Hopper, warp-specialized (launch with ``num_warps=4``: the default
        partition is the first consumer; two more warpgroups are the second consumer and the producer).

        Same contract as ``_split_kernel``. The producer fills a ``STAGES``-deep ring of dequantized bf16
        [BLOCK_T, 512] tiles while the consumers run wgmma on the previous one, so the gather and the
        dequantization leave the dots' critical path (``_split_kernel_sm90`` runs them in series).
        Shared memory: Q 64 KB, the bf16 ring (64 KB a 64-token stage), the raw ring (two 32-token
        slots, 32 KB) and the barriers. PAGE_SIZE is a compile-time constant (its division and modulo
        are on the producer's path); ABLATE 1 / 2 idles the producer / consumers (timing probes).
        BLOCK_T must be 64 (two 32-token halves a tile) and the launch needs ``maxnreg=WS_MAXNREG``.

        HAS_EXTRA: the two-cache call in one launch. A row is then the main cache's valid tokens, padded to
        whole tiles, followed by the extra cache's (``x_*``: its cache, indices, lengths and page layout),
        and ``num_splits`` splits cut that row: one softmax over both caches' tokens, as merging the two
        by LSE gives, with no split idle on a short cache.

        Kept whole: its lines are the launch's parameter list and the shared-memory setup the three
        partitions share; the work is in the partition functions above."""
        hb = gl.program_id(0)
        split = gl.program_id(1)
        b = gl.program_id(2).to(gl.int64)
        n_valid = topk
        if HAS_TOPK_LEN:
            n_valid = gl.minimum(gl.load(topk_len_ptr + b).to(gl.int32), topk)
        n_valid = gl.maximum(n_valid, 0)
        n_main = n_valid
        p_main = n_valid
        if HAS_EXTRA:
            n_x = x_topk
            if HAS_X_TOPK_LEN:
                n_x = gl.minimum(gl.load(x_topk_len_ptr + b).to(gl.int32), x_topk)
            p_main = gl.cdiv(n_main, BLOCK_T) * BLOCK_T
            n_valid = p_main + gl.maximum(n_x, 0)
        per_split = gl.cdiv(gl.cdiv(n_valid, num_splits), BLOCK_T) * BLOCK_T
        start = split * per_split
        end = gl.minimum(start + per_split, n_valid)
        n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_T)
        idx_ptr = indices_ptr + b * stride_ib
        x_idx_ptr = x_indices_ptr + b * stride_xb
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
                scale_section_off, slot_base, heads, hb, BATCH, ABLATE, x_cache_u8_ptr, x_cache_bf16_ptr, x_idx_ptr,
                X_PAGE_SIZE, x_page_bytes, x_scale_section_off, n_main, p_main, HAS_EXTRA)  # fmt: skip
        gl.warp_specialize([(_ws_consumer_lo, args), (_ws_consumer_hi, args), (_ws_producer, args)], [4, 4],
                           [CONSUMER_REGS, PRODUCER_REGS])  # fmt: skip
