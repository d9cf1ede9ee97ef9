"""Ceiling: Amdahl's law over the profile, against the goal as a time budget per decode step."""

from __future__ import annotations

import math

from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps.survey import target_of

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


def speedup_needed(total: float, part: float, factor: float) -> float | None:
    """The kernel speedup s with amdahl(total, part, s) == factor; None when even instant falls short."""
    if factor <= 1:
        return 1.0
    if factor >= amdahl(total, part):
        return None
    # T / (T - t + t/s) = f  =>  t/s = T/f - (T - t)
    return part / (total / factor - (total - part))


def compute_ceiling(state: InvestigationState, session: Session) -> Finding:
    """From the profile's total time T (kernel time plus GPU idle in the window) and the top kernel's
    time t: the whole-step speedup if that kernel were instant (T/(T-t)) or s times faster
    (T/(T-t+t/s)), the tok/s that projects to from the profiled setting's measured tok/s, and whether the goal (as a
    per-step time budget) is reachable. Also recomputes the target's published case from its raw
    inputs, when the target gives them. No tool calls: every input is an earlier finding's number."""
    target = target_of(state)
    profile = finding_for(state, "profile")
    kernel = profile.data["dominant"] or profile.data["leader"]
    total = profile.number("total_ms")
    part = kernel["total_us"] / 1000
    tok_s = profile.number("setting_tok_s")
    step_ms = profile.number("setting_step_ms")
    setting = profile.data["setting"]["label"]
    goal = target.goal.output_tok_s
    budget_ms = target.goal.step_budget_ms
    instant = amdahl(total, part)
    best_tok_s = tok_s * instant
    reachable = best_tok_s >= goal
    needed = speedup_needed(total, part, goal / tok_s)
    seqs = sorted(set(profile.evidence))
    numbers = {
        "total_ms": Number(value=total, unit="ms", label="T: kernel time + idle (profile)", seqs=profile.evidence),
        "kernel_ms": Number(value=part, unit="ms", label=f"t: {kernel['name']}", seqs=profile.evidence),
        "rest_ms": Number(value=total - part, unit="ms", label="T - t"),
        "instant_speedup": Number(value=instant, unit="x", label="T / (T - t)", seqs=seqs),
        "baseline_tok_s": Number(value=tok_s, unit="tok/s", label=f"measured, {setting}", seqs=profile.numbers["setting_tok_s"].seqs),
        "ceiling_tok_s": Number(value=best_tok_s, unit="tok/s", label="baseline x T/(T-t)", seqs=seqs),
        "goal_tok_s": Number(value=goal, unit="tok/s", label="goal"),
        "step_budget_ms": Number(value=budget_ms, unit="ms", label=f"{target.goal.concurrency} tokens per step / goal"),
        "projected_step_ms": Number(value=step_ms, unit="ms", label=f"measured decode step, {setting} (projected)", seqs=profile.numbers["setting_step_ms"].seqs),
        "instant_step_ms": Number(value=step_ms / instant, unit="ms", label="decode step with the kernel instant", seqs=seqs),
        "speedup_needed": Number(value=needed, unit="x", label="kernel speedup that would meet the goal (none: unreachable)"),
    }
    tables = [Table(title=f"Amdahl ceiling for {kernel['name']}", columns=["kernel speedup", "step speedup", "tok/s"],
                    rows=ceiling_table(total, part, tok_s))]
    data = {"kernel": kernel["name"], "reachable": reachable, "dominant": profile.data["dominant"] is not None,
            "setting": setting}
    steps = profile.number("steps")
    profiled_step = total / steps
    timed_step = profile.number("timed_step_ms")
    kernel_step = part / steps
    numbers["profiled_step_ms"] = Number(value=profiled_step, unit="ms", label="T per profiled step (layers run)", seqs=profile.evidence)
    numbers["timed_step_ms"] = Number(value=timed_step, unit="ms", label="the same step timed without the profiler", seqs=profile.evidence)
    if kernel_step < timed_step:
        # The profiler lengthens launch gaps: where its window is much longer than the timed step, the
        # idle share it shows is partly its own, and the same Amdahl bound against the timed step says so.
        numbers["timed_instant_speedup"] = Number(value=amdahl(timed_step, kernel_step), unit="x",
                                                  label="T/(T-t) with T the timed step and t the kernel's time a step",
                                                  seqs=profile.evidence)
    published = target.published
    if {"kernel_time_ms", "dominant_ms", "tok_s"} <= set(published):
        p_total = published["kernel_time_ms"] + published.get("idle_ms", 0)
        p_instant = amdahl(p_total, published["dominant_ms"])
        numbers["published_instant_speedup"] = Number(value=p_instant, unit="x", label="published case: T / (T - t)")
        numbers["published_ceiling_tok_s"] = Number(value=published["tok_s"] * p_instant, unit="tok/s",
                                                    label="published case: tok/s x T / (T - t)")
        data["published"] = {"total_ms": p_total, "dominant_ms": published["dominant_ms"], "instant": p_instant,
                             "tok_s": published["tok_s"], "ceiling_tok_s": published["tok_s"] * p_instant}
    verdict = "goal-reachable" if reachable else "goal-unreachable"
    headline = (f"even an instant {kernel['name']} gives {instant:.2f}x: {tok_s:.3g} -> {best_tok_s:.3g} tok/s, "
                + ("reaching" if reachable else "short of") + f" the goal of {goal:.0f} tok/s "
                f"(step {step_ms / instant:.3g} ms vs a {budget_ms:.3g} ms budget)")
    return Finding(index=next_index(state), step="ceiling", headline=headline, verdict=verdict, numbers=numbers,
                   tables=tables, evidence=seqs, labels=list(profile.labels), data=data)
