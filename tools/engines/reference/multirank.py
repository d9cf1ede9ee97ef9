"""The reference engine across processes: one process per rank, joined by torch.distributed.

``run_bench`` / ``run_sweep`` spawn the ranks (torch.multiprocessing, start method spawn) with the
NVLS-free environment (NO_NVLS), join them in one process group (NCCL on GPUs, rank r on cuda:r; gloo on
the CPU) and merge what each measured. Every rank builds the whole model's weights from the spec's seed
(those TP1 builds) and keeps its own slice (shard.py), builds the same caches and input, and runs the
decode step with the collectives (collective.py): the ranks together compute TP1's step. Each rank
times its own steps and, when profiled, writes its own trace, named as SGLang names per-rank traces
(``<id>-TP-<rank>[-EP-<rank>].trace.json.gz``, srt/utils/profile_utils.py). A result row is rank 0's,
with the step time of the slowest rank step by step, and ``ranks`` (each rank's pid, step times, time in
collectives and busy time), ``critical_rank`` (the rank with the most busy time: the others wait for
it) and ``imbalance`` (the critical rank's busy time over the ranks' mean, less 1).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from . import bench, model, shard
from .collective import Comm, parallel_impl
from .spec import BenchSpec, SweepSpec, rank_shapes

# NVLink multicast (NVLS) stays off in every launched environment: NCCL's NVLS algorithms, torch's
# symmetric-memory multicast and NVSHMEM's.
NO_NVLS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TRACE_NAME = "reference-b{batch}-TP-{rank}{ep}.trace.json.gz"
EAGER_TRACE_NAME = "reference-b{batch}-eager-TP-{rank}{ep}.trace.json.gz"


class RankFailed(RuntimeError):
    """A rank process failed; the message is its first failure's, ``kind`` its kind."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def _nccl_env(env: dict[str, str]) -> tuple:
    # NCCL reads its variables when a communicator is made: a run that sets them gets a group of its own.
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith("NCCL_")))


class RankEngine:
    """One rank's weights (sharded per (tp, ep) from the whole model's), its process groups and its steps."""

    def __init__(self, spec: SweepSpec, device: torch.device):
        self.rank, self.device = dist.get_rank(), device
        self.full_spec = spec.base.model_copy(update={"tp": 1, "ep": 1, "distributed": False})
        self.full_shapes, full = bench.build_weights(self.full_spec, device)
        runs = [spec.spec_of(i) for i in range(len(spec.runs))]
        self.groups: dict[tuple, tuple] = {}
        for run_spec, entry in zip(runs, spec.runs):  # every rank makes every group, in the same order
            key = (run_spec.tp, _nccl_env(entry.env))
            if key not in self.groups:
                group = dist.new_group(list(range(run_spec.tp)))
                self.groups[key] = (group, Comm(group, self.rank, run_spec.tp, device))
        self.shards: dict[tuple[int, int], tuple] = {}
        for run_spec in runs:
            key = (run_spec.tp, run_spec.ep)
            if key not in self.shards and self.rank < run_spec.tp:
                shapes = self.shapes_of(run_spec)
                self.shards[key] = (shapes, [shard.shard_layer(w, self.rank, *key, shapes.kernel_heads) for w in full])
        del full
        self.shapes = self.shapes_of(spec.base)
        self.comm: Comm | None = None

    def shapes_of(self, spec: BenchSpec):
        """The rank's shapes: rank_shapes, with the full FFN width when experts are split instead."""
        shapes = rank_shapes(spec)
        if spec.ep > 1:
            shapes = shapes.model_copy(update={"moe_intermediate_per_rank": self.full_shapes.moe_intermediate_per_rank,
                                               "shared_intermediate_per_rank": self.full_shapes.shared_intermediate_per_rank})
        return shapes

    def setting(self, run_spec: BenchSpec) -> dict:
        return {**bench.setting_of(run_spec), "tp": run_spec.tp, "ep": run_spec.ep}

    def make_step(self, spec, shapes, weights, batch, device, attend, impl):
        """bench.build_step for this rank: the whole model's caches and input, the rank's query heads
        (zero-padded to its kernel heads), the collectives around the pure parts, their time per step."""
        step, states = bench.build_step(spec, shapes, weights, batch, device, attend,
                                        parallel_impl(impl, self.comm, spec.ep), state_shapes=self.full_shapes)
        for state in states:
            state.q_padded = torch.zeros((batch, shapes.kernel_heads, shapes.head_dim), dtype=model.DTYPE, device=device)
        return self.comm.timed_step(step), states

    def use(self, run_spec: BenchSpec, env: dict[str, str]) -> tuple | None:
        """The run's (shapes, weights) on this rank, its Comm made current; None when the rank is not in the run."""
        if self.rank >= run_spec.tp:
            return None
        self.comm = self.groups[(run_spec.tp, _nccl_env(env))][1]
        return self.shards[(run_spec.tp, run_spec.ep)]

    def measure(self, run_spec: BenchSpec, env: dict[str, str], batch: int, attend) -> dict | None:
        """One batch of one setting on this rank (bench.measure), with the rank's own record; None when
        the rank is not in the run."""
        held = self.use(run_spec, env)
        if held is None:
            return None
        shapes, weights = held
        self.comm.step_comm_ms = []
        row = bench.measure(run_spec, shapes, weights, batch, self.device, attend, self.make_step)
        comm = self.comm.step_comm_ms[-run_spec.steps:] if self.comm.timed else None
        row["rank"] = {"rank": self.rank, "pid": os.getpid(), "step_ms_samples": row["step_ms_samples"],
                       "comm_ms_samples": comm}
        return row

    def rows(self, run_spec: BenchSpec, env: dict[str, str], attend) -> list[dict]:
        """Sweep interface (sweep.OneProcess): the run's rows on this rank, [] when it is not in the run."""
        rows = [self.measure(run_spec, env, batch, attend) for batch in run_spec.batch_sizes]
        return [r for r in rows if r is not None]

    def profile(self, spec: BenchSpec, attend, out_dir: Path) -> dict:
        shapes, weights = self.use(spec, {})
        ep = f"-EP-{self.rank}" if spec.ep > 1 else ""
        names = tuple(n.replace("{rank}", str(self.rank)).replace("{ep}", ep) for n in (TRACE_NAME, EAGER_TRACE_NAME))
        trace = bench.profile_batch(spec, shapes, weights, self.device, attend, out_dir, names, self.make_step)
        return {**trace, "rank": self.rank, "pid": os.getpid()}
