"""Kernel time by the operation that launched it, from PyTorch-profiler traces, streamed.

Each kernel is placed in the frames open at its launch (frames.py). An operation is a launching
frame. The dominant kernel's operation is the innermost enclosing
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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .frames import (ANNOTATION, CPU_OP, LIBRARY_PACKAGES, USER, WORK, FileEvents, parse_frame, queries,
                     read_file_events, sweep)
from .host import OPERATION_PREFIX
from .records import Attribution, DominantOp, OpKernel, OpRow
from .summary import CPU_HOST, GPU

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

# aten ops that only make views or allocate: no device kernel on a GPU, so on a cpu-host trace they do
# not count as "another kernel" of a frame (a launcher returning out.unsqueeze(1) is still a launcher).
_METADATA_OPS = re.compile(
    r"^aten::(view|_unsafe_view|view_as|reshape|unsqueeze|squeeze|permute|as_strided|expand|expand_as|transpose|t"
    r"|select|slice|narrow|unflatten|flatten|alias|detach|empty|empty_like|empty_strided|resolve_conj|resolve_neg"
    r"|set_|lift_fresh|split|chunk|unbind|contiguous)$")

GRAPH_ROW = "(CUDA graph replay)"
NO_LAUNCH_ROW = "(no launch in the trace)"
NO_FRAME_ROW = "(no frame)"


# -- the dominant kernel's operation ----------------------------------------------------------


def _enclosing_kinds(kind: str, with_cpu_ops: bool) -> frozenset[int]:
    """Frames that may enclose a placed kernel: on cpu-host traces the kernels are themselves the
    outermost work ranges, so only Python frames and operation ranges enclose them."""
    if kind == CPU_HOST:
        return frozenset({USER, ANNOTATION})
    return frozenset({USER, ANNOTATION, WORK, CPU_OP} if with_cpu_ops else {USER, ANNOTATION, WORK})


def _choose_dominant(acc: FileEvents, per_thread, dominant_id: int, use_annotations: bool, kind: str) -> dict:
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
            users = [f for f in stack if kinds[f] == USER]
            if name == dominant_id:
                for f in users:
                    seen_dom[f] = 1
                chains.append((q, tuple(stack)))
            elif name not in metadata:
                for f in users:
                    other[f] = 1
                    if seen_dom[f]:
                        other_after[f] = 1

        sweep(thread, _enclosing_kinds(kind, False), query, visit)
        for q, stack in chains:
            annotation_at = -1
            if use_annotations:
                for depth in range(len(stack) - 1, -1, -1):
                    if kinds[stack[depth]] in (ANNOTATION, WORK):
                        annotation_at = depth
                        break
            inner = [f for f in stack[annotation_at + 1:] if kinds[f] == USER]
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


def _rows(acc: FileEvents, per_thread, op: tuple[str, str] | None, use_annotations: bool,
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
                    if (kinds[f] == USER and op[0] == "python" or kinds[f] in (ANNOTATION, WORK)
                            and op[0] == "record_function") and acc.names[names[f]] == op[1]:
                        _add(rows, op, None, kernel, query.durs[q], (file_index, index, f))
                        return
            key, f = operation_key(kinds, names, acc.names, stack, use_annotations)
            _add(rows, key, key[1] if key[0] == "python" else None, kernel, query.durs[q],
                 None if f is None else (file_index, index, f))

        sweep(thread, _enclosing_kinds(kind, True), query, visit)


def operation_key(kinds, names, all_names, stack, use_annotations: bool) -> tuple[tuple[str, str], int | None]:
    """The operation of a kernel launched with ``stack`` open (frame indices, outer first) when it is not
    the dominant one's: the innermost record_function range, else the innermost user Python frame, else
    the outermost aten op; ``(("none", NO_FRAME_ROW), None)`` without any. Returns ((source, frame name),
    the frame's index): the one rule the by-op table and the sequence mining (sequences.py) share."""
    if use_annotations:
        for f in reversed(stack):
            if kinds[f] in (ANNOTATION, WORK):
                return ("record_function", all_names[names[f]]), f
    for f in reversed(stack):
        if kinds[f] == USER:
            return ("python", all_names[names[f]]), f
    for f in stack:
        if kinds[f] == CPU_OP:
            return ("aten", all_names[names[f]]), f
    return ("none", NO_FRAME_ROW), None


def _add(rows, key, frame, kernel, dur, instance) -> None:
    row = rows.get(key)
    if row is None:
        row = rows[key] = _Row(source=key[0], frame=frame)
    row.durations.setdefault(kernel, []).append(dur)
    if instance is not None:
        row.instances.add(instance)


def display(key: tuple[str, str]) -> str:
    """An operation's name as tables show it (``op:NAME`` ranges without the prefix, Python frames by function)."""
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
    return OpRow(name=display(key), source=key[0], frame=parse_frame(frame_name) if frame_name else None,
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
    files = [read_file_events(str(p), library) for p in paths]
    has_device = [len(f.k_name) > 0 or len(f.r_key) > 0 for f in files]
    if any(has_device) and not all(has_device):
        raise ValueError("cannot attribute GPU traces together with CPU-only traces")
    kind = GPU if any(has_device) else CPU_HOST

    placed = []
    totals: dict[str, list[float]] = {}
    counts = [0, 0, 0]
    for acc in files:
        per_thread, n, linked, graph = queries(acc, kind)
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
    return DominantOp(status=ATTRIBUTED, message=f"{dominant} attributed to {display(key)} ({rule})", name=display(key),
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
