"""What HTA's kernel breakdown reports for a trace, recomputed from our events, to explain the gap.

HTA (holistictraceanalysis 0.5.0, ``TraceAnalysis.get_gpu_kernel_breakdown``) differs from an exact
sum of kernel durations in two documented-by-code ways:

1. Rounding. On load (``hta.common.trace_parser.round_down_time_stamps``) each event's start is
   rounded up and its end down to whole microseconds, so its duration becomes
   ``floor(ts + dur) - ceil(ts)``: up to 2 us shorter, zero or negative for sub-microsecond kernels.
   On a decode step of many 1-3 us kernels that shrinks the small kernels far more than a long
   one, and the long kernel's share reads high.
2. Iteration filter. With two or more ``ProfilerStep`` names in the trace, a device event is kept
   only if its correlation id matches a host event's (one without a stream) that starts before the
   last ProfilerStep starts (``include_last_profiler_step=False``, HTA's default). With
   ``include_last_profiler_step=True`` HTA compares aligned start times against unaligned end times,
   so in effect every correlated device event is kept; that is reproduced as is.

Device events are those we count (cat kernel, gpu_memcpy, gpu_memset); HTA's kernel types
(computation, communication, memory) cover the same events when memory kernels are included.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from .events import iter_events
from .summary import DEVICE_CATEGORIES


def hta_rounded_duration(ts: float, dur: float) -> int:
    """An event's duration after HTA's rounding: start up, end down, to whole microseconds."""
    return math.floor(ts + dur) - math.ceil(ts)


def hta_kernel_totals(
    path: str | Path,
    *,
    include_last_profiler_step: bool = False,
    rounding: bool = True,
) -> dict[str, float]:
    """Per kernel name, the summed duration HTA's breakdown reports for this one-rank trace.

    rounding=False keeps the exact durations but applies HTA's iteration filter, so the two causes
    of a difference can be told apart.
    """
    device = []  # (name, duration, correlation)
    host_starts_by_correlation: dict[int, list[int]] = defaultdict(list)
    step_starts = []
    step_names = set()
    for event in iter_events(path):
        if event.get("ph") != "X" or event.get("dur") is None or event.get("cat") == "Trace":
            continue
        ts, dur = event["ts"], event["dur"]
        args = event.get("args") or {}
        name = event.get("name", "")
        if isinstance(name, str) and "ProfilerStep" in name:
            step_names.add(name)
            step_starts.append(math.ceil(ts))
        if event.get("cat") in DEVICE_CATEGORIES:
            duration = hta_rounded_duration(ts, dur) if rounding else dur
            device.append((name, duration, args.get("correlation", -1)))
        elif "stream" not in args and "correlation" in args:
            host_starts_by_correlation[args["correlation"]].append(math.ceil(ts))
    if len(step_names) > 1:
        last_start = max(step_starts)
        kept = {
            correlation
            for correlation, starts in host_starts_by_correlation.items()
            if include_last_profiler_step or min(starts) < last_start
        }
        device = [entry for entry in device if entry[2] in kept]
    totals: dict[str, float] = defaultdict(float)
    for name, duration, _ in device:
        totals[name] += duration
    return dict(totals)
