"""A rank's slice of the whole model's layer weights, cut as SGLang cuts them at tensor parallel ``tp``
(and expert parallel ``ep``), so that the ranks together compute what one process computes at TP1.

Attention (sglang 0.5.23 srt/models/deepseek_v4.py ``MqaAttentionBase.__init__``): ``wq_a``, ``wkv``,
the compressor's ``wkv_gate`` (srt/layers/attention/dsv4/compressor.py) and the indexer's projections
(srt/layers/attention/dsa/dsa_indexer.py) are ``ReplicatedLinear``: whole on every rank. ``wq_b`` is a
``ColumnParallelLinear``: rank r gets query heads ``[r*H/tp, (r+1)*H/tp)``; ``wo_a`` is column parallel
over its ``o_groups * o_lora_rank`` outputs: rank r gets groups ``[r*G/tp, (r+1)*G/tp)`` (a group's heads
are contiguous, so they are the rank's heads); ``wo_b`` is a ``RowParallelLinear`` over those groups'
``o_lora_rank`` inputs (its output, a partial sum, is all-reduced: ``reduce_results``); the sink is the
rank's heads' slice, zero on the padded heads (``_local_attn_sink``).

MoE (srt/models/deepseek_v2.py ``DeepseekV2MoE``, srt/layers/moe/fused_moe_triton/layer.py
``FusedMoE``): the router (``MoEGate``) is replicated. Without expert parallelism every rank holds all
experts with ``intermediate_size_per_partition = moe_intermediate / moe_tp_size`` (moe_tp_size = tp):
w13's gate and up halves each cut to the rank's columns (MergedColumnParallel), w2 cut on its input; the
shared expert (``DeepseekV2MLP``: MergedColumnParallelLinear + RowParallelLinear) is cut the same way,
and the block's output is one all-reduce of routed + shared. With ``ep = tp`` (moe_tp_size 1) rank r
holds experts ``[r*E/ep, (r+1)*E/ep)`` at full width, and the shared expert whole (as DeepEP mode runs
it, on each rank's own tokens).
"""

from __future__ import annotations

import dataclasses

import torch

from .model import LayerWeights


def _part(tensor: torch.Tensor, dim: int, rank: int, parts: int) -> torch.Tensor:
    size = tensor.shape[dim] // parts
    return tensor.narrow(dim, rank * size, size).contiguous()


def _gate_up_part(w13: torch.Tensor, rank: int, parts: int) -> torch.Tensor:
    """The rank's columns of both halves of a fused gate/up weight ([..., 2 * inter, hidden])."""
    gate, up = w13.chunk(2, dim=-2)
    return torch.cat([_part(gate, -2, rank, parts), _part(up, -2, rank, parts)], dim=-2)


def shard_layer(full: LayerWeights, rank: int, tp: int, ep: int, kernel_heads: int) -> LayerWeights:
    """Rank ``rank``'s weights of one layer from the whole layer's (built at TP1). ``kernel_heads``: the
    heads the rank's attention kernel is launched with (the sink is padded to it)."""
    heads = full.attn_sink.shape[0]
    local = heads // tp
    sink = torch.zeros(kernel_heads, dtype=full.attn_sink.dtype, device=full.attn_sink.device)
    sink[:local] = full.attn_sink[rank * local:(rank + 1) * local]
    shared_w13, shared_w2 = full.shared_w13, full.shared_w2  # whole under expert parallelism
    if ep > 1:
        w13, w2 = _part(full.w13, 0, rank, ep), _part(full.w2, 0, rank, ep)
    else:
        w13, w2 = _gate_up_part(full.w13, rank, tp), _part(full.w2, -1, rank, tp)
        if shared_w13 is not None:
            shared_w13, shared_w2 = _gate_up_part(shared_w13, rank, tp), _part(shared_w2, -1, rank, tp)
    return dataclasses.replace(
        full,
        wq_b=_part(full.wq_b, 0, rank, tp),
        attn_sink=sink,
        wo_a=_part(full.wo_a, 0, rank, tp),
        wo_b=_part(full.wo_b, 1, rank, tp),
        w13=w13,
        w2=w2,
        shared_w13=shared_w13,
        shared_w2=shared_w2,
    )
