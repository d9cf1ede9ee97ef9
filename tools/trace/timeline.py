"""Window, busy time (union of intervals) and idle time of one device's kernels."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timeline:
    """window_us: first start to last end; busy_us: length of the union of the intervals."""

    window_us: float
    busy_us: float

    @property
    def idle_us(self) -> float:
        return self.window_us - self.busy_us


def timeline(starts, durations) -> Timeline:
    """Window and busy time of intervals [start, start + duration) given as two sequences of µs."""
    s = np.asarray(starts, dtype=np.float64)
    if s.size == 0:
        return Timeline(0.0, 0.0)
    # Trace timestamps are ~1e12 µs, where a float's step is ~1e-4 µs; work relative to the first
    # start so that start + duration keeps the duration's precision.
    s = s - s.min()
    e = s + np.asarray(durations, dtype=np.float64)
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = e[order]
    reach = np.maximum.accumulate(e)
    # An interval opens a new busy block when it starts after everything before it has ended.
    opens = np.empty(s.size, dtype=bool)
    opens[0] = True
    opens[1:] = s[1:] > reach[:-1]
    closes = np.empty(s.size, dtype=bool)
    closes[:-1] = opens[1:]
    closes[-1] = True
    busy = math.fsum((reach[closes] - s[opens]).tolist())
    return Timeline(window_us=float(reach[-1] - s[0]), busy_us=busy)
