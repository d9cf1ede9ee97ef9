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
