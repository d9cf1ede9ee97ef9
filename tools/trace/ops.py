"""Kernel time by the operation that launched it, from PyTorch-profiler traces, streamed.

A GPU kernel is linked to its launch (the runtime/driver call with the same ``args.correlation``:
``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaLaunchKernelExC``, ``cuLaunchKernel``,
``cudaMemcpyAsync``, ``cudaGraphLaunch``...), and the launch to the frames that enclose it in time
on the same thread: ``record_function`` ranges (``user_annotation``) and, in traces recorded with
``with_stack=True``, Python frames (``python_function``). On a CPU-only trace the "kernels" are the
outermost host ranges of each thread (see host.py) and are placed in their enclosing frames the
same way.

An operation is a launching frame. The dominant kernel's operation is the innermost enclosing
``record_function`` range that is not a ``ProfilerStep#N`` (the reference engine marks its attention
call ``op:sparse_decode``), else the innermost user Python frame (not torch, triton, numpy or the
standard library; an engine package such as sglang is user code) that launches another kernel after
the dominant one inside it: the wrapper with its merge and sink, not the bare launcher whose only
other kernels are the fills before it. The operation's total is every kernel launched inside any
instance of that frame. A CUDA-graph replay launches its kernels from one ``cudaGraphLaunch``: the
trace says nothing about which frame each came from, so attribution needs an eager profile of the
same step.
"""

from __future__ import annotations

import math
import re
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import ranks as rank_labels
from .cuda_graph import GRAPH_LAUNCH, RUNTIME_CATEGORIES
from .events import TraceFormatError, iter_record_batches
from .host import OPERATION_PREFIX, PROFILER_STEP, is_work_range, outermost
from .summary import CPU_HOST, DEVICE_CATEGORIES, GPU

# Statuses of an attribution (Attribution.status, DominantOp.status).
ATTRIBUTED = "attributed"
NEEDS_EAGER = "needs-eager-profile"
NO_FRAMES = "no-frames"
NO_LAUNCHES = "no-launches"
NO_DOMINANT = "no-dominant"

EAGER_MESSAGE = (
    "CUDA-graph replay: the kernels correlate to cudaGraphLaunch, not to per-kernel launches, so the trace "
    "cannot say which frame launched each; attribution needs an eager profile of the same step"
)
NO_FRAMES_MESSAGE = (
    "no record_function range or user Python frame encloses the dominant kernel's launches: record the "
    "trace with with_stack=True, or a record_function range around the operation"
)

# Top-level packages whose frames are the machinery under a call, never the operation itself.
LIBRARY_PACKAGES = frozenset({"torch", "triton", "numpy", "functorch", "torchgen", "typing_extensions",
                              "nvtx", "_pytest", "pytest", "pluggy"}) | frozenset(sys.stdlib_module_names)
_PY_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<function>.+)$")
_SITE = re.compile(r"^.*?/(?:site|dist)-packages/")
# Kineto's timestamps carry nanosecond decimals; a launch at its frame's very start can read a
# fraction of a nanosecond early once both are floats.
_TOLERANCE_US = 5e-3

# Frame kinds.
_USER, _LIBRARY, _ANNOTATION, _WORK, _CPU_OP = 0, 1, 2, 3, 4

# aten ops that only make views or allocate: no device kernel on a GPU, so on a cpu-host trace they do
# not count as "another kernel" of a frame (a launcher returning out.unsqueeze(1) is still a launcher).
_METADATA_OPS = re.compile(
    r"^aten::(view|_unsafe_view|view_as|reshape|unsqueeze|squeeze|permute|as_strided|expand|expand_as|transpose|t"
    r"|select|slice|narrow|unflatten|flatten|alias|detach|empty|empty_like|empty_strided|resolve_conj|resolve_neg"
    r"|set_|lift_fresh|split|chunk|unbind|contiguous)$")

GRAPH_ROW = "(CUDA graph replay)"
NO_LAUNCH_ROW = "(no launch in the trace)"
NO_FRAME_ROW = "(no frame)"


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


@dataclass(frozen=True)
class OpKernel:
    """One kernel name inside an operation row."""

    name: str
    calls: int
    total_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "total_us": self.total_us}


@dataclass(frozen=True)
class OpRow:
    """Kernel time launched from one frame. source: "record_function", "python", "aten" (the
    outermost aten op, when nothing else encloses the launch), "graph", "none". frame: the Python
    frame (function, file, line) where known. calls: frame instances that launched its kernels."""

    name: str
    source: str
    frame: dict[str, Any] | None
    calls: int
    total_us: float
    share: float | None
    kernels: tuple[OpKernel, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "frame": self.frame, "calls": self.calls,
                "total_us": self.total_us, "share": self.share, "kernels": [k.to_dict() for k in self.kernels]}


@dataclass(frozen=True)
class DominantOp:
    """The dominant kernel's operation: its frame, total GPU time and kernels.

    kernel_total_us: the kernel's own total; coverage: the share of that total whose launches lie
    in this operation; share: total_us of all kernel time; per_step_us: total_us per profiled step.
    """

    status: str
    message: str
    kernel: str
    kernel_total_us: float
    name: str | None = None
    source: str | None = None
    frame: dict[str, Any] | None = None
    total_us: float | None = None
    share: float | None = None
    coverage: float | None = None
    calls: int = 0
    kernels: tuple[OpKernel, ...] = ()
    rule: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "kernel": self.kernel,
                "kernel_total_us": self.kernel_total_us, "name": self.name, "source": self.source,
                "frame": self.frame, "total_us": self.total_us, "share": self.share, "coverage": self.coverage,
                "calls": self.calls, "kernels": [k.to_dict() for k in self.kernels], "rule": self.rule}


@dataclass(frozen=True)
class Attribution:
    """What attribute() found. kind: "gpu" or "cpu-host". status: ATTRIBUTED, NEEDS_EAGER,
    NO_FRAMES, NO_LAUNCHES or NO_DOMINANT (that of the dominant operation when one was sought).
    kernels/linked/graph_linked: kernel events, those linked to a launch, those to a graph launch.
    with_stack: the trace holds Python frames; annotations: record_function ranges that can enclose
    kernels (on cpu-host traces only ``op:NAME`` ones: the others are the kernels). rows: kernel time by launching frame, largest first."""

    kind: str
    status: str
    message: str
    files: tuple[str, ...]
    kernel_time_us: float
    kernels: int
    linked: int
    graph_linked: int
    with_stack: bool
    annotations: bool
    rows: tuple[OpRow, ...]
    dominant: DominantOp | None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status, "message": self.message, "files": list(self.files),
                "kernel_time_us": self.kernel_time_us, "kernels": self.kernels, "linked": self.linked,
                "graph_linked": self.graph_linked, "with_stack": self.with_stack, "annotations": self.annotations,
                "rows": [r.to_dict() for r in self.rows],
                "dominant": None if self.dominant is None else self.dominant.to_dict()}


# -- reading ----------------------------------------------------------------------------------


@dataclass
class _Thread:
    """One host thread's frames: start, end, name id, kind."""

    starts: array = field(default_factory=lambda: array("d"))
    ends: array = field(default_factory=lambda: array("d"))
    names: array = field(default_factory=lambda: array("l"))
    kinds: array = field(default_factory=lambda: array("b"))


@dataclass
class _FileEvents:
    """What one pass keeps of a file (compact arrays, not the events)."""

    names: list = field(default_factory=list)
    name_ids: dict = field(default_factory=dict)
    name_kinds: dict = field(default_factory=dict)  # name id -> frame kind (python/annotation names)
    threads: dict = field(default_factory=dict)  # (rank label, pid, tid) -> _Thread
    # device events
    k_name: array = field(default_factory=lambda: array("l"))
    k_dur: array = field(default_factory=lambda: array("d"))
    k_key: array = field(default_factory=lambda: array("q"))
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
        label = rank_labels.rank_from_pid(pid)
        found = self.labels.get(label)
        if found is None:
            found = self.labels[label] = len(self.labels)
        return found

    def thread(self, key) -> int:
        found = self.thread_index.get(key)
        if found is None:
            found = self.thread_index[key] = len(self.thread_keys)
            self.thread_keys.append(key)
            self.threads[key] = _Thread()
        return found


def _correlation_key(label: int, correlation: int) -> int:
    return (label << 40) | (correlation & ((1 << 40) - 1))


def _frame_kind(cat: str, name: str, library: frozenset[str]) -> int | None:
    if cat == "python_function":
        frame = parse_frame(name)
        return _USER if frame is not None and is_user_file(frame["file"], library) else _LIBRARY
    if cat == "user_annotation":
        if PROFILER_STEP.match(name):
            return None
        if name.startswith(OPERATION_PREFIX):
            return _ANNOTATION
        return _WORK if is_work_range(name) else None
    if cat == "cpu_op":
        return _CPU_OP
    return None


def _read(path: str, library: frozenset[str]) -> _FileEvents:
    acc = _FileEvents()
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
                    elif kind == _ANNOTATION:
                        acc.operation_ranges += 1
                    elif kind == _WORK:
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
class _Query:
    """Things to place, per thread: start, end, kernel-table name id, duration, a tag (graph: 1)."""

    starts: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    names: list = field(default_factory=list)
    durs: list = field(default_factory=list)
    graph: list = field(default_factory=list)


def _sweep(thread: _Thread, frame_kinds: frozenset[int], query: _Query, visit) -> None:
    """Walk one thread's frames (those of ``frame_kinds``) and queries in time order, calling
    ``visit(q, stack, kinds_stack)`` for each query with the frames open at its start, outer first
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


def _queries(acc: _FileEvents, kind: str) -> tuple[dict[int, _Query], int, int, int]:
    """Per thread index, what to place; and (kernel events, linked, graph-linked) counts.

    GPU: each kernel at its launch. cpu-host: each outermost work range of a thread at itself."""
    per_thread: dict[int, _Query] = {}
    if kind == CPU_HOST:
        total = 0
        for index, key in enumerate(acc.thread_keys):
            thread = acc.threads[key]
            kinds = np.frombuffer(thread.kinds, dtype=np.int8) if len(thread.kinds) else np.empty(0, np.int8)
            work = np.nonzero((kinds == _WORK) | (kinds == _CPU_OP))[0]
            if work.size == 0:
                continue
            starts = np.frombuffer(thread.starts, dtype=np.float64)[work]
            ends = np.frombuffer(thread.ends, dtype=np.float64)[work]
            query = per_thread.setdefault(index, _Query())
            for j in outermost(starts, ends - starts):
                query.starts.append(float(starts[j]))
                query.ends.append(float(ends[j]))
                query.names.append(thread.names[int(work[j])])
                query.durs.append(float(ends[j] - starts[j]))
                query.graph.append(0)
                total += 1
        return per_thread, total, total, 0
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
    unlinked = _Query(names=k_names[~linked].tolist(), durs=k_durs[~linked].tolist())
    r_thread, r_start, r_end = col(acc.r_thread, np.int64), col(acc.r_start, np.float64), col(acc.r_end, np.float64)
    r_graph = col(acc.r_graph, np.int8)
    launch = launch[linked]
    threads = r_thread[launch] if launch.size else np.empty(0, np.int64)
    for index in np.unique(threads).tolist():
        mine = threads == index
        at_launch = launch[mine]
        per_thread[index] = _Query(starts=r_start[at_launch].tolist(), ends=r_end[at_launch].tolist(),
                                   names=k_names[linked][mine].tolist(), durs=k_durs[linked][mine].tolist(),
                                   graph=r_graph[at_launch].tolist())
    per_thread[-1] = unlinked
    graph_linked = int(r_graph[launch].sum()) if launch.size else 0
    return per_thread, int(k_keys.size), int(linked.sum()), graph_linked


# -- the dominant kernel's operation ----------------------------------------------------------


def _op_key(names: list[str], source: str, name_id: int) -> tuple[str, str]:
    return source, names[name_id]


def _enclosing_kinds(kind: str, with_cpu_ops: bool) -> frozenset[int]:
    """Frames that may enclose a placed kernel: on cpu-host traces the kernels are themselves the
    outermost work ranges, so only Python frames and operation ranges enclose them."""
    if kind == CPU_HOST:
        return frozenset({_USER, _ANNOTATION})
    return frozenset({_USER, _ANNOTATION, _WORK, _CPU_OP} if with_cpu_ops else {_USER, _ANNOTATION, _WORK})


def _choose_dominant(acc: _FileEvents, per_thread, dominant_id: int, use_annotations: bool, kind: str) -> dict:
    """Vote, by the dominant kernel's time, for the frame each of its launches belongs to.
    Returns {(source, frame name): {"us": ..., "frame": python frame name or None}}."""
    votes: dict[tuple[str, str], dict] = {}
    for index, query in per_thread.items():
        if index < 0 or dominant_id not in query.names:
            continue
        thread = acc.threads[acc.thread_keys[index]]
        kinds = thread.kinds
        names = thread.names
        n_frames = len(kinds)
        seen_dom = bytearray(n_frames)
        other = bytearray(n_frames)
        other_after = bytearray(n_frames)
        chains: list[tuple[int, tuple[int, ...]]] = []
        metadata = {i for i in set(query.names) if _METADATA_OPS.match(acc.names[i])}

        def visit(q, stack):
            if query.graph[q]:
                return
            name = query.names[q]
            users = [f for f in stack if kinds[f] == _USER]
            if name == dominant_id:
                for f in users:
                    seen_dom[f] = 1
                chains.append((q, tuple(stack)))
            elif name not in metadata:
                for f in users:
                    other[f] = 1
                    if seen_dom[f]:
                        other_after[f] = 1

        _sweep(thread, _enclosing_kinds(kind, False), query, visit)
        for q, stack in chains:
            annotation_at = -1
            if use_annotations:
                for depth in range(len(stack) - 1, -1, -1):
                    if kinds[stack[depth]] in (_ANNOTATION, _WORK):
                        annotation_at = depth
                        break
            inner = [f for f in stack[annotation_at + 1:] if kinds[f] == _USER]
            python = (next((f for f in reversed(inner) if other_after[f]), None)
                      or next((f for f in reversed(inner) if other[f]), None)
                      or (inner[-1] if inner else None))
            if annotation_at >= 0:
                key = ("record_function", acc.names[names[stack[annotation_at]]])
            elif python is not None:
                key = ("python", acc.names[names[python]])
            else:
                key = ("none", NO_FRAME_ROW)
            vote = votes.setdefault(key, {"us": [], "frames": {}})
            vote["us"].append(query.durs[q])
            if python is not None:
                frame_name = acc.names[names[python]]
                vote["frames"][frame_name] = vote["frames"].get(frame_name, 0.0) + query.durs[q]
    return votes


# -- rows -------------------------------------------------------------------------------------


@dataclass
class _Row:
    source: str
    frame: str | None
    durations: dict = field(default_factory=dict)  # kernel name -> list of durations
    instances: set = field(default_factory=set)


def _rows(acc: _FileEvents, per_thread, op: tuple[str, str] | None, use_annotations: bool,
          rows: dict[tuple[str, str], _Row], file_index: int, kind: str) -> None:
    """Add each placed kernel's duration to its row: the dominant operation when inside it, else the
    innermost record_function range, else the innermost user Python frame, else the outermost aten op."""
    for index, query in per_thread.items():
        if index < 0:
            for q in range(len(query.names)):
                _add(rows, ("none", NO_LAUNCH_ROW), None, acc.names[query.names[q]], query.durs[q], None)
            continue
        thread = acc.threads[acc.thread_keys[index]]
        kinds, names = thread.kinds, thread.names

        def visit(q, stack):
            kernel = acc.names[query.names[q]]
            if query.graph[q]:
                _add(rows, ("graph", GRAPH_ROW), None, kernel, query.durs[q], None)
                return
            if op is not None:
                for f in stack:
                    if (kinds[f] == _USER and op[0] == "python" or kinds[f] in (_ANNOTATION, _WORK)
                            and op[0] == "record_function") and acc.names[names[f]] == op[1]:
                        _add(rows, op, None, kernel, query.durs[q], (file_index, index, f))
                        return
            if use_annotations:
                for f in reversed(stack):
                    if kinds[f] in (_ANNOTATION, _WORK):
                        _add(rows, ("record_function", acc.names[names[f]]), None, kernel, query.durs[q], (file_index, index, f))
                        return
            for f in reversed(stack):
                if kinds[f] == _USER:
                    _add(rows, ("python", acc.names[names[f]]), acc.names[names[f]], kernel, query.durs[q], (file_index, index, f))
                    return
            for f in stack:
                if kinds[f] == _CPU_OP:
                    _add(rows, ("aten", acc.names[names[f]]), None, kernel, query.durs[q], (file_index, index, f))
                    return
            _add(rows, ("none", NO_FRAME_ROW), None, kernel, query.durs[q], None)

        _sweep(thread, _enclosing_kinds(kind, True), query, visit)


def _add(rows, key, frame, kernel, dur, instance) -> None:
    row = rows.get(key)
    if row is None:
        row = rows[key] = _Row(source=key[0], frame=frame)
    row.durations.setdefault(kernel, []).append(dur)
    if instance is not None:
        row.instances.add(instance)


def _display(key: tuple[str, str]) -> str:
    source, name = key
    if source == "record_function" and name.startswith(OPERATION_PREFIX):
        return name[len(OPERATION_PREFIX):]
    if source == "python":
        frame = parse_frame(name)
        return frame["function"] if frame else name
    return name


def _finish_row(key, row: _Row, kernel_time: float, frame_name: str | None) -> OpRow:
    kernels = tuple(sorted((OpKernel(name=k, calls=len(d), total_us=math.fsum(d)) for k, d in row.durations.items()),
                           key=lambda k: (-k.total_us, k.name)))
    total = math.fsum(k.total_us for k in kernels)
    return OpRow(name=_display(key), source=key[0], frame=parse_frame(frame_name) if frame_name else None,
                 calls=len(row.instances), total_us=total, share=total / kernel_time if kernel_time > 0 else None,
                 kernels=kernels)


# -- the whole --------------------------------------------------------------------------------


def attribute(paths: Sequence[str | Path], dominant: str | None = None, *, use_annotations: bool = True,
              library: frozenset[str] = LIBRARY_PACKAGES) -> Attribution:
    """Kernel time by launching frame in trace files (one per rank, or merged), and the operation
    of ``dominant`` (a kernel name of the kernel table; the largest kernel when None).

    use_annotations: let ``record_function`` ranges define operations (False: Python frames only,
    as a trace of an engine that marks nothing would give). library: top-level packages whose
    frames are never the operation. Raises ValueError (TraceFormatError for unreadable files) on
    bad input: no paths, GPU and CPU-only traces mixed.
    """
    if not paths:
        raise ValueError("no trace files given")
    files = [_read(str(p), library) for p in paths]
    has_device = [len(f.k_name) > 0 or len(f.r_key) > 0 for f in files]
    if any(has_device) and not all(has_device):
        raise ValueError("cannot attribute GPU traces together with CPU-only traces")
    kind = GPU if any(has_device) else CPU_HOST

    placed = []
    totals: dict[str, list[float]] = {}
    counts = [0, 0, 0]
    for acc in files:
        per_thread, n, linked, graph = _queries(acc, kind)
        placed.append(per_thread)
        counts[0] += n
        counts[1] += linked
        counts[2] += graph
        for query in per_thread.values():
            for name, dur in zip(query.names, query.durs):
                totals.setdefault(acc.names[name], []).append(dur)
    kernel_time = math.fsum(math.fsum(d) for d in totals.values())
    graph_time = math.fsum(d for acc, per_thread in zip(files, placed) for q in per_thread.values()
                           for d, g in zip(q.durs, q.graph) if g)
    with_stack = any(f.python_frames for f in files)
    annotations = any(f.operation_ranges or (kind == GPU and f.other_ranges) for f in files)
    if dominant is None and totals:
        dominant = min(totals, key=lambda k: (-math.fsum(totals[k]), k))

    op_key = None
    dominant_op = None
    if dominant is not None:
        dominant_op, op_key = _dominant(files, placed, dominant, totals, use_annotations, counts, kind)

    rows: dict[tuple[str, str], _Row] = {}
    for file_index, (acc, per_thread) in enumerate(zip(files, placed)):
        _rows(acc, per_thread, op_key, use_annotations, rows, file_index, kind)
    finished = [_finish_row(key, row, kernel_time, key[1] if key[0] == "python" else None) for key, row in rows.items()]
    if dominant_op is not None and dominant_op.status == ATTRIBUTED:
        at = list(rows).index(op_key)
        if finished[at].frame is None and dominant_op.frame is not None:
            finished[at] = replace(finished[at], frame=dominant_op.frame)
        dominant_op = _with_totals(dominant_op, finished[at], kernel_time)
    finished.sort(key=lambda r: (-r.total_us, r.name))

    if dominant_op is not None:
        status, message = dominant_op.status, dominant_op.message
    elif kernel_time > 0 and graph_time >= 0.5 * kernel_time:
        status, message = NEEDS_EAGER, EAGER_MESSAGE
    else:
        status, message = NO_DOMINANT, "no kernels to attribute" if not totals else "no dominant kernel asked for"
    return Attribution(kind=kind, status=status, message=message, files=tuple(str(p) for p in paths),
                       kernel_time_us=kernel_time, kernels=counts[0], linked=counts[1], graph_linked=counts[2],
                       with_stack=with_stack, annotations=annotations, rows=tuple(finished), dominant=dominant_op)


def _dominant(files, placed, dominant, totals, use_annotations, counts, kind):
    kernel_total = math.fsum(totals.get(dominant, []))
    base = {"kernel": dominant, "kernel_total_us": kernel_total}
    if dominant not in totals:
        return DominantOp(status=NO_DOMINANT, message=f"{dominant} is not in the trace", **base), None
    graph_us = math.fsum(d for acc, per_thread in zip(files, placed) for q in per_thread.values()
                         for n, d, g in zip(q.names, q.durs, q.graph) if g and acc.names[n] == dominant)
    if graph_us >= 0.5 * kernel_total:
        return DominantOp(status=NEEDS_EAGER, message=EAGER_MESSAGE, **base), None
    votes: dict[tuple[str, str], dict] = {}
    for acc, per_thread in zip(files, placed):
        dominant_id = acc.name_ids.get(dominant)
        if dominant_id is None:
            continue
        for key, vote in _choose_dominant(acc, per_thread, dominant_id, use_annotations, kind).items():
            mine = votes.setdefault(key, {"us": [], "frames": {}})
            mine["us"].extend(vote["us"])
            for frame, us in vote["frames"].items():
                mine["frames"][frame] = mine["frames"].get(frame, 0.0) + us
    framed = {key: vote for key, vote in votes.items() if key[0] != "none"}
    if not framed:
        status = NO_LAUNCHES if counts[1] == 0 else NO_FRAMES
        message = "no kernel is linked to a launch (the trace has no runtime events)" if status == NO_LAUNCHES else NO_FRAMES_MESSAGE
        return DominantOp(status=status, message=message, **base), None
    key = min(framed, key=lambda k: (-math.fsum(framed[k]["us"]), k))
    frames = framed[key]["frames"]
    frame = parse_frame(min(frames, key=lambda f: (-frames[f], f))) if frames else None
    rule = ("the innermost record_function range around its launches" if key[0] == "record_function" else
            "the innermost user Python frame that launches another kernel after it")
    return DominantOp(status=ATTRIBUTED, message=f"{dominant} attributed to {_display(key)} ({rule})", name=_display(key),
                      source=key[0], frame=frame, rule=rule, **base), key


def _with_totals(op: DominantOp, row: OpRow, kernel_time: float) -> DominantOp:
    inside = next((k.total_us for k in row.kernels if k.name == op.kernel), 0.0)
    return DominantOp(status=op.status, message=op.message, kernel=op.kernel, kernel_total_us=op.kernel_total_us,
                      name=op.name, source=op.source, frame=op.frame, total_us=row.total_us,
                      share=row.total_us / kernel_time if kernel_time > 0 else None,
                      coverage=inside / op.kernel_total_us if op.kernel_total_us > 0 else None,
                      calls=row.calls, kernels=row.kernels, rule=op.rule)


def operation_of(paths: Sequence[str | Path], kernel: str, *, use_annotations: bool = True) -> dict[str, Any]:
    """The operation of ``kernel`` in trace files as plain data: DominantOp.to_dict() (``status``,
    ``total_us`` (None unless attributed), ``kernels``, ``frame``...)."""
    found = attribute(paths, kernel, use_annotations=use_annotations)
    return found.dominant.to_dict()
