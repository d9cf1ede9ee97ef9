"""Communication against computation on each rank's device: how long collectives run with nothing else
beside them (exposed), how long computation runs beside them (overlapped), from the kernels' intervals.

A kernel is communication when the category table (categories.py) says so; every other device event is
computation (copies included: they occupy the device as well). Times are unions of intervals, per
``ProfilerStep#N`` as the device saw it (the whole trace as one step without step ranges), so streams
that run side by side count once. A collective kernel's time includes its wait for the slowest rank: the
trace cannot tell the transfer from the wait, so a rank that waits shows more exposed communication.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .categories import DEFAULT_RULES, categorizer
from .events import iter_record_batches
from .ranks import rank_from_filename, rank_from_metadata, rank_sort_key
from .steps import step_number, step_spans
from .summary import DEVICE_CATEGORIES

COMMUNICATION = "communication"
_TOLERANCE_US = 5e-3


@dataclass(frozen=True)
class RankOverlap:
    """One rank's step means (us): window, communication, exposed (no computation beside it), overlapped,
    computation, and computation outside communication; ``overlap_share`` = overlapped / communication."""

    rank: str
    file: str
    steps: int
    window_us: float
    communication_us: float
    exposed_us: float
    overlapped_us: float
    computation_us: float
    computation_outside_us: float
    collectives: float  # collective kernels a step
    streams: int  # device streams with kernels
    overlap_share: float | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class OverlapReport:
    files: tuple[str, ...]
    ranks: tuple[RankOverlap, ...]
    note: str

    def to_dict(self) -> dict:
        return {"files": list(self.files), "ranks": [r.to_dict() for r in self.ranks], "note": self.note}


def union(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """The union of intervals [start, end) as sorted disjoint intervals."""
    out: list[list[float]] = []
    for s, e in sorted(zip(starts.tolist(), ends.tolist())):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def intersection_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = []
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total.append(hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return math.fsum(total)


def _length(intervals: list[tuple[float, float]]) -> float:
    return math.fsum(e - s for s, e in intervals)


def _read(path: str):
    """Device events (start, duration, name, stream) and device ProfilerStep ranges of one file, and its metadata."""
    metadata: dict = {}
    kernels, ranges, streams = [], [], set()
    for batch in iter_record_batches(path, metadata):
        for event in batch:
            if event.ph != "X" or event.ts is None or event.dur is None:
                continue
            if event.cat in DEVICE_CATEGORIES:
                kernels.append((float(event.ts), float(event.dur), event.name))
                streams.add(event.tid)
            elif event.cat == "gpu_user_annotation":
                number = step_number(event.name)
                if number is not None:
                    ranges.append((number, float(event.ts), float(event.dur)))
    return kernels, step_spans(ranges), len(streams), metadata


def rank_overlap(path: str, default_rank: str, categorize) -> RankOverlap | None:
    """One file's overlap (one rank's device); None when it holds no device events."""
    kernels, steps, streams, metadata = _read(path)
    if not kernels:
        return None
    ts = np.array([k[0] for k in kernels])
    origin = ts.min()
    ts = ts - origin  # relative times keep the durations' precision (timeline.py)
    te = ts + np.array([k[1] for k in kernels])
    comm = np.array([categorize(k[2]) == COMMUNICATION for k in kernels])
    windows = ([(lo - origin, hi - origin) for lo, hi in sorted(steps.values())] if steps
               else [(float(ts.min()), float(te.max()))])
    sums = np.zeros(7)
    for lo, hi in windows:
        inside = (ts >= lo - _TOLERANCE_US) & (ts <= hi + _TOLERANCE_US)
        c = union(ts[inside & comm], te[inside & comm])
        w = union(ts[inside & ~comm], te[inside & ~comm])
        both = intersection_length(c, w)
        span = (te[inside].max() - ts[inside].min()) if inside.any() else 0.0
        sums += [span, _length(c), _length(c) - both, both, _length(w), _length(w) - both, int((inside & comm).sum())]
    n = len(windows)
    window, communication, exposed, overlapped, computation, outside, collectives = (sums / n).tolist()
    return RankOverlap(rank=rank_from_filename(path) or rank_from_metadata(metadata) or default_rank, file=path,
                       steps=n, window_us=window, communication_us=communication, exposed_us=exposed,
                       overlapped_us=overlapped, computation_us=computation, computation_outside_us=outside,
                       collectives=collectives, streams=streams,
                       overlap_share=overlapped / communication if communication > 0 else None)


def overlap(paths: Sequence[str | Path], rules=DEFAULT_RULES) -> OverlapReport:
    """Per rank (one trace file each), the step means of communication, exposed and overlapped time.
    Raises ValueError on no files or no device events (TraceFormatError: unreadable)."""
    if not paths:
        raise ValueError("no trace files given")
    categorize = categorizer(rules)
    ranks = [r for i, p in enumerate(paths) if (r := rank_overlap(str(p), str(i), categorize)) is not None]
    if not ranks:
        raise ValueError("no device kernels in the traces (overlap is read from GPU traces)")
    ranks.sort(key=lambda r: rank_sort_key(r.rank))
    return OverlapReport(files=tuple(str(p) for p in paths), ranks=tuple(ranks),
                         note="step means; exposed: collective time with no computation beside it; a collective's "
                              "time includes its wait for the slowest rank")
