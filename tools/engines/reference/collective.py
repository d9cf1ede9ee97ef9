"""The collectives of a decode step across ranks, where SGLang has them, and the step functions that run them.

Tensor parallel (sglang 0.5.23 srt/models/deepseek_v4.py ``_project_wo_b``: ``wo_b`` a RowParallelLinear
with ``reduce_results``; srt/models/deepseek_v2.py ``DeepseekV2MoE.forward_normal``: routed + shared, then
``post_experts_all_reduce``): two all-reduces a layer, of the attention output projection and of the
MoE block's output, each before its residual.

Expert parallel (``ep = tp``; SGLang's DeepEP mode, srt/layers/moe/token_dispatcher/deepep.py): after the
attention all-reduce each rank keeps its own slice of the batch's tokens (contiguous, ceil(B / ranks)
each; SGLang reduce-scatters there, the all-reduce and a slice give the same numbers), routes them,
dispatches each (token, expert) row to the rank that holds the expert by all-to-all (the split sizes
first, then the rows and the experts' local ids), runs its experts on the rows it got, sends the results
back by all-to-all (combine), weights and sums them at home with the shared expert, and all-gathers the
tokens for the next layer's attention. gloo has all_to_all_single on the CPU (ProcessGroupGloo
alltoall_base, uneven splits included), so the same code runs over gloo and NCCL.

On the CPU gloo's collectives block the calling thread: the wall time a rank spends in them (its wait for
the slowest rank plus the transfer) is recorded per step, and the step's time less it is the rank's busy
time. On a GPU NCCL collectives are asynchronous kernels: their time is the trace's, not recorded here.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.distributed as dist

from . import model


class Comm:
    """One process group of ranks ``0..size-1`` seen from ``rank``, timing its collectives on the CPU."""

    def __init__(self, group, rank: int, size: int, device: torch.device):
        self.group, self.rank, self.size = group, rank, size
        self.timed = device.type == "cpu"
        self.step_comm_ms: list[float] = []
        self._in_step = 0.0

    def _timed(self, fn: Callable[[], None]) -> None:
        if not self.timed:
            fn()
            return
        t0 = time.perf_counter()
        fn()
        self._in_step += (time.perf_counter() - t0) * 1e3

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        self._timed(lambda: dist.all_reduce(tensor, group=self.group))
        return tensor

    def all_to_all(self, rows: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
        """``rows`` (grouped by destination rank, ``send[r]`` for rank r) exchanged: ``recv[r]`` rows from each."""
        out = rows.new_empty((sum(recv), *rows.shape[1:]))
        self._timed(lambda: dist.all_to_all_single(out, rows.contiguous(), recv, send, group=self.group))
        return out

    def all_gather_rows(self, rows: torch.Tensor, total: int, chunk: int) -> torch.Tensor:
        """Every rank's ``rows`` (at most ``chunk`` each, in rank order) joined: the first ``total`` rows."""
        padded = rows.new_zeros((chunk, *rows.shape[1:]))
        padded[: rows.shape[0]] = rows
        parts = [torch.empty_like(padded) for _ in range(self.size)]
        self._timed(lambda: dist.all_gather(parts, padded, group=self.group))
        return torch.cat(parts)[:total]

    def timed_step(self, step: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        """``step`` that appends the time its collectives took to ``step_comm_ms`` (CPU only)."""
        def run() -> torch.Tensor:
            self._in_step = 0.0
            out = step()
            if self.timed:
                self.step_comm_ms.append(self._in_step)
            return out
        return run


def token_slice(batch: int, rank: int, size: int) -> tuple[int, int, int]:
    """(start, stop, chunk): the contiguous tokens rank ``rank`` of ``size`` holds between dispatch and gather."""
    chunk = -(-batch // size)
    return min(batch, rank * chunk), min(batch, (rank + 1) * chunk), chunk


def ep_routed(comm: Comm, h: torch.Tensor, gate_w: torch.Tensor, gate_bias: torch.Tensor, w13: torch.Tensor,
              w2: torch.Tensor, top_k: int) -> torch.Tensor:
    """Routed experts of the rank's tokens ``h`` by all-to-all dispatch and combine: experts
    ``[rank * E_local, (rank + 1) * E_local)`` live on ``rank``; returns each token's weighted sum."""
    ids, weights = model.select_experts(h, gate_w, gate_bias, top_k)
    flat = ids.reshape(-1)
    local_experts = w13.shape[0]
    owner = flat // local_experts
    order = torch.argsort(owner, stable=True)
    send = torch.bincount(owner, minlength=comm.size)
    recv = torch.empty_like(send)
    comm._timed(lambda: dist.all_to_all_single(recv, send, group=comm.group))
    send_n, recv_n = send.tolist(), recv.tolist()
    rows = comm.all_to_all(h[order // top_k], send_n, recv_n)
    local_ids = comm.all_to_all((flat[order] % local_experts), send_n, recv_n)
    done = torch.empty_like(rows)
    if rows.shape[0]:
        down, by_expert = model.grouped_experts(rows, local_ids, w13, w2)
        done[by_expert] = down
    back = comm.all_to_all(done, recv_n, send_n)
    per_slot = torch.empty_like(back)
    per_slot[order] = back
    per_slot = per_slot * weights.reshape(-1).unsqueeze(-1).to(per_slot.dtype)
    return per_slot.view(h.shape[0], top_k, h.shape[-1]).sum(dim=1)


def parallel_impl(base: model.StepImpl, comm: Comm, ep: int) -> model.StepImpl:
    """``base`` (eager or compiled, grouped or loop MoE) with the collectives of tensor parallelism and,
    with ``ep`` > 1, the MoE by expert parallelism. Under ``compile`` the pure parts (projections, the
    routed experts) are compiled; the collectives run between them, eagerly."""
    project = model.compiled_once(model.attention_output) if base.compiled else model.attention_output
    routed = {"grouped": model.routed_grouped, "loop": model.routed_loop}[base.moe_kind]
    if base.compiled and base.moe_kind == "grouped":
        routed = model.compiled_once(model.routed_grouped)

    def post_attention(x, out, cos, sin, wo_a, wo_b, heads, groups):
        return x + comm.all_reduce(project(out, cos, sin, wo_a, wo_b, heads, groups))

    def moe_tp(x, ffn_norm, gate_w, gate_bias, w13, w2, shared_w13, shared_w2, top_k):
        h = model.rms_norm(x, ffn_norm)
        return x + comm.all_reduce(routed(h, gate_w, gate_bias, w13, w2, top_k) + model.shared_expert(h, shared_w13, shared_w2))

    def moe_ep(x, ffn_norm, gate_w, gate_bias, w13, w2, shared_w13, shared_w2, top_k):
        start, stop, chunk = token_slice(x.shape[0], comm.rank, comm.size)
        h = model.rms_norm(x[start:stop], ffn_norm)
        mine = ep_routed(comm, h, gate_w, gate_bias, w13, w2, top_k) + model.shared_expert(h, shared_w13, shared_w2)
        return x + comm.all_gather_rows(mine, x.shape[0], chunk)

    return model.StepImpl(base.pre_attention, post_attention, moe_ep if ep > 1 else moe_tp,
                          base.moe_kind, base.compiled)
