"""Two Triton kernels written for tests/test_kernel_diagnosis.py: the same attention scores over rows of
a KV table gathered through per-batch indices, organised two ways.

* ``head_blocked_kernel``, grid (B,): one program per batch row gathers each indexed KV row once and
  multiplies it with all H heads' queries at once on tensor cores (``tl.dot``);
* ``per_head_kernel``, grid (B, H): one program per (row, head) gathers the same rows again for its
  head and forms each score as an elementwise product summed by ``tl.sum`` (CUDA cores).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def head_blocked_kernel(q_ptr, kv_ptr, idx_ptr, out_ptr, topk, H: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr):
    b = tl.program_id(0)
    heads = tl.arange(0, H)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + b * H * D + heads[:, None] * D + dims[None, :])  # [H, D]
    acc = tl.zeros([H, D], dtype=tl.float32)
    for t0 in range(0, topk, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        rows = tl.load(idx_ptr + b * topk + t)  # [BLOCK_T] indices of this batch row
        kv = tl.load(kv_ptr + rows[:, None] * D + dims[None, :])  # [BLOCK_T, D], once for all heads
        s = tl.dot(q, tl.trans(kv))  # [H, BLOCK_T]
        acc += tl.dot(s.to(tl.bfloat16), kv)
    tl.store(out_ptr + b * H * D + heads[:, None] * D + dims[None, :], acc)


@triton.jit
def per_head_kernel(q_ptr, kv_ptr, idx_ptr, out_ptr, topk, H: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + b * H * D + h * D + dims).to(tl.float32)  # [D]
    acc = tl.zeros([D], dtype=tl.float32)
    for t0 in range(0, topk, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        rows = tl.load(idx_ptr + b * topk + t)
        kv = tl.load(kv_ptr + rows[:, None] * D + dims[None, :]).to(tl.float32)  # the same rows, for one head
        s = tl.sum(q[None, :] * kv, axis=1)  # [BLOCK_T]
        acc += tl.sum(s[:, None] * kv, axis=0)
    tl.store(out_ptr + b * H * D + h * D + dims, acc)


def head_blocked(
    q: torch.Tensor,  # [B, H, D] bf16
    kv: torch.Tensor,  # [rows, D] bf16
    idx: torch.Tensor,  # [B, topk] int32
) -> torch.Tensor:
    B, H, D = q.shape
    topk = idx.shape[1]
    out = torch.empty(B, H, D, dtype=torch.float32, device=q.device)
    grid = (B,)
    head_blocked_kernel[grid](q, kv, idx, out, topk, H=H, D=D, BLOCK_T=16)
    return out


def per_head(
    q: torch.Tensor,  # [B, H, D] bf16
    kv: torch.Tensor,  # [rows, D] bf16
    idx: torch.Tensor,  # [B, topk] int32
) -> torch.Tensor:
    B, H, D = q.shape
    topk = idx.shape[1]
    out = torch.empty(B, H, D, dtype=torch.float32, device=q.device)
    grid = (B, H)
    per_head_kernel[grid](q, kv, idx, out, topk, H=H, D=D, BLOCK_T=16)
    return out
