"""The profiler's own gaps: each ``ProfilerStep#N``'s window on the device and the idle between steps.

The profiler ends a step with a host sync and ``prof.step()``; the device waits through both before
the next step's first kernel. That idle is the profiler's, not the workload's: a step's time T read
from a trace must leave it out. Kernels are assigned to the step whose range holds their start
(the device-side ``gpu_user_annotation`` ranges on GPU traces, which span exactly their step's
kernels; the host-side ranges for host "kernels" on CPU-only traces). SGLang's ``step[DECODE bs=N]`` spans carry
no number: ``numbered`` numbers them in time order, the ranges that overlap (one a stream) being one step.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .host import SGLANG_STEP
from .records import StepWindow
from .timeline import timeline

STEP_NUMBER = re.compile(r"^ProfilerStep#(\d+)$")
UNNUMBERED = -1  # an SGLang step span, numbered by ``numbered`` once all of a file's are read
# Kineto's timestamps carry nanosecond decimals; a kernel starting exactly at its step's start can
# read a fraction of a nanosecond early once both are floats.
_TOLERANCE_US = 5e-3


@dataclass(frozen=True)
class StepTimes:
    """Step windows of one device (or host process), in step order, and the kernel time outside them."""

    windows: tuple[StepWindow, ...]
    outside_us: float

    @property
    def in_step_window_us(self) -> float:
        return math.fsum(w.window_us for w in self.windows)

    @property
    def between_steps_idle_us(self) -> float:
        return math.fsum(w.idle_before_us for w in self.windows if w.idle_before_us is not None)


def step_number(name: object) -> int | None:
    """N of a ``ProfilerStep#N`` name, UNNUMBERED for an SGLang step span, else None."""
    if not isinstance(name, str):
        return None
    match = STEP_NUMBER.match(name)
    if match:
        return int(match.group(1))
    return UNNUMBERED if SGLANG_STEP.match(name) else None


def numbered(steps: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    """Step ranges ``[(N, ts, dur), ...]`` with every one numbered: ProfilerStep#N's own numbers where there are
    any (a trace with both keeps the profiler's), else the SGLang spans in time order, ranges that overlap in
    time being one step's (its streams'; steps follow one another on the device)."""
    own = [s for s in steps if s[0] != UNNUMBERED]
    if own or not steps:
        return own
    out, number, end = [], -1, -math.inf
    for _, ts, dur in sorted(steps, key=lambda s: s[1]):
        if ts > end + _TOLERANCE_US:
            number, end = number + 1, ts + dur
        else:
            end = max(end, ts + dur)
        out.append((number, ts, dur))
    return out


def step_spans(steps: list[tuple[int, float, float]]) -> dict[int, tuple[float, float]]:
    """Each step's span ``{N: (start, end)}`` from its ranges ``[(N, ts, dur), ...]`` once ``numbered``: a step the
    device ran on several streams (a CUDA graph that forks) has one range per stream, and is one step spanning
    all of them."""
    spans: dict[int, tuple[float, float]] = {}
    for number, ts, dur in numbered(steps):
        lo, hi = spans.get(number, (ts, ts + dur))
        spans[number] = (min(lo, ts), max(hi, ts + dur))
    return spans


def step_times(starts, durations, steps: list[tuple[int, float, float]]) -> StepTimes | None:
    """Windows of the steps ``[(N, ts, dur), ...]`` over one device's kernel intervals (starts and
    durations in us); the ranges of one N (one a stream) are that step's, from the first start to the last end. Steps without a kernel are left out, so a step's idle_before_us runs from the
    last earlier step that had kernels. None when there are no step ranges or no kernels."""
    s = np.asarray(starts, dtype=np.float64)
    d = np.asarray(durations, dtype=np.float64)
    spans = step_spans(steps)
    if not spans or s.size == 0:
        return None
    ordered = sorted(((n, lo, hi - lo) for n, (lo, hi) in spans.items()), key=lambda item: item[1])
    origin = min(float(s.min()), ordered[0][1])
    s = s - origin  # relative times keep the durations' precision (see timeline.timeline)
    e = s + d
    step_start = np.array([ts - origin for _, ts, _ in ordered])
    step_end = step_start + np.array([dur for _, _, dur in ordered])
    slot = np.searchsorted(step_start, s + _TOLERANCE_US, side="right") - 1
    inside = (slot >= 0) & (s <= step_end[np.maximum(slot, 0)] + _TOLERANCE_US)
    slot = np.where(inside, slot, -1)

    outside_s, outside_e = s[~inside], e[~inside]
    windows = []
    last_end = None
    for index, (number, _, _) in enumerate(ordered):
        mine = slot == index
        if not mine.any():
            continue
        ks, kd = s[mine], d[mine]
        first, end = float(ks.min()), float(e[mine].max())
        line = timeline(ks, kd)
        idle_before = None
        if last_end is not None:
            gap = max(first - last_end, 0.0)
            # Kernels of no step inside the gap were the device working, not waiting.
            lo, hi = np.clip(outside_s, last_end, first), np.clip(outside_e, last_end, first)
            keep = hi > lo
            busy = timeline(lo[keep], (hi - lo)[keep]).busy_us if keep.any() else 0.0
            idle_before = max(gap - busy, 0.0)
        windows.append(StepWindow(step=number, window_us=line.window_us, busy_us=line.busy_us,
                                  kernel_time_us=math.fsum(kd.tolist()), idle_before_us=idle_before))
        last_end = end if last_end is None else max(last_end, end)
    return StepTimes(windows=tuple(windows), outside_us=math.fsum(d[~inside].tolist()))


def merge_step_times(parts: list[StepTimes]) -> StepTimes | None:
    """Several devices' step times as one: per step number, windows, busy, kernel time and idle
    summed over the devices that ran it (as window_us is summed over devices)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    by_step: dict[int, list[StepWindow]] = {}
    for part in parts:
        for window in part.windows:
            by_step.setdefault(window.step, []).append(window)
    windows = []
    for number in sorted(by_step):
        group = by_step[number]
        idles = [w.idle_before_us for w in group if w.idle_before_us is not None]
        windows.append(StepWindow(
            step=number,
            window_us=math.fsum(w.window_us for w in group),
            busy_us=math.fsum(w.busy_us for w in group),
            kernel_time_us=math.fsum(w.kernel_time_us for w in group),
            idle_before_us=math.fsum(idles) if idles else None,
        ))
    return StepTimes(windows=tuple(windows), outside_us=math.fsum(p.outside_us for p in parts))
