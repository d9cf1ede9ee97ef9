"""CPU-only traces: the outermost host ranges of each thread stand in for kernels.

On a CPU box the reference engine's work is aten ops and record_function ranges named after the
Triton kernels they wrap (run by the Triton interpreter); the outermost range on a thread is one
unit of work and its duration is wall time on the CPU, nested ranges are already inside it.
ProfilerStep#N and the profiler's own ranges are not work: they are skipped, so their children are
the outermost ranges.
"""

from __future__ import annotations

import re

import numpy as np

HOST_RANGE_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
# A record_function range marking an operation (several kernels: a wrapper with its epilogue), as
# the reference engine names the attention call ("op:sparse_decode"): not one unit of work, so the
# kernels inside it stay the outermost ranges; tools.trace.ops attributes them to it.
OPERATION_PREFIX = "op:"
# Ranges the profiler itself opens (execution-trace observer, profiler spans).
_PROFILER_INTERNAL = re.compile(r"^(\[pytorch\|profiler|PyTorch Profiler)")
# Kineto timestamps have nanosecond decimals; a sibling starting where the previous range ended can
# read a fraction of a nanosecond early once both are floats.
_ABUT_TOLERANCE_US = 5e-4


def is_work_range(name: str) -> bool:
    """False for ProfilerStep#N, profiler-internal ranges and operation ranges (``op:NAME``)."""
    return not (PROFILER_STEP.match(name) or _PROFILER_INTERNAL.match(name) or name.startswith(OPERATION_PREFIX))


def outermost(starts, durs) -> np.ndarray:
    """Indices of the ranges (one thread's) that no other range of the list encloses, by start time."""
    s = np.asarray(starts, dtype=np.float64)
    if s.size == 0:
        return np.empty(0, dtype=np.int64)
    s = s - s.min()  # relative times keep the durations' precision (see timeline.timeline)
    e = s + np.asarray(durs, dtype=np.float64)
    # Ties on start: the longer range first, so it encloses the shorter.
    order = np.lexsort((-e, s))
    s_sorted = s[order]
    reach = np.maximum.accumulate(e[order])
    outer = np.empty(s.size, dtype=bool)
    outer[0] = True
    outer[1:] = s_sorted[1:] >= reach[:-1] - _ABUT_TOLERANCE_US
    return order[outer]
