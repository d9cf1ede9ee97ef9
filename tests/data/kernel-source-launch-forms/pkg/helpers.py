import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def online_update(m, l, acc, scores, values):
    """One tile of an online softmax: new running max, denominator and weighted sum."""
    m_new = tl.maximum(m, tl.max(scores, 0))
    alpha = tl.math.exp2((m - m_new) * LOG2E)
    p = tl.math.exp2((scores - m_new) * LOG2E)
    return m_new, l * alpha + tl.sum(p, 0), acc * alpha + tl.sum(p[:, None] * values, 0)
