"""CUDA-graph replays: are the kernels they ran in the trace?

A graph launch is one host runtime call (``cudaGraphLaunch``) that runs many kernels. Recent torch
(2.11 here) records those kernels with the launch's correlation id, so a graph-replay trace is
complete and is ranked like any other. When the profiler did not record them, the launch has no
device event correlated to it: the kernels ran but are missing, and ranking what is left would
be wrong.
"""

from __future__ import annotations

import re

import numpy as np

from .records import CudaGraphInfo

GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})


def graph_info(launch_correlations, kernel_correlations) -> CudaGraphInfo:
    """Account graph launches (their correlation ids) against device events' correlation ids."""
    launches = np.asarray(launch_correlations, dtype=np.int64)
    kernels = np.asarray(kernel_correlations, dtype=np.int64)
    if launches.size == 0:
        return CudaGraphInfo()
    in_graph = np.isin(kernels, launches)
    correlated = int(np.count_nonzero(in_graph))
    with_kernels = int(np.count_nonzero(np.isin(launches, kernels[in_graph])))
    total = int(launches.size)
    hidden = with_kernels < total
    if hidden:
        note = (
            f"{total - with_kernels} of {total} CUDA-graph launches have no kernel events correlated to them: "
            "the kernels they ran are not in the trace, so the kernel table is incomplete and is not ranked"
        )
    else:
        note = f"all {total} CUDA-graph launches have their kernels in the trace ({correlated} kernel events)"
    return CudaGraphInfo(
        launches=total,
        launches_with_kernels=with_kernels,
        correlated_kernels=correlated,
        hidden=hidden,
        note=note,
    )


def merge_graph_info(parts: list[CudaGraphInfo]) -> CudaGraphInfo:
    """Sum per-rank accounting; hidden when any rank's is."""
    if len(parts) == 1:
        return parts[0]
    launches = sum(p.launches for p in parts)
    if launches == 0:
        return CudaGraphInfo()
    with_kernels = sum(p.launches_with_kernels for p in parts)
    correlated = sum(p.correlated_kernels for p in parts)
    hidden = any(p.hidden for p in parts)
    if hidden:
        note = (
            f"{launches - with_kernels} of {launches} CUDA-graph launches (all ranks) have no kernel events "
            "correlated to them: the kernel table is incomplete and is not ranked"
        )
    else:
        note = f"all {launches} CUDA-graph launches (all ranks) have their kernels in the trace ({correlated} kernel events)"
    return CudaGraphInfo(
        launches=launches,
        launches_with_kernels=with_kernels,
        correlated_kernels=correlated,
        hidden=hidden,
        note=note,
    )
