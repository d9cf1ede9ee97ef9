"""Trace analysis: kernel tables, categories, GPU idle share and CUDA-graph accounting from
PyTorch-profiler Chrome traces, streamed (see docs/trace.md).

Public API (plain functions and records):
    summarize(paths, *, by_rank=False, categories=None) -> TraceSummary
    dominant(summary, min_share) -> KernelRow | None
    TraceSummary, RankSummary, KernelRow, CudaGraphInfo, TraceFile (to_dict()/from_dict())
    DEFAULT_RULES (the category table), TraceFormatError
    attribute(paths, dominant=None, *, use_annotations=True) -> Attribution
        (kernel time by launching frame; the dominant kernel's operation: tools/trace/ops.py)
    operation_of(paths, kernel, *, use_annotations=True) -> DominantOp.to_dict()
    hta_kernel_totals(path, *, include_last_profiler_step=False, rounding=True) -> {name: us}
        (what HTA's kernel breakdown reports, recomputed from our events: explains the gap)
"""

from __future__ import annotations

from .categories import DEFAULT_RULES
from .events import TraceFormatError
from .hta_compat import hta_kernel_totals
from .ops import attribute, operation_of
from .records import (Attribution, CudaGraphInfo, DominantOp, KernelRow, OpKernel, OpRow, RankSummary, StepWindow,
                      TraceFile, TraceSummary)
from .summary import CPU_HOST, GPU, NO_KERNELS_NOTE, summarize

__all__ = [
    "Attribution",
    "DominantOp",
    "OpKernel",
    "OpRow",
    "StepWindow",
    "attribute",
    "operation_of",
    "CPU_HOST",
    "DEFAULT_RULES",
    "GPU",
    "CudaGraphInfo",
    "KernelRow",
    "RankSummary",
    "TraceFile",
    "TraceFormatError",
    "TraceSummary",
    "dominant",
    "hta_kernel_totals",
    "summarize",
]


def dominant(summary: TraceSummary, min_share: float) -> KernelRow | None:
    """The merged table's top kernel if its share is at least min_share (a fraction, 0.5 = 50%).

    None when the table must not be ranked (kernels hidden behind CUDA-graph launches), when it is
    empty, or when the top kernel's share is below min_share. On a "cpu-host" summary the row is a
    host range (interpreter/CPU time): the caller labels it so.
    """
    if summary.cuda_graph.hidden or not summary.merged.kernels or NO_KERNELS_NOTE in summary.notes:
        return None
    top = summary.merged.kernels[0]
    if top.share is None or top.share < min_share:
        return None
    return top
