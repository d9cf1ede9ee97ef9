"""GPU-only checks of the Hopper kernels' building blocks (skipped without a compute capability 9.0 GPU).

CI has no GPU: these run on the H200 through the device tool (``python -m pytest
tests/test_sparse_mla_decode_gpu.py``); their output is committed with the benchmark runs.
"""

from __future__ import annotations

import pytest
import torch

from tools.kernels.splitk import gluon_lang, sm90_ws

pytestmark = pytest.mark.skipif(
    gluon_lang.gluon is None or not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs Gluon and a compute capability 9.0 GPU",
)

if gluon_lang.gluon is not None:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    @gluon.jit
    def _dequant_probe(raw_ptr, sc_ptr, out_ptr):
        layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
        r = gl.arange(0, 32, layout=gl.SliceLayout(1, layout))
        c = gl.arange(0, 64, layout=gl.SliceLayout(0, layout))
        offs = gl.expand_dims(r, 1) * 64 + gl.expand_dims(c, 0)
        raw = gl.load(raw_ptr + offs)
        sc = gl.expand_dims(gl.load(sc_ptr + r), 1)
        gl.store(out_ptr + offs, sm90_ws._ws_dequant(raw, sc))


def test_ws_dequantization_is_exact_for_every_fp8_code_and_scale():
    # every e4m3 code (zeros, subnormals, normals, both signs) under scales from tiny to large
    codes = torch.arange(256, dtype=torch.uint8).repeat(8).view(32, 64)
    scales = torch.tensor([1, 60, 100, 110, 118, 120, 124, 126, 127, 128, 130, 133, 134, 135, 140, 150,
                           160, 190, 200, 230, 240, 250, 0, 2, 5, 8, 127, 129, 131, 113, 137, 145], dtype=torch.uint8)
    out = torch.empty(32, 64, dtype=torch.bfloat16, device="cuda")
    _dequant_probe[(1,)](codes.cuda(), scales.cuda(), out, num_warps=4)
    values = codes.view(torch.float8_e4m3fn).float() * torch.exp2(scales.float() - 127.0)[:, None]
    finite = ~values.isnan()
    expected = values.to(torch.bfloat16)
    got = out.cpu()
    bad = finite & (got.view(torch.int16) != expected.view(torch.int16))
    rows, cols = bad.nonzero(as_tuple=True)
    detail = [(int(codes[r, c]), int(scales[r]), float(got[r, c]), float(expected[r, c])) for r, c in zip(rows[:20], cols[:20])]
    assert not bad.any(), f"{int(bad.sum())} mismatches (code, scale byte, got, expected): {detail}"
    # subnormal codes (exponent bits 0, nonzero) at a scale that keeps them bf16-normal are not flushed
    sub = (codes & 0x78 == 0) & (codes & 0x07 != 0)
    assert (got[sub & (scales[:, None] == 127)] != 0).all()


@pytest.mark.parametrize("batch,topk,form", [(1, 512, "beside"), (3, 512, "beside"), (8, 768, "fused"), (64, 512, "fused")])
def test_the_two_cache_call_on_two_streams_waits_for_both_launches(batch, topk, form):
    """The model's call (128-token window plus the compressed top-k, sink, lengths from 0 to full):
    eager and replayed from a CUDA graph, into partial buffers poisoned with NaN before every replay, it
    gives the reference's result, bit for bit the same each time: a combine that ran before the side
    stream's launch finished would read NaN or stale partials; a fused launch that skipped or misread a
    cache's tiles would miss the reference."""
    from tools.kernels import dsv4_cache
    from tools.kernels import sparse_mla_decode as smd
    from tools.kernels.splitk import check, tiles

    dev = torch.device("cuda")
    case = check.make_case(batch, 128, 64, dev, 7, extra=True, extra_topk=topk, sink=True)
    plan = tiles.device_plan(batch, 128, 64, dev, topk)
    assert (plan.fused, plan.beside) == (form == "fused", form == "beside")
    args = check.call_args(case)
    total = smd.workspace_shape(batch, 64, 128, dev, None, topk)
    out = torch.empty(batch, 1, 64, 512, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(batch, 64, dtype=torch.float32, device=dev)
    ws = (torch.empty(batch, total, 64, 512, device=dev), torch.empty(batch, total, 64, device=dev))
    for buf in (out, lse, *ws):
        buf.fill_(float("nan"))
    smd.sparse_mla_decode_into(out, lse, ws, *args)
    torch.cuda.synchronize()
    ref_out, ref_lse = dsv4_cache.reference_sparse_decode(*args[:5], args[6], *args[7:])
    errs = check.compare(out, lse.view(batch, 64, 1), ref_out, ref_lse)
    assert check.verdict(errs, check.OUT_NORM_REL_MAX), errs
    eager_out, eager_lse = out.clone(), lse.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        smd.sparse_mla_decode_into(out, lse, ws, *args)
    for _ in range(20):
        for buf in (out, lse, *ws):
            buf.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16))
        assert torch.equal(lse, eager_lse)
