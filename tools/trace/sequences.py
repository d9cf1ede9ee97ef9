"""Fusion candidates: the frequent kernel sequences inside each decode step, by the operation launching them.

Each kernel of an eager trace is placed in the operation that launched it by the ``--by-op`` rule
(ops.operation_key: the innermost record_function range, else the innermost user Python frame, else the
outermost aten op). A *call* is a run of consecutive kernels (device order, within one ``ProfilerStep#N``)
launched inside one instance of one operation. The sequences mined are the contiguous kernel-name
sequences of two or more kernels inside calls, counted without overlap, that occur at least once a step
and are *closed*: no sequence one kernel longer, in the same operation, occurs as often (so an operation
whose calls all run the same kernels gives its whole call, and a kernel pair it runs twice a call gives
that pair as well). Our own mining: HTA 0.5.0's frequent-sequence call fails on these traces.

Each sequence is timed in the timing trace: a CUDA-graph replay of the same step when one is given (the
setting as it runs; its kernels are matched to the eager step's by their names in order, memory copies
by kind, as a replay records a copy as a kernel), else the eager trace itself, whose gaps then include
the host's launch time. What a fused kernel would save at most: the device idle between the sequence's
kernels (measured), plus the intermediate tensors' traffic, which the trace does not hold (the caller
models it: ``boundaries_per_step`` is how many intermediates a step's occurrences hand over).
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .frames import LIBRARY_PACKAGES, FileEvents, queries, read_file_events, sweep
from .steps import step_spans
from .ops import GRAPH_ROW, NO_LAUNCH_ROW, _enclosing_kinds, display, operation_key
from .summary import GPU

MAX_LENGTH = 32  # longest sequence mined: an operation's whole call in the traces seen (17 kernels at most)
_TOLERANCE_US = 5e-3  # Kineto's nanosecond decimals (steps.py)
_COPY = re.compile(r"^(Memcpy|memcpy)", re.IGNORECASE)

MINED = "mined"
NO_STEPS_NOTE = "no ProfilerStep#N ranges on the device: the whole trace is taken as one step"


@dataclass(frozen=True)
class FusionCandidate:
    """One closed frequent sequence: its operation, kernels, and per-step count, launches and times
    (time: the kernels' own; gap: the device idle between them, what fusing removes at most)."""

    operation: str
    source: str
    kernels: tuple[str, ...]
    occurrences: int
    per_step: float
    launches_per_step: float
    boundaries_per_step: float
    time_us_per_step: float
    gap_us_per_step: float
    timed_occurrences: int

    def to_dict(self) -> dict:
        return {**asdict(self), "kernels": list(self.kernels)}


@dataclass(frozen=True)
class SequenceReport:
    """The fusion candidates of one rank's trace, best first (by kernel time plus gaps a step)."""

    files: tuple[str, ...]
    attribution_file: str
    timing_file: str
    timing: str  # "graph replay", "same trace (eager: gaps include host launch time)" or a replay's same trace
    attributed: bool
    steps: int
    step_window_us: float  # the timing trace's mean step window (first kernel start to last end)
    kernel_time_us: float  # the timing trace's kernel time a step
    matched: float  # share of the eager steps' kernels matched in the timing trace
    notes: tuple[str, ...] = ()
    candidates: tuple[FusionCandidate, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "candidates"}, "files": list(self.files),
                "notes": list(self.notes), "candidates": [c.to_dict() for c in self.candidates]}


# -- mining (pure) ----------------------------------------------------------------------------------


def count_sequences(calls: Sequence[tuple[str, Sequence[str]]], max_length: int = MAX_LENGTH) -> Counter:
    """Occurrences of every contiguous sequence of 2..max_length kernel names inside each call, keyed
    (operation, names); a sequence is counted without overlapping itself within a call (AAA holds AA once)."""
    counts: Counter = Counter()
    for operation, names in calls:
        names = tuple(names)
        for n in range(2, min(max_length, len(names)) + 1):
            last_end: dict[tuple, int] = {}
            for i in range(len(names) - n + 1):
                gram = names[i:i + n]
                if i >= last_end.get(gram, 0):
                    counts[(operation, gram)] += 1
                    last_end[gram] = i + n
    return counts


def closed_frequent(counts: Counter, min_count: int) -> list[tuple[str, tuple[str, ...], int]]:
    """The sequences occurring at least min_count times that no one-kernel-longer sequence of the same
    operation occurs as often as, most occurrences first (then longest, then by name)."""
    extended: dict[tuple, int] = {}
    for (operation, gram), count in counts.items():
        for part in (gram[1:], gram[:-1]):
            if len(part) >= 2:
                key = (operation, part)
                extended[key] = max(extended.get(key, 0), count)
    kept = [(operation, gram, count) for (operation, gram), count in counts.items()
            if count >= min_count and extended.get((operation, gram), 0) < count]
    return sorted(kept, key=lambda item: (-item[2], -len(item[1]), item[0], item[1]))


def occurrences(steps: Sequence[Sequence[tuple[str, int | None, str]]], operation: str,
                gram: tuple[str, ...]) -> list[tuple[int, int]]:
    """(step, position) of each non-overlapping occurrence of ``gram`` inside one call of ``operation``;
    a step is a list of (operation, call id, kernel name) in device order."""
    found = []
    n = len(gram)
    for s, kernels in enumerate(steps):
        i = 0
        while i + n <= len(kernels):
            window = kernels[i:i + n]
            if (window[0][0] == operation and all(k[1] == window[0][1] for k in window)
                    and tuple(k[2] for k in window) == gram):
                found.append((s, i))
                i += n
            else:
                i += 1
    return found


def split_calls(kernels: Sequence[tuple[str, int | None, str]]) -> list[tuple[str, list[str]]]:
    """A step's (operation, call id, name) kernels as calls: runs of one call id (None: a call of one kernel
    unless the whole step is unattributed, a graph replay's, when the operation names it)."""
    calls: list[tuple[str, list[str]]] = []
    previous = object()
    for operation, call, name in kernels:
        if call is not None and call == previous:
            calls[-1][1].append(name)
        else:
            calls.append((operation, [name]))
        previous = call
    return calls


# -- reading ---------------------------------------------------------------------------------------


def _labels(acc: FileEvents) -> tuple[list[str], list[str], list]:
    """Per kernel (FileEvents order): its operation's display name, source, and call instance id."""
    n = len(acc.k_name)
    names, sources, calls = [NO_LAUNCH_ROW] * n, ["none"] * n, [None] * n
    per_thread, _, _, _ = queries(acc, GPU)
    for index, query in per_thread.items():
        if index < 0:
            continue
        thread = acc.threads[acc.thread_keys[index]]

        def visit(q, stack, thread=thread, query=query, index=index):
            k = query.kernel[q]
            if query.graph[q]:
                names[k], sources[k], calls[k] = GRAPH_ROW, "graph", -1  # one replay: one unattributed call
                return
            key, f = operation_key(thread.kinds, thread.names, acc.names, stack, True)
            names[k], sources[k] = display(key), key[0]
            calls[k] = None if f is None else (index, f)

        sweep(thread, _enclosing_kinds(GPU, True), query, visit)
    return names, sources, calls


def _steps(acc: FileEvents) -> tuple[list[list[int]], list[str]]:
    """Kernel indices of each ProfilerStep#N in device order (a kernel belongs to the step whose device
    range holds its start), or one step of them all without step ranges."""
    ts = np.frombuffer(acc.k_ts, dtype=np.float64) if len(acc.k_ts) else np.empty(0)
    order = np.argsort(ts, kind="stable")
    spans = step_spans(acc.device_steps)
    if not spans:
        return [order.tolist()], [NO_STEPS_NOTE]
    steps = []
    for number in sorted(spans, key=lambda k: spans[k][0]):
        lo, hi = spans[number]
        inside = (ts[order] >= lo - _TOLERANCE_US) & (ts[order] <= hi + _TOLERANCE_US)
        if inside.any():
            steps.append(order[inside].tolist())
    return steps, []


def _is_graph_replay(acc: FileEvents) -> bool:
    _, n, _, graph = queries(acc, GPU)
    return n > 0 and graph >= 0.5 * n


def _normal(name: str) -> str:
    return "(memory copy)" if _COPY.match(name) else name


def _align(eager: list[str], timing: list[str]) -> dict[int, int]:
    """Positions of the eager step's kernels in the timing step's: exact name matches in order (memory
    copies by kind), by difflib's matching blocks; positions without a match are left out."""
    if len(eager) == len(timing) and all(_normal(a) == _normal(b) for a, b in zip(eager, timing)):
        return {i: i for i in range(len(eager))}
    matcher = difflib.SequenceMatcher(a=[_normal(x) for x in eager], b=[_normal(x) for x in timing], autojunk=False)
    return {block.a + j: block.b + j for block in matcher.get_matching_blocks() for j in range(block.size)}


# -- the whole -------------------------------------------------------------------------------------


@dataclass
class _Trace:
    path: str
    acc: FileEvents
    steps: list[list[int]]
    notes: list[str]

    def names(self, step: list[int]) -> list[str]:
        return [self.acc.names[self.acc.k_name[k]] for k in step]


def _read(path: str, library: frozenset[str]) -> _Trace:
    acc = read_file_events(path, library)
    if len(acc.k_name) == 0:
        raise ValueError(f"{path}: no device kernels (sequences are mined from GPU traces)")
    steps, notes = _steps(acc)
    return _Trace(path, acc, steps, notes)


def _pick(paths: Sequence[str | Path], library: frozenset[str]) -> tuple[_Trace, _Trace]:
    """(attribution trace, timing trace) of one rank: an eager trace and, optionally, its graph replay."""
    if not paths or len(paths) > 2:
        raise ValueError("give one rank's trace, or its eager profile and its CUDA-graph replay (two files)")
    traces = [_read(str(p), library) for p in paths]
    if len(traces) == 1:
        return traces[0], traces[0]
    graph = [_is_graph_replay(t.acc) for t in traces]
    if graph[0] == graph[1]:
        raise ValueError("of two files, one must be an eager profile and the other its CUDA-graph replay "
                         f"(found {'two replays' if graph[0] else 'two eager profiles'}: one rank at a time)")
    return (traces[1], traces[0]) if graph[0] else (traces[0], traces[1])


def _time(occurrence_steps, eager: _Trace, timing: _Trace, maps, n: int) -> tuple[float, float, int]:
    """Kernel time and internal gaps summed over the occurrences found in the timing trace, and how many."""
    acc = timing.acc
    time_us, gap_us, timed = [], [], 0
    for s, i in occurrence_steps:
        if s >= len(timing.steps):
            continue
        positions = [maps[s].get(i + j) for j in range(n)]
        if any(p is None for p in positions) or positions != list(range(positions[0], positions[0] + n)):
            continue  # not the same kernels back to back in the timing trace: not timed
        kernels = [timing.steps[s][p] for p in positions]
        starts = [acc.k_ts[k] for k in kernels]
        ends = [acc.k_ts[k] + acc.k_dur[k] for k in kernels]
        time_us.append(math.fsum(acc.k_dur[k] for k in kernels))
        reach = ends[0]
        for start, end in zip(starts[1:], ends[1:]):
            gap_us.append(max(start - reach, 0.0))
            reach = max(reach, end)
        timed += 1
    return math.fsum(time_us), math.fsum(gap_us), timed


def _same_trace(sources: list[str]) -> str:
    """How one trace times its own sequences: an eager trace's gaps hold the host's launches; a trace that is
    mostly a CUDA-graph replay (a live server's decode, its scheduler's few kernels eager) has gaps that are the
    device's own between the replayed kernels."""
    replayed = sum(1 for source in sources if source == "graph") / max(len(sources), 1)
    if replayed >= 0.5:
        return (f"same trace ({100 * replayed:.0f}% of its kernels a CUDA-graph replay: gaps between them are the "
                f"device's own, no host launch in them)")
    return "same trace (eager: gaps include host launch time)"


def fusion_candidates(paths: Sequence[str | Path], *, min_per_step: float = 1.0, max_length: int = MAX_LENGTH,
                      library: frozenset[str] = LIBRARY_PACKAGES) -> SequenceReport:
    """The closed frequent kernel sequences (at least ``min_per_step`` occurrences a step) of one rank's
    eager trace by operation, timed in its CUDA-graph replay when that is the second file (either order).
    A replay given alone is mined with no operation (its kernels have no per-kernel launch): its rows
    say so. Raises ValueError (TraceFormatError: unreadable) on bad input."""
    eager, timing = _pick(paths, library)
    names, sources, calls = _labels(eager.acc)
    labelled = [[(names[k], calls[k], eager.acc.names[eager.acc.k_name[k]]) for k in step] for step in eager.steps]
    steps = len(labelled)
    counts = count_sequences([call for step in labelled for call in split_calls(step)], max_length)
    maps = [_align(eager.names(step), timing.names(timing.steps[s])) if s < len(timing.steps) else {}
            for s, step in enumerate(eager.steps)]
    source_of = {names[k]: sources[k] for k in range(len(names))}
    rows = []
    for operation, gram, count in closed_frequent(counts, max(1, math.ceil(min_per_step * steps))):
        found = occurrences(labelled, operation, gram)
        time_us, gap_us, timed = _time(found, eager, timing, maps, len(gram))
        per = 1 / max(timed, 1) * len(found) / steps  # per-step scale of the timed occurrences' sums
        rows.append(FusionCandidate(operation=operation, source=source_of.get(operation, "none"), kernels=gram,
                                    occurrences=len(found), per_step=len(found) / steps,
                                    launches_per_step=len(gram) * len(found) / steps,
                                    boundaries_per_step=(len(gram) - 1) * len(found) / steps,
                                    time_us_per_step=time_us * per, gap_us_per_step=gap_us * per, timed_occurrences=timed))
    rows.sort(key=lambda r: (-(r.time_us_per_step + r.gap_us_per_step), r.operation, r.kernels))
    windows = [timing.acc.k_ts[s[-1]] + timing.acc.k_dur[s[-1]] - timing.acc.k_ts[s[0]] for s in timing.steps if s]
    ends = [max(timing.acc.k_ts[k] + timing.acc.k_dur[k] for k in s) - timing.acc.k_ts[s[0]] for s in timing.steps if s]
    total = sum(len(s) for s in eager.steps)
    matched = sum(len(m) for m in maps) / total if total else 0.0
    attributed = any(source not in ("graph", "none") for source in sources)
    notes = list(dict.fromkeys(eager.notes + timing.notes))
    if not attributed:
        notes.append("no kernel has a per-kernel launch (a CUDA-graph replay): sequences span the whole step, with "
                     "no operation; give the eager profile of the same step as well to attribute them")
    return SequenceReport(
        files=tuple(str(p) for p in paths), attribution_file=eager.path, timing_file=timing.path,
        timing=("graph replay" if timing is not eager else _same_trace(sources)),
        attributed=attributed, steps=steps, step_window_us=math.fsum(max(w, e) for w, e in zip(windows, ends)) / max(len(ends), 1),
        kernel_time_us=math.fsum(timing.acc.k_dur[k] for s in timing.steps for k in s) / max(len(timing.steps), 1),
        matched=matched, notes=tuple(notes), candidates=tuple(rows))
