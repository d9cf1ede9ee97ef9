"""CPU-only traces: the outermost host ranges of each thread stand in for kernels.

On a CPU box the reference engine's work is aten ops and record_function ranges named after the
Triton kernels they wrap (run by the Triton interpreter); the outermost range on a thread is one
unit of work and its duration is wall time on the CPU, nested ranges are already inside it.
ProfilerStep#N (SGLang's ``step[DECODE bs=N]`` spans alike) and the profiler's own ranges are not work:
they are skipped, so their children are the outermost ranges. A gloo collective's two ranges (the caller's enqueue, gloo's worker) are one unit.
"""

from __future__ import annotations

import re

import numpy as np

HOST_RANGE_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
# SGLang's scheduler profiles without a schedule, so its traces have no ProfilerStep#N: each forward step is a
# record_function span named by srt/utils/profile_utils.py build_step_span_name ("step[DECODE bs=4]", with
# " toks=N" for EXTEND and detailed annotations after it), on the host and, as gpu_user_annotation, on every
# stream the step's kernels ran on (the real 0.5.17 server's traces, tests/data/real-sglang-0517-h100).
_SGLANG_STEP = r"step\[[A-Z_]+ bs=\d+[^\]]*\]"
SGLANG_STEP = re.compile(rf"^{_SGLANG_STEP}$")
PROFILER_STEP = re.compile(rf"^(ProfilerStep#\d+|{_SGLANG_STEP})$")
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
    """False for ProfilerStep#N and SGLang's step spans, profiler-internal ranges and operation ranges (``op:NAME``)."""
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


# gloo's collectives, as torch's profiler records them on the CPU (seen in a TP2 trace of the reference
# engine over gloo, torch 2.13): the calling thread's ``c10d::allreduce_`` (cpu_op, tens of µs) only
# enqueues the work and returns; the calling thread then blocks in ``work.wait()`` (no range: only a
# Python frame when with_stack), while one of the process group's ``pt_gloo_runloop`` threads runs the
# collective as ``gloo:all_reduce`` (user_annotation, from the moment it dequeues the work to the
# transfer's end, the wait for the peer ranks included). Both are outermost ranges of their threads,
# so each collective was two units of work. Counted once: the worker's range joins the enqueue that
# precedes it and they make one unit on the calling thread, from the enqueue's start to the later end,
# named after the collective (the worker's name): the wall time the caller spends in the collective.
# No id links the two (their External ids count per thread); gloo's work queue is first in, first out
# and a blocking collective has one call in flight per caller, so a worker's range belongs to the
# latest enqueue before it. Not covered: the caller's wake-up after the worker ends (inside wait(), no
# range; ~10 µs on an idle box, a scheduler tick, ~4 ms, on a loaded one).
CALLER_PREFIX = "c10d::"
WORKER_PREFIX = "gloo:"


def fold_worker_collectives(units: dict, name_of=str) -> dict:
    """Units of work ``{(pid, tid): [[start, dur, name(, end)], ...]}`` (a thread's outermost ranges;
    ``name_of`` gives a name's text) with each ``gloo:`` worker-thread range of a process folded into the latest
    ``c10d::`` range of another thread of that process starting at or before it (each enqueue takes
    one worker range). Unchanged (the same object) when no unit is a worker's."""
    workers = [(key, i) for key, rows in units.items() for i, row in enumerate(rows)
               if name_of(row[2]).startswith(WORKER_PREFIX)]
    if not workers:
        return units
    callers: dict = {}
    for key, rows in units.items():
        for i, row in enumerate(rows):
            if name_of(row[2]).startswith(CALLER_PREFIX):
                callers.setdefault(key[0], []).append((row[0], key, i))
    for found in callers.values():
        found.sort(key=lambda item: item[0])
    folded = {key: [list(row) for row in rows] for key, rows in units.items()}
    dropped: set = set()
    taken: set = set()
    for key, i in sorted(workers, key=lambda item: units[item[0]][item[1]][0]):
        start, dur, name = units[key][i][:3]
        enqueue = [c for c in callers.get(key[0], ()) if c[1] != key and c[0] <= start + _ABUT_TOLERANCE_US
                   and (c[1], c[2]) not in taken]
        if not enqueue:
            continue
        _, caller_key, j = enqueue[-1]
        taken.add((caller_key, j))
        row = folded[caller_key][j]
        # relative to the enqueue's start, so the duration keeps its precision (see timeline.timeline)
        if (start - row[0]) + dur > row[1]:
            row[1] = (start - row[0]) + dur
            if len(row) > 3:
                row[3] = start + dur
        row[2] = name
        dropped.add((key, i))
    return {key: [row for i, row in enumerate(rows) if (key, i) not in dropped] for key, rows in folded.items()}
