"""Capture the CPU-only torch.profiler trace kept in this folder (run once; the output is committed).

What the reference engine emits on a CPU box: outermost aten ops, plus record_function ranges named
after the Triton kernels they wrap, the kernels running under TRITON_INTERPRET=1. The Triton kernels
here are small real ones (an RMS norm and a scale-add), launched at tiny shapes so capture is quick.

    TRITON_INTERPRET=1 /tmp/venv/bin/python tests/data/trace-cpu/make_fixture.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "reference-cpu.trace.json.gz"


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1 so the Triton kernels run on the CPU", file=sys.stderr)
        return 2
    import torch
    import triton
    import triton.language as tl
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    @triton.jit
    def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        tl.store(out_ptr + row * n_cols + cols, x / rms * w, mask=mask)

    @triton.jit
    def _scale_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * alpha + y, mask=mask)

    torch.manual_seed(0)
    rows, cols = 4, 64
    weight = torch.randn(cols)
    proj = torch.randn(cols, cols)

    def decode_step(x: torch.Tensor) -> torch.Tensor:
        normed = torch.empty_like(x)
        with record_function("_rms_norm_kernel"):
            _rms_norm_kernel[(rows,)](x, weight, normed, cols, 1e-6, BLOCK=cols)
        hidden = torch.nn.functional.silu(normed @ proj)
        out = torch.empty_like(hidden)
        with record_function("_scale_add_kernel"):
            _scale_add_kernel[(triton.cdiv(hidden.numel(), 128),)](hidden, x, out, hidden.numel(), 0.5, BLOCK=128)
        return torch.softmax(out, dim=-1)

    def save(prof) -> None:
        prof.export_chrome_trace(str(OUT))

    x = torch.randn(rows, cols)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=4, repeat=1),
        on_trace_ready=save,
    ) as prof:
        for _ in range(5):
            x = decode_step(x)
            prof.step()
    print(OUT, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
