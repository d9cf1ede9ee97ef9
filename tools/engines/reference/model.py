"""DeepSeek-V4-Flash decode layers for one tensor-parallel rank, in PyTorch, with random weights.

One decode step runs each selected layer on ``[batch, hidden]`` hidden states at one position:

attention half: RMSNorm -> q path (wq_a -> q_norm -> wq_b -> per-head RMSNorm -> RoPE) and kv path
(wkv -> kv_norm -> RoPE -> quantized into the paged FP8 sliding-window cache), the compressor's
per-step projection (c4/c128 layers), the indexer (c4 layers: its query and weights projections,
scores over the compressed index keys, top-k -> cache slots, -1 padded), sparse MLA attention over
the window cache plus the compressed cache, inverse RoPE, grouped output projection (wo_a per group
-> wo_b) and the residual;
FFN half: RMSNorm -> router (sqrt-softplus scores + correction bias, top-k, normalized, scaled) ->
routed experts (SwiGLU, one grouped GEMM over the tokens sorted by expert) + shared expert -> residual.

Per rank: query heads ``heads / tp`` padded to the kernel's head count, ``o_groups / tp`` output
groups, expert FFN width ``moe_intermediate / tp``; the kv latent, indexer and router are
replicated, as in SGLang. Nothing here communicates: one process alone stands for one rank, and a
distributed run (multirank.py) wraps these pure parts with the collectives of collective.py.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from tools.kernels import dsv4_cache

from .attention import DecodeFn
from .spec import INDEX_ALIGN, RankShapes, round_up

RMS_EPS = 1e-6
ROUTED_SCALING = 1.5  # DeepSeek-V4 routed_scaling_factor
ROPE_THETA = 10000.0  # window-only layers
COMPRESS_ROPE_THETA = 40000.0  # c4 / c128 layers
DTYPE = torch.bfloat16
# The record_function range around the attention call (SGLang's wrapper: its kernels, partial merge
# and sink), so a trace attributes them to one operation. The "op:" prefix is what tools/trace/host.py
# reads as an operation rather than a unit of work (OPERATION_PREFIX).
ATTENTION_RANGE = "op:sparse_decode"


def _operation_range(name: str):
    """A record_function range while a profiler records, else nothing: the timed steps stay as they were."""
    if torch.autograd.profiler._is_profiler_enabled:
        return torch.profiler.record_function(name)
    return contextlib.nullcontext()


@dataclass
class LayerWeights:
    ratio: int
    attn_norm: torch.Tensor
    wq_a: torch.Tensor
    q_norm: torch.Tensor
    wq_b: torch.Tensor
    wkv: torch.Tensor
    kv_norm: torch.Tensor
    attn_sink: torch.Tensor  # [kernel_heads] float32; padded heads 0 as SGLang pads them
    wo_a: torch.Tensor  # [groups_per_rank, o_lora, heads_per_rank * 512 / groups_per_rank]
    wo_b: torch.Tensor
    compressor: torch.Tensor | None  # wkv_gate of the c4/c128 compressor
    index_wq_b: torch.Tensor | None
    index_weights: torch.Tensor | None
    index_compressor: torch.Tensor | None
    ffn_norm: torch.Tensor
    gate: torch.Tensor
    gate_bias: torch.Tensor
    w13: torch.Tensor  # [experts, 2 * moe_inter, hidden]
    w2: torch.Tensor  # [experts, hidden, moe_inter]
    shared_w13: torch.Tensor | None
    shared_w2: torch.Tensor | None


@dataclass
class LayerState:
    """Caches and per-step index rows of one layer for one batch, at a fixed decode position."""

    position: int
    cos: torch.Tensor
    sin: torch.Tensor
    swa_cache: torch.Tensor
    new_slot: torch.Tensor  # [B] window-cache slot of the token being decoded
    swa_indices: torch.Tensor  # [B, 1, width] int32, -1 padded
    swa_lengths: torch.Tensor  # [B] int32
    q_padded: torch.Tensor  # [B, kernel_heads, 512]: heads past the rank's are padding
    extra_cache: torch.Tensor | None
    extra_indices: torch.Tensor | None  # c128: static; c4: rebuilt by the indexer each step
    extra_lengths: torch.Tensor | None
    extra_base: torch.Tensor | None  # [B] first compressed slot of each request
    index_keys: torch.Tensor | None  # c4: [B, n_compressed, index_head_dim]
    compressor_state: torch.Tensor | None
    index_compressor_state: torch.Tensor | None
    state_slot: torch.Tensor | None


def random_tensor(shape, gen, device, scale=1.0, dtype=DTYPE) -> torch.Tensor:
    """Normal values times ``scale`` (drawn in float32 from ``gen``, then cast to ``dtype``)."""
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)


def _linear_weight(out_features: int, in_features: int, gen, device) -> torch.Tensor:
    return random_tensor((out_features, in_features), gen, device, in_features ** -0.5)


def _norm_weight(dim: int, gen, device) -> torch.Tensor:
    return 1.0 + random_tensor((dim,), gen, device, 0.1, torch.float32)


def make_layer_weights(shapes: RankShapes, ratio: int, gen: torch.Generator, device) -> LayerWeights:
    """Random weights (scaled by fan-in so activations stay O(1); never zeros) for one layer."""
    hidden, head_dim = shapes.hidden, shapes.head_dim
    heads, groups = shapes.heads_per_rank, shapes.o_groups_per_rank
    experts, inter = shapes.experts_run, shapes.moe_intermediate_per_rank
    sink = torch.zeros(shapes.kernel_heads, dtype=torch.float32, device=device)
    sink[:heads] = random_tensor((heads,), gen, device, 1.0, torch.float32)
    coff = 2 if ratio == 4 else 1  # the c4 compressor overlaps windows (SGLang Compressor.coff)
    linear = lambda o, i: _linear_weight(o, i, gen, device)  # noqa: E731
    return LayerWeights(
        ratio=ratio,
        attn_norm=_norm_weight(hidden, gen, device),
        wq_a=linear(shapes.q_lora_rank, hidden),
        q_norm=_norm_weight(shapes.q_lora_rank, gen, device),
        wq_b=linear(heads * head_dim, shapes.q_lora_rank),
        wkv=linear(head_dim, hidden),
        kv_norm=_norm_weight(head_dim, gen, device),
        attn_sink=sink,
        wo_a=random_tensor((groups, shapes.o_lora_rank, heads * head_dim // groups), gen, device,
                    (heads * head_dim // groups) ** -0.5),
        wo_b=linear(hidden, groups * shapes.o_lora_rank),
        compressor=linear(2 * coff * head_dim, hidden) if ratio else None,
        index_wq_b=linear(shapes.index_heads * shapes.index_head_dim, shapes.q_lora_rank) if ratio == 4 else None,
        index_weights=linear(shapes.index_heads, hidden) if ratio == 4 else None,
        index_compressor=linear(2 * 2 * shapes.index_head_dim, hidden) if ratio == 4 else None,
        ffn_norm=_norm_weight(hidden, gen, device),
        gate=linear(experts, hidden),
        gate_bias=random_tensor((experts,), gen, device, 0.1, torch.float32),
        w13=random_tensor((experts, 2 * inter, hidden), gen, device, hidden ** -0.5),
        w2=random_tensor((experts, hidden, inter), gen, device, inter ** -0.5),
        shared_w13=linear(2 * shapes.shared_intermediate_per_rank, hidden) if shapes.shared_intermediate_per_rank else None,
        shared_w2=linear(hidden, shapes.shared_intermediate_per_rank) if shapes.shared_intermediate_per_rank else None,
    )


def _rope_cos_sin(position: int, dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = position * inv_freq
    return torch.cos(angle).float().to(device), torch.sin(angle).float().to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate adjacent pairs of the last dim (interleaved, non-NeoX style) by the position's angles."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    sin = -sin if inverse else sin
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    if weight is not None:
        xf = xf * weight
    return xf.to(x.dtype)


def _fill_cache(cache: torch.Tensor, slots: torch.Tensor, gen, device) -> None:
    """Write real (quantized random) tokens at every slot attention may read: unwritten random
    bytes decode to NaN/inf in FP8."""
    dsv4_cache.write_tokens(cache, slots, random_tensor((slots.numel(), dsv4_cache.HEAD_DIM), gen, device, 1.0, torch.float32))


def make_layer_state(shapes: RankShapes, ratio: int, batch: int, gen: torch.Generator, device) -> LayerState:
    """Caches holding ``context_len`` tokens per request, decoding the token at position context_len."""
    position = shapes.context_len
    page = shapes.page_size
    window = shapes.sliding_window
    theta = COMPRESS_ROPE_THETA if ratio else ROPE_THETA
    cos, sin = _rope_cos_sin(position, dsv4_cache.ROPE_DIM, theta, device)
    requests = torch.arange(batch, device=device)

    # Sliding window: a ring of whole pages per request holding the last `window` positions.
    ring = round_up(window, page)
    swa_cache = dsv4_cache.empty_cache(batch * ring // page, page, device)
    in_window = torch.arange(max(0, position - window + 1), position + 1, device=device)
    window_slots = requests[:, None] * ring + in_window[None, :] % ring  # [B, n]
    _fill_cache(swa_cache, window_slots.reshape(-1), gen, device)
    width = shapes.swa_topk_width
    swa_indices = torch.full((batch, 1, width), -1, dtype=torch.int32, device=device)
    swa_indices[:, 0, : window_slots.shape[1]] = window_slots.int()
    swa_lengths = torch.full((batch,), window_slots.shape[1], dtype=torch.int32, device=device)

    extra = dict(extra_cache=None, extra_indices=None, extra_lengths=None, extra_base=None, index_keys=None,
                 compressor_state=None, index_compressor_state=None, state_slot=None)
    if ratio:
        compressed = position // ratio
        cpage = page // ratio
        per_request = max(1, math.ceil(compressed / cpage)) * cpage
        cache = dsv4_cache.empty_cache(batch * per_request // cpage, cpage, device)
        base = requests * per_request
        slots = base[:, None] + torch.arange(compressed, device=device)[None, :]
        _fill_cache(cache, slots.reshape(-1), gen, device)
        coff = 2 if ratio == 4 else 1
        extra.update(
            extra_cache=cache,
            extra_base=base,
            compressor_state=random_tensor((batch, ratio, 2 * coff * shapes.head_dim), gen, device),
            state_slot=torch.tensor([position % ratio], device=device),
        )
        if ratio == 128:
            width = round_up(max(compressed, 1), INDEX_ALIGN)
            indices = torch.full((batch, 1, width), -1, dtype=torch.int32, device=device)
            indices[:, 0, :compressed] = slots.int()
            extra.update(extra_indices=indices,
                         extra_lengths=torch.full((batch,), max(compressed, 1), dtype=torch.int32, device=device))
        else:
            extra.update(
                index_keys=random_tensor((batch, compressed, shapes.index_head_dim), gen, device),
                index_compressor_state=random_tensor((batch, ratio, 2 * 2 * shapes.index_head_dim), gen, device),
                extra_lengths=torch.full((batch,), min(shapes.topk, compressed), dtype=torch.int32, device=device),
            )
    return LayerState(
        position=position,
        cos=cos,
        sin=sin,
        swa_cache=swa_cache,
        new_slot=requests * ring + position % ring,
        swa_indices=swa_indices,
        swa_lengths=swa_lengths,
        q_padded=random_tensor((batch, shapes.kernel_heads, shapes.head_dim), gen, device),
        **extra,
    )


def indexer_topk(h: torch.Tensor, q_lora: torch.Tensor, w: LayerWeights, st: LayerState, shapes: RankShapes) -> torch.Tensor:
    """Lightning-indexer selection over the compressed tokens -> ``[B, 1, width]`` cache slots, -1 padded."""
    batch = h.shape[0]
    heads, dim = shapes.index_heads, shapes.index_head_dim
    q = F.linear(q_lora, w.index_wq_b).view(batch, heads, dim)
    if dim >= dsv4_cache.ROPE_DIM:
        rope = q[..., -dsv4_cache.ROPE_DIM:]
        q = torch.cat([q[..., : -dsv4_cache.ROPE_DIM], apply_rope(rope, st.cos, st.sin)], dim=-1)
    head_weights = F.linear(h, w.index_weights).float() * (dim ** -0.5 * heads ** -0.5)
    st.index_compressor_state.index_copy_(1, st.state_slot, F.linear(h, w.index_compressor).unsqueeze(1))
    scores = torch.einsum("bhd,btd->bht", q, st.index_keys).float().relu()
    scores = (scores * head_weights.unsqueeze(-1)).sum(dim=1)  # [B, n_compressed]
    k = min(shapes.topk, scores.shape[-1])
    chosen = torch.topk(scores, k, dim=-1).indices + st.extra_base[:, None]
    width = round_up(shapes.topk, INDEX_ALIGN)
    return F.pad(chosen.int(), (0, width - k), value=-1).unsqueeze(1)


def pre_attention(x: torch.Tensor, attn_norm: torch.Tensor, wq_a: torch.Tensor, q_norm: torch.Tensor,
                  wq_b: torch.Tensor, wkv: torch.Tensor, kv_norm: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The attention half's projections and norms before the cache: (h, q_lora, q [B, heads, 512] with
    RoPE on its rope dims, kv [B, 512] with RoPE). Pure (no state touched): what ``compile`` compiles."""
    batch, nope = x.shape[0], dsv4_cache.NOPE_DIM
    h = rms_norm(x, attn_norm)
    q_lora = rms_norm(F.linear(h, wq_a), q_norm)
    q = rms_norm(F.linear(q_lora, wq_b).view(batch, heads, head_dim), None)
    q = torch.cat([q[..., :nope], apply_rope(q[..., nope:], cos, sin)], dim=-1)
    kv = rms_norm(F.linear(h, wkv), kv_norm)
    kv = torch.cat([kv[:, :nope], apply_rope(kv[:, nope:], cos, sin)], dim=-1)
    return h, q_lora, q, kv


def attention_output(out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, wo_a: torch.Tensor,
                     wo_b: torch.Tensor, heads: int, groups: int) -> torch.Tensor:
    """Inverse RoPE on the attention output and the grouped output projection (wo_a per group -> wo_b),
    before the residual: under tensor parallelism a partial sum, the all-reduce's input. Pure."""
    batch, nope = out.shape[0], dsv4_cache.NOPE_DIM
    o = out[:, 0, :heads]
    o = torch.cat([o[..., :nope], apply_rope(o[..., nope:], cos, sin, inverse=True)], dim=-1)
    o = torch.einsum("bgd,grd->bgr", o.reshape(batch, groups, -1), wo_a)
    return F.linear(o.reshape(batch, -1), wo_b)


def post_attention(x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, wo_a: torch.Tensor,
                   wo_b: torch.Tensor, heads: int, groups: int) -> torch.Tensor:
    """The attention output projection and the residual. Pure."""
    return x + attention_output(out, cos, sin, wo_a, wo_b, heads, groups)


def attention_block(x: torch.Tensor, w: LayerWeights, st: LayerState, shapes: RankShapes, attend: DecodeFn,
                    impl: "StepImpl | None" = None) -> torch.Tensor:
    impl = impl or EAGER
    heads, head_dim = shapes.heads_per_rank, shapes.head_dim
    h, q_lora, q, kv = impl.pre_attention(x, w.attn_norm, w.wq_a, w.q_norm, w.wq_b, w.wkv, w.kv_norm, st.cos, st.sin,
                                          heads, head_dim)
    st.q_padded[:, :heads] = q
    dsv4_cache.write_tokens(st.swa_cache, st.new_slot, kv)

    extra_indices = st.extra_indices
    if w.ratio:
        st.compressor_state.index_copy_(1, st.state_slot, F.linear(h, w.compressor).unsqueeze(1))
    if w.ratio == 4:
        extra_indices = indexer_topk(h, q_lora, w, st, shapes)

    with _operation_range(ATTENTION_RANGE):
        out, _ = attend(
            st.q_padded.unsqueeze(1), st.swa_cache, st.swa_indices, st.swa_lengths, w.attn_sink, head_dim,
            head_dim ** -0.5, st.extra_cache, extra_indices, st.extra_lengths,
        )
    return impl.post_attention(x, out, st.cos, st.sin, w.wo_a, w.wo_b, heads, shapes.o_groups_per_rank)


def route(h: torch.Tensor, w: LayerWeights, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V4 routing: sqrt(softplus) scores, top-k on scores + bias, normalized weights x 1.5."""
    return select_experts(h, w.gate, w.gate_bias, top_k)


def select_experts(h: torch.Tensor, gate_w: torch.Tensor, gate_bias: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.sqrt(F.softplus(F.linear(h, gate_w).float()))
    ids = torch.topk(scores + gate_bias, top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    weights = weights / weights.sum(-1, keepdim=True) * ROUTED_SCALING
    return ids, weights


def moe_grouped(x: torch.Tensor, ffn_norm: torch.Tensor, gate_w: torch.Tensor, gate_bias: torch.Tensor,
                w13: torch.Tensor, w2: torch.Tensor, shared_w13: torch.Tensor | None, shared_w2: torch.Tensor | None,
                top_k: int) -> torch.Tensor:
    """The FFN half with the routed experts as one torch._grouped_mm per projection over the tokens
    sorted by expert (only the experts that got tokens are read, as a fused MoE kernel does). Pure,
    no host read: capturable in a CUDA graph, and what ``compile`` compiles."""
    h = rms_norm(x, ffn_norm)
    return x + routed_grouped(h, gate_w, gate_bias, w13, w2, top_k) + shared_expert(h, shared_w13, shared_w2)


def grouped_experts(rows: torch.Tensor, local_ids: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """SwiGLU of each row through its expert (``local_ids`` index ``w13``/``w2``), one torch._grouped_mm
    per projection over the rows sorted by expert: (outputs in sorted order, the sort order)."""
    order = torch.argsort(local_ids, stable=True)
    counts = torch.zeros(w13.shape[0], dtype=torch.int32, device=rows.device)
    counts.scatter_add_(0, local_ids, torch.ones_like(local_ids, dtype=torch.int32))
    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
    gate_up = torch._grouped_mm(rows[order], w13.transpose(-2, -1), offs=offsets)
    gate, up = gate_up.chunk(2, dim=-1)
    return torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offsets), order


def routed_grouped(h: torch.Tensor, gate_w: torch.Tensor, gate_bias: torch.Tensor, w13: torch.Tensor,
                   w2: torch.Tensor, top_k: int) -> torch.Tensor:
    """The routed experts' weighted sum for each token of the normed ``h`` (moe_grouped's routed part)."""
    ids, weights = select_experts(h, gate_w, gate_bias, top_k)
    flat_ids = ids.reshape(-1)
    token_of_slot = torch.arange(flat_ids.numel(), device=h.device) // top_k
    down, order = grouped_experts(h[token_of_slot], flat_ids, w13, w2)
    down = down * weights.reshape(-1)[order].unsqueeze(-1).to(down.dtype)
    per_slot = torch.empty_like(down)
    per_slot[order] = down
    return combine_slots(per_slot, h.shape[0], top_k)


def combine_slots(per_slot: torch.Tensor, batch: int, top_k: int) -> torch.Tensor:
    """Each token's top_k expert outputs (``[batch * top_k, hidden]``, token-major) summed in a fixed
    order. An index_add_ over tokens would add them with atomics on a GPU, in an order that changes
    from run to run: the rounding then differs, and a router near-tie in a later layer flips."""
    return per_slot.view(batch, top_k, -1).sum(dim=1)


def moe_loop(x: torch.Tensor, ffn_norm: torch.Tensor, gate_w: torch.Tensor, gate_bias: torch.Tensor,
             w13: torch.Tensor, w2: torch.Tensor, shared_w13: torch.Tensor | None, shared_w2: torch.Tensor | None,
             top_k: int) -> torch.Tensor:
    """The FFN half with a per-expert loop: the host reads each expert's token count (one device->host
    copy a layer), then runs two plain GEMMs for each expert that got tokens. The host read makes
    it uncapturable in a CUDA graph (spec validation refuses the combination)."""
    h = rms_norm(x, ffn_norm)
    return x + routed_loop(h, gate_w, gate_bias, w13, w2, top_k) + shared_expert(h, shared_w13, shared_w2)


def routed_loop(h: torch.Tensor, gate_w: torch.Tensor, gate_bias: torch.Tensor, w13: torch.Tensor,
                w2: torch.Tensor, top_k: int) -> torch.Tensor:
    """moe_loop's routed part: the per-expert loop's weighted sum for each token of the normed ``h``."""
    ids, weights = select_experts(h, gate_w, gate_bias, top_k)
    flat_ids = ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    counts = torch.bincount(flat_ids, minlength=w13.shape[0]).tolist()
    flat_weights = weights.reshape(-1)
    per_slot = torch.zeros(flat_ids.numel(), h.shape[-1], dtype=h.dtype, device=h.device)
    start = 0
    for expert, count in enumerate(counts):
        if not count:
            continue
        slots = order[start:start + count]
        start += count
        gate, up = F.linear(h[slots // top_k], w13[expert]).chunk(2, dim=-1)
        down = F.linear(F.silu(gate) * up, w2[expert])
        per_slot[slots] = down * flat_weights[slots].unsqueeze(-1).to(down.dtype)
    return combine_slots(per_slot, h.shape[0], top_k)


def shared_expert(h: torch.Tensor, shared_w13: torch.Tensor | None, shared_w2: torch.Tensor | None):
    if shared_w13 is None:
        return torch.zeros_like(h)
    gate, up = F.linear(h, shared_w13).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, shared_w2)


class RoutingRecorder:
    """While ``active``, each MoE layer's routing is kept (device tensors, no host read), so the step
    that was recorded can report how many distinct experts each layer's kernels saw."""

    def __init__(self):
        self.active = False
        self.ids: list[torch.Tensor] = []

    def start(self) -> None:
        self.active, self.ids = True, []

    def distinct(self) -> list[int]:
        """Distinct experts per MoE layer of the recorded step; stops recording."""
        self.active = False
        return [int(torch.unique(ids).numel()) for ids in self.ids]


ROUTING = RoutingRecorder()


def moe_block(x: torch.Tensor, w: LayerWeights, shapes: RankShapes, impl: "StepImpl | None" = None) -> torch.Tensor:
    impl = impl or EAGER
    if ROUTING.active:
        ROUTING.ids.append(route(rms_norm(x, w.ffn_norm), w, shapes.experts_per_token)[0])
    return impl.moe(x, w.ffn_norm, w.gate, w.gate_bias, w.w13, w.w2, w.shared_w13, w.shared_w2,
                    shapes.experts_per_token)


@dataclass(frozen=True)
class StepImpl:
    """How a decode step runs its non-attention part: the three pure functions, eager or compiled."""

    pre_attention: Callable
    post_attention: Callable
    moe: Callable
    moe_kind: str = "grouped"
    compiled: bool = False


EAGER = StepImpl(pre_attention, post_attention, moe_grouped)
_COMPILED: dict[str, Callable] = {}


def compiled_once(fn: Callable) -> Callable:
    """One torch.compile wrapper per function for the whole process, so runs after the first reuse
    its compiled code (every layer passes tensors of the same shapes: no recompile per layer)."""
    if fn.__name__ not in _COMPILED:
        import torch._inductor.config as inductor_config

        # Round to bf16 where eager rounds: without it fused kernels keep float32 between ops, and the
        # router's top-k can flip an expert on a near tie, a different answer the output check would flag.
        inductor_config.emulate_precision_casts = True
        _COMPILED[fn.__name__] = torch.compile(fn, dynamic=False)
    return _COMPILED[fn.__name__]


def step_impl(moe: str = "grouped", compile: bool = False) -> StepImpl:
    """The step's implementation: ``moe`` grouped (torch._grouped_mm) or loop (per expert);
    ``compile`` torch.compiles the projections, norms and the grouped MoE (the per-expert loop's
    host read would break the graph: it stays eager); attention, the cache writes, the compressor's
    projection and the indexer run as they do eagerly."""
    moe_fn = {"grouped": moe_grouped, "loop": moe_loop}[moe]
    if not compile:
        return StepImpl(pre_attention, post_attention, moe_fn, moe, False)
    return StepImpl(compiled_once(pre_attention), compiled_once(post_attention),
                    compiled_once(moe_grouped) if moe == "grouped" else moe_loop, moe, True)


def decode_step(x: torch.Tensor, layers: list[tuple[LayerWeights, LayerState]], shapes: RankShapes, attend: DecodeFn,
                impl: StepImpl | None = None) -> torch.Tensor:
    """One decode step through the selected layers; returns the last layer's hidden states."""
    for weights, state in layers:
        x = attention_block(x, weights, state, shapes, attend, impl)
        x = moe_block(x, weights, shapes, impl)
    return x


