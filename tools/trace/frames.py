"""Where each kernel was launched from: a trace's host frames, and each kernel placed in the frames
open at its launch, streamed.

A GPU kernel is linked to its launch (the runtime/driver call with the same ``args.correlation``:
``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaLaunchKernelExC``, ``cuLaunchKernel``,
``cudaMemcpyAsync``, ``cudaGraphLaunch``...), and the launch to the frames that enclose it in time
on the same thread: ``record_function`` ranges (``user_annotation``) and, in traces recorded with
``with_stack=True``, Python frames (``python_function``). On a CPU-only trace the "kernels" are the
outermost host ranges of each thread (see host.py) and are placed in their enclosing frames the
same way. Which frame is a kernel's operation is ops.py's.
"""

from __future__ import annotations

import re
import sys
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cuda_graph import GRAPH_LAUNCH, RUNTIME_CATEGORIES
from .events import TraceFormatError, iter_record_batches
from .host import OPERATION_PREFIX, PROFILER_STEP, fold_worker_collectives, is_work_range, outermost
from .ranks import rank_from_pid
from .steps import step_number
from .summary import CPU_HOST, DEVICE_CATEGORIES

# Top-level packages whose frames are the machinery under a call, never the operation itself.
LIBRARY_PACKAGES = frozenset({"torch", "triton", "numpy", "functorch", "torchgen", "typing_extensions",
                              "nvtx", "_pytest", "pytest", "pluggy"}) | frozenset(sys.stdlib_module_names)
_PY_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<function>.+)$")
_SITE = re.compile(r"^.*?/(?:site|dist)-packages/")
# Kineto's timestamps carry nanosecond decimals; a launch at its frame's very start can read a
# fraction of a nanosecond early once both are floats.
_TOLERANCE_US = 5e-3

# Frame kinds (ThreadFrames.kinds).
USER, LIBRARY, ANNOTATION, WORK, CPU_OP = 0, 1, 2, 3, 4


def parse_frame(name: str) -> dict[str, Any] | None:
    """``{"function", "file", "line"}`` of a Python-frame event name (``path.py(LINE): FUNC``), else None."""
    match = _PY_FRAME.match(name)
    if not match:
        return None
    return {"function": match.group("function"), "file": match.group("file"), "line": int(match.group("line"))}


def is_user_file(path: str, library: frozenset[str] = LIBRARY_PACKAGES) -> bool:
    """True for a file that is neither a library's nor the standard library's (paths as the profiler
    writes them: relative to their sys.path entry, or absolute)."""
    relative = _SITE.sub("", path).lstrip("/")
    top = relative.split("/", 1)[0]
    if top.endswith(".py"):
        top = top[:-3]
    return top not in library and not top.startswith("<")


# -- reading ----------------------------------------------------------------------------------


@dataclass
class ThreadFrames:
    """One host thread's frames: start, end, name id, kind."""

    starts: array = field(default_factory=lambda: array("d"))
    ends: array = field(default_factory=lambda: array("d"))
    names: array = field(default_factory=lambda: array("l"))
    kinds: array = field(default_factory=lambda: array("b"))


@dataclass
class FileEvents:
    """What one pass keeps of a file (compact arrays, not the events)."""

    names: list = field(default_factory=list)
    name_ids: dict = field(default_factory=dict)
    name_kinds: dict = field(default_factory=dict)  # name id -> frame kind (python/annotation names)
    threads: dict = field(default_factory=dict)  # (pid, tid) -> ThreadFrames
    # device events
    k_name: array = field(default_factory=lambda: array("l"))
    k_dur: array = field(default_factory=lambda: array("d"))
    k_key: array = field(default_factory=lambda: array("q"))
    k_ts: array = field(default_factory=lambda: array("d"))  # device start (us): the order sequences.py reads
    # ProfilerStep#N ranges as the device saw them (gpu_user_annotation): (N, ts, dur)
    device_steps: list = field(default_factory=list)
    # runtime calls: correlation key, thread index, start, end, graph launch flag
    r_key: array = field(default_factory=lambda: array("q"))
    r_thread: array = field(default_factory=lambda: array("l"))
    r_start: array = field(default_factory=lambda: array("d"))
    r_end: array = field(default_factory=lambda: array("d"))
    r_graph: array = field(default_factory=lambda: array("b"))
    labels: dict = field(default_factory=dict)
    thread_index: dict = field(default_factory=dict)
    thread_keys: list = field(default_factory=list)
    python_frames: int = 0
    operation_ranges: int = 0  # op:NAME ranges
    other_ranges: int = 0  # other record_function ranges: on a cpu-host trace, the kernels themselves

    def name_id(self, name: str) -> int:
        found = self.name_ids.get(name)
        if found is None:
            found = self.name_ids[name] = len(self.names)
            self.names.append(name)
        return found

    def label_id(self, pid) -> int:
        label = rank_from_pid(pid)
        found = self.labels.get(label)
        if found is None:
            found = self.labels[label] = len(self.labels)
        return found

    def thread(self, key) -> int:
        found = self.thread_index.get(key)
        if found is None:
            found = self.thread_index[key] = len(self.thread_keys)
            self.thread_keys.append(key)
            self.threads[key] = ThreadFrames()
        return found


def _correlation_key(label: int, correlation: int) -> int:
    return (label << 40) | (correlation & ((1 << 40) - 1))


def _frame_kind(cat: str, name: str, library: frozenset[str]) -> int | None:
    if cat == "python_function":
        frame = parse_frame(name)
        return USER if frame is not None and is_user_file(frame["file"], library) else LIBRARY
    if cat == "user_annotation":
        if PROFILER_STEP.match(name):
            return None
        if name.startswith(OPERATION_PREFIX):
            return ANNOTATION
        return WORK if is_work_range(name) else None
    if cat == "cpu_op":
        return CPU_OP
    return None


def read_file_events(path: str, library: frozenset[str]) -> FileEvents:
    """One streaming pass over a trace file: its device events, runtime calls and host frames (frames of
    ``library`` packages kept as LIBRARY, never as the operation). TraceFormatError on an event without
    a numeric ts/dur/correlation."""
    acc = FileEvents()
    count = 0
    for batch in iter_record_batches(path):
        for event in batch:
            count += 1
            if event.ph != "X":
                continue
            cat = event.cat
            try:
                if cat in DEVICE_CATEGORIES:
                    acc.k_name.append(acc.name_id(event.name))
                    acc.k_dur.append(event.dur)
                    acc.k_ts.append(event.ts)
                    correlation = -1 if event.args is None else event.args.correlation
                    acc.k_key.append(_correlation_key(acc.label_id(event.pid), correlation) if correlation >= 0 else -1)
                elif cat in RUNTIME_CATEGORIES:
                    correlation = -1 if event.args is None else event.args.correlation
                    if correlation < 0:
                        continue
                    acc.r_key.append(_correlation_key(acc.label_id(event.pid), correlation))
                    acc.r_thread.append(acc.thread((event.pid, event.tid)))
                    acc.r_start.append(event.ts)
                    acc.r_end.append(event.ts + event.dur)
                    acc.r_graph.append(1 if isinstance(event.name, str) and GRAPH_LAUNCH.match(event.name) else 0)
                elif cat == "gpu_user_annotation":
                    number = step_number(event.name)
                    if number is not None:
                        acc.device_steps.append((number, float(event.ts), float(event.dur)))
                elif cat in ("python_function", "user_annotation", "cpu_op"):
                    name = event.name
                    if not isinstance(name, str):
                        continue
                    name_id = acc.name_id(name)
                    kind = acc.name_kinds.get(name_id, -1)
                    if kind == -1:
                        kind = acc.name_kinds[name_id] = _frame_kind(cat, name, library)
                    if kind is None:
                        continue
                    if cat == "python_function":
                        acc.python_frames += 1
                    elif kind == ANNOTATION:
                        acc.operation_ranges += 1
                    elif kind == WORK:
                        acc.other_ranges += 1
                    thread = acc.threads[acc.thread_keys[acc.thread((event.pid, event.tid))]]
                    thread.starts.append(event.ts)
                    thread.ends.append(event.ts + event.dur)
                    thread.names.append(name_id)
                    thread.kinds.append(kind)
            except TypeError as exc:
                raise TraceFormatError(f"{path}: event {count} ({event.name!r}) lacks a numeric ts/dur/correlation") from exc
    return acc


# -- placing queries in their frames ----------------------------------------------------------


@dataclass
class Query:
    """Things to place, per thread: start, end, kernel-table name id, duration, a tag (graph: 1)."""

    starts: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    names: list = field(default_factory=list)
    durs: list = field(default_factory=list)
    graph: list = field(default_factory=list)
    kernel: list = field(default_factory=list)  # GPU: the kernel's index in FileEvents' k_* arrays


def sweep(thread: ThreadFrames, frame_kinds: frozenset[int], query: Query, visit) -> None:
    """Walk one thread's frames (those of ``frame_kinds``) and queries in time order, calling
    ``visit(q, stack)`` for each query with the frames open at its start, outer first
    (frame indices into ``thread``)."""
    kinds = np.frombuffer(thread.kinds, dtype=np.int8) if len(thread.kinds) else np.empty(0, np.int8)
    starts = np.frombuffer(thread.starts, dtype=np.float64) if len(thread.starts) else np.empty(0)
    ends = np.frombuffer(thread.ends, dtype=np.float64) if len(thread.ends) else np.empty(0)
    keep = np.isin(kinds, list(frame_kinds))
    frames = np.nonzero(keep)[0]
    # Ties on start: the longer frame first, so it encloses the shorter.
    frames = frames[np.lexsort((-ends[frames], starts[frames]))]
    f_starts = starts[frames].tolist()
    f_ends = ends[frames].tolist()
    frames = frames.tolist()
    order = sorted(range(len(query.starts)), key=query.starts.__getitem__)
    stack: list[int] = []
    stack_ends: list[float] = []
    i, n = 0, len(frames)
    for q in order:
        t = query.starts[q]
        while i < n and f_starts[i] <= t + _TOLERANCE_US:
            while stack_ends and stack_ends[-1] < f_starts[i] - _TOLERANCE_US:
                stack.pop()
                stack_ends.pop()
            stack.append(frames[i])
            stack_ends.append(f_ends[i])
            i += 1
        while stack_ends and stack_ends[-1] < t - _TOLERANCE_US:
            stack.pop()
            stack_ends.pop()
        visit(q, stack)


def _host_queries(acc: FileEvents) -> tuple[dict[int, Query], int, int, int]:
    """cpu-host queries: each thread's outermost work ranges, gloo's worker copies folded (host.py)."""
    units = {}
    for key in acc.thread_keys:
        thread = acc.threads[key]
        kinds = np.frombuffer(thread.kinds, dtype=np.int8) if len(thread.kinds) else np.empty(0, np.int8)
        work = np.nonzero((kinds == WORK) | (kinds == CPU_OP))[0]
        if work.size == 0:
            continue
        starts = np.frombuffer(thread.starts, dtype=np.float64)[work]
        ends = np.frombuffer(thread.ends, dtype=np.float64)[work]
        units[key] = [[float(starts[j]), float(ends[j] - starts[j]), thread.names[int(work[j])], float(ends[j])]
                      for j in outermost(starts, ends - starts)]
    per_thread: dict[int, Query] = {}
    total = 0
    for key, rows in fold_worker_collectives(units, acc.names.__getitem__).items():
        query = per_thread.setdefault(acc.thread_index[key], Query())
        for start, dur, name, end in rows:
            query.starts.append(start)
            query.ends.append(end)
            query.names.append(name)
            query.durs.append(dur)
            query.graph.append(0)
            total += 1
    return per_thread, total, total, 0


def queries(acc: FileEvents, kind: str) -> tuple[dict[int, Query], int, int, int]:
    """Per thread index, what to place; and (kernel events, linked, graph-linked) counts.

    GPU: each kernel at its launch (index -1: the kernels linked to no launch). cpu-host: each
    outermost work range of a thread at itself."""
    per_thread: dict[int, Query] = {}
    if kind == CPU_HOST:
        return _host_queries(acc)
    def col(values, dtype):
        return np.frombuffer(values, dtype=dtype) if len(values) else np.empty(0, dtype)

    keys = col(acc.r_key, np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    k_keys, k_names, k_durs = col(acc.k_key, np.int64), col(acc.k_name, np.int64), col(acc.k_dur, np.float64)
    if sorted_keys.size:
        at = np.minimum(np.searchsorted(sorted_keys, k_keys), sorted_keys.size - 1)
        linked = (k_keys >= 0) & (sorted_keys[at] == k_keys)
        launch = order[at]
    else:
        linked = np.zeros(k_keys.size, dtype=bool)
        launch = np.zeros(k_keys.size, dtype=np.int64)
    positions = np.arange(k_keys.size)
    unlinked = Query(names=k_names[~linked].tolist(), durs=k_durs[~linked].tolist(), kernel=positions[~linked].tolist())
    r_thread, r_start, r_end = col(acc.r_thread, np.int64), col(acc.r_start, np.float64), col(acc.r_end, np.float64)
    r_graph = col(acc.r_graph, np.int8)
    launch = launch[linked]
    threads = r_thread[launch] if launch.size else np.empty(0, np.int64)
    for index in np.unique(threads).tolist():
        mine = threads == index
        at_launch = launch[mine]
        per_thread[index] = Query(starts=r_start[at_launch].tolist(), ends=r_end[at_launch].tolist(),
                                   names=k_names[linked][mine].tolist(), durs=k_durs[linked][mine].tolist(),
                                   graph=r_graph[at_launch].tolist(), kernel=positions[linked][mine].tolist())
    per_thread[-1] = unlinked
    graph_linked = int(r_graph[launch].sum()) if launch.size else 0
    return per_thread, int(k_keys.size), int(linked.sum()), graph_linked
