import triton
import triton.language as tl

from .helpers import online_update


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 32}, num_warps=4),
        triton.Config({"BLOCK_N": 64}, num_warps=8, num_stages=2),
    ],
    key=["N"],
)
@triton.heuristics({"EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0})
@triton.jit
def attend_rows(Q, KV, Out, N, stride_row, D: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    row = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + row * D + offs_d).to(tl.float32)
    m = -float("inf")
    l = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    kv_ptr = KV + row * stride_row
    for start in range(0, N, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        if EVEN_N:
            values = tl.load(kv_ptr + offs_n[:, None] * D + offs_d[None, :]).to(tl.float32)
        else:
            values = tl.load(kv_ptr + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < N, other=0.0).to(tl.float32)
        scores = tl.sum(values * q[None, :], 1)
        scores = tl.where(offs_n < N, scores, -float("inf"))
        m, l, acc = online_update(m, l, acc, scores, values)
    tl.store(Out + row * D + offs_d, acc / l)


@triton.jit
def blocked_copy(X, Y, M, N, stride_x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    half = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    x_ptr = X + offs_m[:, None] * stride_x
    for rep in tl.static_range(2):
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        for col in tl.range(half * (N // 2), (half + 1) * (N // 2), BLOCK_N * 2):
            tile = tl.load(x_ptr + col + cols[None, :], mask=offs_m[:, None] < M)
            tl.store(Y + offs_m[:, None] * stride_x + col + cols[None, :], tile, mask=offs_m[:, None] < M)
