import triton
import triton.language as tl


@triton.jit
def _slow_decode_kernel(q_ptr, out_ptr, N: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, tl.load(q_ptr + pid))


def slow_decode(q):
    out = q.new_empty(q.shape)
    _slow_decode_kernel[(q.shape[0],)](q, out, q.shape[0])
    return out


def reference_decode(q):
    return q.clone()
