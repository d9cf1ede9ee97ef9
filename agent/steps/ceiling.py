"""Ceiling: Amdahl's law over the profile, against the goal as a time budget per decode step."""

from __future__ import annotations

import math
from statistics import stdev
from typing import Any

from agent.session import Session
from agent import consistency
from agent.state import Finding, InvestigationState, Number, Table, finding_for, findings_of, next_index
from agent.steps.survey import target_of
from agent.evidence import typed
from reports.format import fmt, fmt_spread

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
    steps = profile.number("steps")
    whole = profile.number("total_ms")
    window = profile.numbers["in_step_window_ms"].value if "in_step_window_ms" in profile.numbers else whole
    operation = profile.data.get("operation") or {}
    op_ms = profile.numbers["operation_ms"].value if "operation_ms" in profile.numbers else None
    kernel_ms = profile.data["dominant"]["total_us"] / 1000 if profile.data.get("dominant") else profile.data["leader"]["total_us"] / 1000
    if op_ms is not None and op_ms < kernel_ms:
        op_ms = None  # an attribution that holds less than the kernel itself attributed nothing useful
    gaps = profile.numbers["between_steps_idle_ms"].value if "between_steps_idle_ms" in profile.numbers else None
    windows = [w["window_us"] / 1000 for w in (profile.data.get("summary") or {}).get("merged", {}).get("step_windows") or []]
    return {"steps": steps, "window_ms": window, "whole_ms": whole, "kernel_ms": kernel_ms, "operation_ms": op_ms,
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


def compute_ceiling(state: InvestigationState, session: Session) -> Finding:
    """Amdahl with the shares of the profile and the step timed without it: with W the profiled steps'
    GPU window (the profiler's own gaps between steps kept out and reported), the dominant kernel
    taking ``t_k / W`` of the step and its operation (the frame that launches it: the wrapper with its
    merge and sink) ``t_op / W``, an instant kernel gives ``1 / (1 - t_k/W)`` and an instant operation
    ``1 / (1 - t_op/W)`` over the timed step T. The operation's bound is the ceiling for anything
    that replaces the operation (another backend, the rewrite); the kernel's is shown beside it. The
    tok/s projects from the profiled setting's measured tok/s; the goal is held as a time budget a
    decode step. Also recomputes the target's published case from its raw inputs, when the target
    gives them. No tool calls: every input is an earlier finding's number."""
    target = target_of(state)
    profile = finding_for(state, "profile")
    kernel = profile.data["dominant"] or profile.data["leader"]
    times = profile_times(profile)
    window, part, op_part = times["window_ms"], times["kernel_ms"], times["operation_ms"]
    steps, timed = times["steps"], times["timed_step_ms"]
    tok_s = profile.number("setting_tok_s")
    step_ms = profile.number("setting_step_ms")
    setting = typed(profile).setting.label
    goal = target.goal.output_tok_s
    batch = profile.number("batch")
    # A step emits one token a request: at a batch other than the goal's concurrency the goal's rate
    # asks batch / goal of a step, not the concurrency's budget.
    budget_ms = 1000.0 * batch / goal
    budget_label = (f"{target.goal.concurrency} tokens a step / goal" if batch == target.goal.concurrency else
                    f"batch {batch} profiled: {batch} tokens a step at the goal's rate (the goal is stated at "
                    f"concurrency {target.goal.concurrency}: {target.goal.step_budget_ms:.3g} ms a step there)")
    kernel_x = amdahl(window, part)
    operation_x = amdahl(window, op_part) if op_part is not None else None
    bound_x = operation_x or kernel_x
    best_tok_s = tok_s * bound_x
    reachable = best_tok_s >= goal
    op_name = times["operation"].get("name") if op_part is not None else None
    kernel_spread = bound_spread(times, part)
    op_spread = bound_spread(times, op_part) if op_part is not None else None
    spread = op_spread if op_part is not None else kernel_spread
    needed = speedup_needed(window, op_part if op_part is not None else part, goal / tok_s)
    seq = profile.numbers["setting_tok_s"].seqs
    ev = profile.evidence
    what = f"{op_name} (the call around {kernel['name']})" if op_name else f"{kernel['name']}"
    numbers = {
        "window_ms": Number(value=window, unit="ms", label=f"W: GPU window inside the {steps} profiled steps"
                            + (" (between-step gaps kept out)" if times["gaps_ms"] is not None else ""), seqs=ev),
        "kernel_ms": Number(value=part, unit="ms", label=f"t_k: {kernel['name']} in the profile", seqs=ev),
        "kernel_share": Number(value=part / window, unit="fraction", label="t_k / W", seqs=ev),
        "kernel_instant_x": Number(value=kernel_x, unit="x", label="the kernel instant: 1 / (1 - t_k/W)", seqs=ev, spread=kernel_spread),
        "timed_step_ms": Number(value=timed, unit="ms", label="T: the step of the layers run, timed without the profiler", seqs=seq),
        "baseline_tok_s": Number(value=tok_s, unit="tok/s", label=f"measured, {setting} (projected to {target.model.layers} layers)", seqs=seq),
        "ceiling_tok_s": Number(value=best_tok_s, unit="tok/s", label=f"projected: measured x the {'operation' if op_name else 'kernel'} instant", seqs=sorted(set(ev) | set(seq)), spread=spread),
        "goal_tok_s": Number(value=goal, unit="tok/s", label="goal"),
        "step_budget_ms": Number(value=budget_ms, unit="ms", label=budget_label),
        "projected_step_ms": Number(value=step_ms, unit="ms", label=f"decode step, {setting}, projected to {target.model.layers} layers", seqs=seq),
        "instant_step_ms": Number(value=step_ms / bound_x, unit="ms", label=f"projected decode step with {what} instant", seqs=sorted(set(ev) | set(seq)), spread=spread),
        "speedup_needed": Number(value=needed, unit="x", label=f"speedup of {what} that would meet the goal (none: unreachable)"),
        "profiled_step_ms": Number(value=times["whole_ms"] / steps, unit="ms", label="the profiled window a step, the profiler's gaps included", seqs=ev),
    }
    if op_part is not None:
        numbers["operation_ms"] = Number(value=op_part, unit="ms", label=f"t_op: {op_name} (the kernel and the rest of its call) in the profile", seqs=ev)
        numbers["operation_share"] = Number(value=op_part / window, unit="fraction", label="t_op / W", seqs=ev)
        numbers["operation_instant_x"] = Number(value=operation_x, unit="x", label="the operation instant: 1 / (1 - t_op/W)", seqs=ev, spread=op_spread)
    if times["gaps_ms"] is not None:
        numbers["profiler_gaps_ms"] = Number(value=times["gaps_ms"], unit="ms", label="GPU idle between the profiled steps (the profiler's own sync and step marks), kept out of W", seqs=ev)
    precision = (f"; quoted to the digits the steps' spread supports (the rest of the step, W - t, varies by up to "
                 f"{100 * spread:.2g}% of itself step to step)" if spread is not None else "")
    tables = [Table(title=f"Amdahl ceiling for {kernel['name']}", columns=["kernel speedup", "step speedup", "tok/s (projected)"],
                    rows=quoted(ceiling_table(window, part, tok_s), kernel_spread),
                    note="step speedup = 1 / (1 - t_k/W + t_k/(W s)); tok/s = measured x step speedup" + precision)]
    if op_part is not None:
        tables.append(Table(title=f"Amdahl ceiling for its operation {op_name}", columns=["operation speedup", "step speedup", "tok/s (projected)"],
                            rows=quoted(ceiling_table(window, op_part, tok_s), op_spread),
                            note=f"t_op = {kernel['name']} plus the other kernels its call launches ({times['operation'].get('source', 'same trace')})"))
    data = {"kernel": kernel["name"], "reachable": reachable, "dominant": typed(profile).dominant is not None,
            "setting": setting, "operation": ({"name": op_name, "frame": times["operation"].get("frame"),
                                               "source": times["operation"].get("source")} if op_name else None),
            "operation_status": (times["operation"].get("status") or ("attributed" if op_name else "not attributed")),
            "bound": "operation" if op_name else "kernel"}
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
    kernel_text = f"the kernel alone {fmt_spread(kernel_x, kernel_spread)}x"
    headline = (f"even an instant {what} gives {fmt_spread(bound_x, spread)}x"
                + (f" ({kernel_text})" if op_name else "")
                + f": {fmt(tok_s, '.3g')} -> {fmt_spread(best_tok_s, spread)} tok/s (projected), "
                + ("reaching" if reachable else "short of") + f" the goal of {goal:.0f} tok/s "
                f"(step {fmt_spread(step_ms / bound_x, spread)} ms vs a {fmt(budget_ms, '.3g')} ms budget at batch {batch})")
    data["round"] = 1 + sum(1 for f in findings_of(state) if f.step == "ceiling")
    finding = Finding(index=next_index(state), step="ceiling", headline=headline, verdict=verdict, numbers=numbers,
                      tables=tables, evidence=sorted(set(ev) | set(seq)), labels=list(profile.labels), data=data)
    # Levers that replaced the operation and were measured above its bound: the model failed for this
    # setting, and (routes.after_ceiling) the investigation goes on from the best measured setting.
    held = consistency.check(findings_of(state) + [finding], target.model_dump(mode="json"))
    beaten = sorted({c.measurement.removeprefix("lever ") for c in held.checks
                     if c.verdict == "violated" and c.claim_finding == finding.stem and c.measurement.startswith("lever ")})
    if beaten:
        finding.data["beaten_by"] = beaten
        finding.headline += (f"; measured above this bound: {', '.join(beaten)}"
                             + (" (the investigation goes on from the best measured setting)" if data["round"] == 1 else ""))
        finding.verdict = "model-failed"
    return finding
