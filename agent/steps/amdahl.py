"""Amdahl's law over a profile, as the ceiling, options, split-K and round-2 steps use it: the bound of
a part made faster, the speedup a goal needs, the ceiling table, and the times a profile finding gives
(the GPU window W, the dominant kernel's t_k, its operation's t_op) with the bound's spread."""

from __future__ import annotations

import math
from statistics import stdev
from typing import Any

from agent.evidence import Operation, data_of
from agent.steps import Draft
from reports.format import fmt, fmt_spread
from schema.finding import Finding

SPEEDUPS = (2.0, 4.0, 8.0, 16.0)


def amdahl(total: float, part: float, speedup: float = math.inf) -> float:
    """Whole-run speedup when ``part`` of ``total`` time runs ``speedup`` times faster.

    ``T / (T - t + t/s)``; with an infinite ``speedup`` (an instant part), ``T / (T - t)``.
    """
    if not 0 <= part <= total or total <= 0:
        raise ValueError(f"need 0 <= part ({part}) <= total ({total}) and total > 0")
    if speedup <= 0:
        raise ValueError(f"speedup must be positive, got {speedup}")
    rest = total - part
    remaining = rest + (0.0 if math.isinf(speedup) else part / speedup)
    return math.inf if remaining == 0 else total / remaining


def ceiling_table(total_ms: float, part_ms: float, tok_s: float, speedups=SPEEDUPS) -> list[list]:
    """Rows (kernel speedup, whole-step speedup, projected tok/s), ending with the instant kernel."""
    rows = [[f"{s:g}x", amdahl(total_ms, part_ms, s), tok_s * amdahl(total_ms, part_ms, s)] for s in speedups]
    instant = amdahl(total_ms, part_ms)
    rows.append(["instant", instant, tok_s * instant])
    return rows


def quoted(rows: list[list], spread: float | None) -> list[list]:
    """Ceiling rows with the step speedup and tok/s as text to the digits ``spread`` supports."""
    if spread is None:
        return rows
    return [[label, fmt_spread(x, spread), fmt_spread(tok, spread)] for label, x, tok in rows]


def speedup_needed(total: float, part: float, factor: float) -> float | None:
    """The kernel speedup s with amdahl(total, part, s) == factor; None when even instant falls short."""
    if factor <= 1:
        return 1.0
    if factor >= amdahl(total, part):
        return None
    # T / (T - t + t/s) = f  =>  t/s = T/f - (T - t)
    return part / (total / factor - (total - part))


def profile_times(profile: Finding) -> dict[str, Any]:
    """What the ceiling rests on, per decode step of the layers run: W the GPU window inside the
    profiled steps (the profiler's own gaps between steps kept out), the dominant kernel's and its
    operation's time, and T the same step timed without the profiler. The shares come from the
    profile; the step from the timing."""
    return times_of(profile, data_of(profile))


def times_of(profile: Finding | Draft, data: Any) -> dict[str, Any]:
    """``profile_times`` from a profile's numbers and its data typed (``data``: the profile's model, or one
    with its ``dominant``, ``leader``, ``operation``, ``critical`` and ``summary``, as round 2 builds it)."""
    steps = profile.number("steps")
    whole = profile.number("total_ms")
    window = profile.numbers["in_step_window_ms"].value if "in_step_window_ms" in profile.numbers else whole
    operation = data.operation or Operation(status="")
    op_ms = profile.numbers["operation_ms"].value if "operation_ms" in profile.numbers else None
    kernel_ms = data.dominant.total_us / 1000 if data.dominant else data.leader.total_us / 1000
    if op_ms is not None and op_ms < kernel_ms:
        op_ms = None  # an attribution that holds less than the kernel itself attributed nothing useful
    gaps = profile.numbers["between_steps_idle_ms"].value if "between_steps_idle_ms" in profile.numbers else None
    # several ranks: the critical rank's windows, the trace its numbers come from (the merged ones sum the ranks')
    critical = (data.critical or {}).get("rank")
    summary = data.summary or {}
    basis = summary.get("ranks", {}).get(critical, {}) if critical is not None else summary.get("merged", {})
    windows = [w["window_us"] / 1000 for w in basis.get("step_windows") or []]
    return {"rank": critical, "rank_why": (data.critical or {}).get("why"), "steps": steps, "window_ms": window, "whole_ms": whole, "kernel_ms": kernel_ms, "operation_ms": op_ms,
            "operation": operation, "timed_step_ms": profile.number("timed_step_ms"), "gaps_ms": gaps,
            "step_windows_ms": windows}


def bound_spread(times: dict[str, Any], part_ms: float) -> float | None:
    """Relative uncertainty of the bound W / (W - t): it rests on the rest R = W - t a step, whose
    step-to-step variation is at most the windows' own (their standard deviation). A bound whose rest
    is a sliver of the step is known to few digits, and the report quotes it so."""
    windows = times["step_windows_ms"]
    if len(windows) < 2:
        return None
    rest = (times["window_ms"] - part_ms) / times["steps"]
    if rest <= 0:
        return None
    return min(stdev(windows) / rest, 10.0)


def stretch_range(times: dict[str, Any], part_ms: float) -> tuple[float, float] | None:
    """The instant bound ``W / (W - t)`` as far as the profiler's stretch of the step leaves it known: the
    profiled window a step W differs from the step timed without the profiler T, and where that difference lies
    (in the part made instant, or in the rest) is not measured. All of it in the rest: ``T / (T - t)``; all of
    it in the part: ``T / (T - (t - (W - T)))``. A step timed longer than the window (a live server: its
    scheduler's time between steps is outside the GPU window, and its client's TPOT holds it) is no stretch: that
    time cannot lie in the part, so the ends are ``T / (T - t)`` (the rest stays) and the window's bound.
    Returns (lowest, highest) of those; None without a timed step."""
    steps, timed = times["steps"], times.get("timed_step_ms")
    if not timed or not steps:
        return None
    window, part = times["window_ms"] / steps, part_ms / steps
    stretch = window - timed
    candidates = [window / (window - part)] if window > part else []
    for t in ((part, part - stretch) if stretch > 0 else (part,)):
        if t >= timed:  # the stretch is more than the rest: all of it in the rest leaves none, the bound unbounded
            candidates.append(math.inf)
        elif t >= 0:
            candidates.append(timed / (timed - t))
    return (min(candidates), max(candidates)) if candidates else None


def stretch_text(low: float | None, high: float | None, outside: bool = False) -> str:
    """The headline clause for ``stretch_range``'s ends (a top of None or inf: unbounded); "" without a range.
    ``outside``: the timed step is longer than the GPU window (time outside it, as a live server's scheduler's)."""
    if low is None:
        return ""
    if high is None or math.isinf(high):
        return f" ({fmt(low, '.3g')} and up, unbounded: the profiler's stretch of the step exceeds the rest of it)"
    if outside:
        return (f" ({fmt(low, '.3g')}-{fmt(high, '.3g')}: the timed step's time outside the GPU window stays, or goes "
                f"with the window)")
    return f" ({fmt(low, '.3g')}-{fmt(high, '.3g')} as the profiler's stretch of the step lies)"


def step_against_goal(step_text: str, batch: int, goal) -> str:
    """The projected step against the goal, said one way in every finding: the goal's own budget (its
    concurrency's tokens at its rate) where the step was measured at that concurrency; elsewhere the
    step is stated at its measured batch, and the goal's one budget beside it, never a second budget
    made for the measured batch (issue 30: "4 ms at batch 4" beside "16 ms at concurrency 16")."""
    budget = f"the goal's {fmt(goal.step_budget_ms, '.3g')} ms step budget"
    if batch == goal.concurrency:
        return f"step {step_text} ms at concurrency {batch} against {budget}"
    return (f"step {step_text} ms at the measured batch {batch}, not the goal's concurrency {goal.concurrency}, "
            f"where {budget} holds")
