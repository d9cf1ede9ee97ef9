"""Ceiling: Amdahl's law over the profile, against the goal as a time budget per decode step."""

from __future__ import annotations

import math

from typing import Any

from agent import consistency
from agent.engines import engine_for
from agent.config import Target
from agent.evidence import typed
from agent.session import Session
from agent.state import InvestigationState, finding_for, findings_of
from agent.steps import Draft
from agent.steps.amdahl import amdahl, bound_spread, ceiling_table, profile_times, quoted, speedup_needed, stretch_range, stretch_text, step_against_goal
from reports.format import fmt, fmt_spread
from schema.finding import Finding, Number, Table


def compute_ceiling(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Amdahl with the shares of the profile and the step timed without it: with W the profiled steps'
    GPU window (the profiler's own gaps between steps kept out and reported), the dominant kernel
    taking ``t_k / W`` of the step and its operation (the frame that launches it: the wrapper with its
    merge and sink) ``t_op / W``, an instant kernel gives ``1 / (1 - t_k/W)`` and an instant operation
    ``1 / (1 - t_op/W)`` over the timed step T. The operation's bound is the ceiling for anything
    that replaces the operation (another backend, the rewrite); the kernel's is shown beside it. The
    tok/s projects from the profiled setting's measured tok/s; the goal is held as a time budget a
    decode step. Also recomputes the target's published case from its raw inputs, when the target
    gives them. No tool calls: every input is an earlier finding's number."""
    profile = finding_for(state, "profile")
    kernel = typed(profile).dominant or typed(profile).leader
    times = profile_times(profile)
    window, part, op_part = times["window_ms"], times["kernel_ms"], times["operation_ms"]
    tok_s = profile.number("setting_tok_s")
    step_ms = profile.number("setting_step_ms")
    goal = target.goal.output_tok_s
    batch = profile.number("batch")
    kernel_x = amdahl(window, part)
    operation_x = amdahl(window, op_part) if op_part is not None else None
    bound_x = operation_x or kernel_x
    best_tok_s = tok_s * bound_x
    reachable = best_tok_s >= goal
    op_name = times["operation"].name if op_part is not None else None
    kernel_spread = bound_spread(times, part)
    op_spread = bound_spread(times, op_part) if op_part is not None else None
    spread = op_spread if op_part is not None else kernel_spread
    what = f"{op_name} (the call around {kernel.name})" if op_name else f"{kernel.name}"
    numbers = _numbers(target, profile, times, kernel.name, what, kernel_x, operation_x, spreads=(kernel_spread, op_spread))
    data = {"kernel": kernel.name, "reachable": reachable, "dominant": typed(profile).dominant is not None,
            "setting": typed(profile).setting.label,
            "operation": ({"name": op_name, "frame": times["operation"].frame,
                           "source": times["operation"].source} if op_name else None),
            "operation_status": (times["operation"].status or ("attributed" if op_name else "not attributed")),
            "bound": "operation" if op_name else "kernel"}
    if times["rank"] is not None:
        data["rank"] = {"rank": times["rank"], "why": times["rank_why"]}
    _published_case(target, numbers, data)
    kernel_text = f"the kernel alone {fmt_spread(kernel_x, kernel_spread)}x"
    on_rank = f"rank {times['rank']}'s trace ({times['rank_why']}): " if times["rank"] is not None else ""
    low, high = (numbers.get(f"{data['bound']}_instant_{end}_x") for end in ("low", "high"))
    outside = bool(times.get("timed_step_ms")) and times["window_ms"] / times["steps"] < times["timed_step_ms"]
    known = stretch_text(low and low.value, high and high.value, outside)
    headline = (on_rank + f"even an instant {what} gives {fmt_spread(bound_x, spread)}x{known}"
                + (f" ({kernel_text})" if op_name else "")
                + f": {fmt(tok_s, '.3g')} -> {fmt_spread(best_tok_s, spread)} tok/s (projected), "
                + ("reaching" if reachable else "short of") + f" the goal of {goal:.0f} tok/s "
                f"({step_against_goal(fmt_spread(step_ms / bound_x, spread), batch, target.goal)})")
    # A live server's client counts prefill and each request's start and end in its throughput, not in its step
    # (TPOT): the instant step can fit the goal's step budget while the projected throughput misses the goal.
    # Said, never left as two verdicts that disagree.
    if (engine_for(target).measured_by_client and batch == target.goal.concurrency and not reachable
            and step_ms / bound_x <= target.goal.step_budget_ms):
        steady = 1000.0 * batch / step_ms
        numbers["steady_tok_s"] = Number(value=steady, unit="tok/s", seqs=profile.numbers["setting_step_ms"].seqs,
                                         label="projected: concurrency / the measured step (TPOT), decode steps alone")
        data["throughput_below_steps"] = True
        headline += (f"; by step time it would fit the budget, but the client's {fmt(tok_s, '.4g')} tok/s is below "
                     f"concurrency / TPOT, {fmt(steady, '.4g')} tok/s: prefill and the time around "
                     f"each request's decode steps count in throughput, not in the step")
    data["round"] = 1 + sum(1 for f in findings_of(state) if f.step == "ceiling")
    seq = profile.numbers["setting_tok_s"].seqs
    draft = Draft(headline=headline, verdict="goal-reachable" if reachable else "goal-unreachable", numbers=numbers,
                  tables=_tables(kernel.name, times, tok_s, spreads=(kernel_spread, op_spread, spread)),
                  evidence=sorted(set(profile.evidence) | set(seq)), labels=list(profile.labels), data=data)
    # Levers that replaced the operation and were measured above its bound: the model failed for this
    # setting, and (routes.after_ceiling) the investigation goes on from the best measured setting.
    claim = draft.numbered(state, "ceiling")
    held = consistency.check(findings_of(state) + [claim], target.model_dump(mode="json"))
    beaten = sorted({c.measurement.removeprefix("lever ") for c in held.checks
                     if c.verdict == "violated" and c.claim_finding == claim.stem and c.measurement.startswith("lever ")})
    if beaten:
        draft.data["beaten_by"] = beaten
        draft.headline += (f"; measured above this bound: {', '.join(beaten)}"
                           + (" (the investigation goes on from the best measured setting)" if data["round"] == 1 else ""))
        draft.verdict = "model-failed"
    return draft


def _numbers(target: Target, profile: Finding, times: dict[str, Any], kernel: str, what: str, kernel_x: float,
             operation_x: float | None, spreads: tuple[float | None, float | None]) -> dict[str, Number]:
    """The ceiling's numbers: W, t_k (and t_op), the instant bounds, the projected tok/s and step against the goal."""
    window, part, op_part, steps = times["window_ms"], times["kernel_ms"], times["operation_ms"], times["steps"]
    kernel_spread, op_spread = spreads
    spread = op_spread if op_part is not None else kernel_spread
    op_name = times["operation"].name if op_part is not None else None
    tok_s, step_ms, batch = profile.number("setting_tok_s"), profile.number("setting_step_ms"), profile.number("batch")
    setting = typed(profile).setting.label
    goal = target.goal.output_tok_s
    bound_x = operation_x or kernel_x
    needed = speedup_needed(window, op_part if op_part is not None else part, goal / tok_s)
    seq = profile.numbers["setting_tok_s"].seqs
    ev = profile.evidence
    on_rank = f", rank {times['rank']}'s trace alone" if times["rank"] is not None else ""
    # a live server's tok/s and step are what its client measured (the whole model), not a projection of layers run
    projected = f"projected to {target.model.layers} layers"
    server = engine_for(target).measured_by_client
    measured_as = "output throughput, measured by the load's client" if server else projected
    step_as = "median TPOT, measured by the load's client" if server else projected
    numbers = {
        "window_ms": Number(value=window, unit="ms", label=f"W: GPU window inside the {steps} profiled steps"
                            + (" (between-step gaps kept out)" if times["gaps_ms"] is not None else "") + on_rank, seqs=ev),
        "kernel_ms": Number(value=part, unit="ms", label=f"t_k: {kernel} in the profile{on_rank}", seqs=ev),
        "kernel_share": Number(value=part / window, unit="fraction", label="t_k / W", seqs=ev),
        "kernel_instant_x": Number(value=kernel_x, unit="x", label="the kernel instant: 1 / (1 - t_k/W)", seqs=ev, spread=kernel_spread),
        "timed_step_ms": Number(value=times["timed_step_ms"], unit="ms", label="T: the step of the layers run, timed without the profiler", seqs=seq),
        "baseline_tok_s": Number(value=tok_s, unit="tok/s", label=f"measured, {setting} ({measured_as})", seqs=seq),
        "ceiling_tok_s": Number(value=tok_s * bound_x, unit="tok/s", label=f"projected: measured x the {'operation' if op_name else 'kernel'} instant", seqs=sorted(set(ev) | set(seq)), spread=spread),
        "goal_tok_s": Number(value=goal, unit="tok/s", label="goal", declared=True),
        # the goal's one budget, at its concurrency; a step measured at another batch is said to be (measured_batch)
        "step_budget_ms": Number(value=target.goal.step_budget_ms, unit="ms",
                                 label=f"the goal's decode step budget: {target.goal.concurrency} tokens a step / goal", declared=True),
        "measured_batch": Number(value=batch, label="the batch the step was measured (profiled) at", seqs=seq),
        "projected_step_ms": Number(value=step_ms, unit="ms", label=f"decode step, {setting}, {step_as}", seqs=seq),
        "instant_step_ms": Number(value=step_ms / bound_x, unit="ms", label=f"projected decode step with {what} instant", seqs=sorted(set(ev) | set(seq)), spread=spread),
        "speedup_needed": Number(value=needed, unit="x", label=f"speedup of {what} that would meet the goal (none: unreachable)",
                                 seqs=sorted(set(ev) | set(seq))),
        "profiled_step_ms": Number(value=times["whole_ms"] / steps, unit="ms", label="the profiled window a step, the profiler's gaps included", seqs=ev),
    }
    # On a GPU the profiler stretches the step with its own gaps and syncs, which lie somewhere in the step; a CPU
    # host trace's ranges each carry the profiler's own overhead, so the question where it lies has no such answer
    # there: its bounds keep their step-to-step spread alone (and their runs compare structurally, on any box).
    gpu = typed(profile).kind != "cpu-host"
    for key, part_ms, name in (("kernel", part, "the kernel"), ("operation", op_part, "the operation")):
        known = stretch_range(times, part_ms) if part_ms is not None and gpu else None
        if known is None:
            continue
        # the bound as far as the profiler's stretch of the step leaves it known (its modelling error, issue 30)
        stretch = times["window_ms"] / times["steps"] / times["timed_step_ms"] - 1
        why = (f"the profiled window a step is {100 * stretch:+.2g}% of the step timed without the profiler, and whether "
               f"that lies in {name} or the rest is not measured" if stretch > 0 else
               f"the step timed without the profiler is {100 * (1 / (1 + stretch) - 1):.2g}% longer than the profiled GPU "
               f"window a step: time outside the GPU's window (the host, a live deployment's scheduler), which {name} instant "
               f"leaves as it is at the low end and takes away with the window at the high end")
        for end, value in zip(("low", "high"), known):
            if math.isinf(value):  # unbounded (the stretch exceeds the rest): no number, said where it is read
                continue
            numbers[f"{key}_instant_{end}_x"] = Number(value=value, unit="x", seqs=ev, label=f"{name} instant, {end} end: {why}")
    if op_part is not None:
        numbers["operation_ms"] = Number(value=op_part, unit="ms", label=f"t_op: {op_name} (the kernel and the rest of its call) in the profile{on_rank}", seqs=ev)
        numbers["operation_share"] = Number(value=op_part / window, unit="fraction", label="t_op / W", seqs=ev)
        numbers["operation_instant_x"] = Number(value=operation_x, unit="x", label="the operation instant: 1 / (1 - t_op/W)", seqs=ev, spread=op_spread)
    if times["gaps_ms"] is not None:
        # a live server's GPU also idles between steps while its scheduler forms the next batch: not the profiler's alone
        # ("server" kept out of the label: name_servers appends the server's name to a label that has none)
        whose = "the scheduler forming the next batch, and the profiler's step marks" if server else "the profiler's own sync and step marks"
        numbers["profiler_gaps_ms"] = Number(value=times["gaps_ms"], unit="ms", label=f"GPU idle between the profiled steps ({whose}), kept out of W", seqs=ev)
    return numbers


def _tables(kernel: str, times: dict[str, Any], tok_s: float,
            spreads: tuple[float | None, float | None, float | None]) -> list[Table]:
    """The ceiling tables: the kernel's speedups, and its operation's where it is attributed."""
    window, part, op_part = times["window_ms"], times["kernel_ms"], times["operation_ms"]
    kernel_spread, op_spread, _ = spreads

    def precision(rest: str, spread: float | None) -> str:
        # each table quotes the spread of its own rest of the step (W - t_k, W - t_op): the one its digits follow
        return (f"; quoted to the digits the steps' spread supports (the steps' window's standard deviation is "
                f"{100 * spread:.2g}% of the rest of the step, {rest})" if spread is not None else "")
    tables = [Table(title=f"Amdahl ceiling for {kernel}", columns=["kernel speedup", "step speedup", "tok/s (projected)"],
                    rows=quoted(ceiling_table(window, part, tok_s), kernel_spread),
                    note="step speedup = 1 / (1 - t_k/W + t_k/(W s)); tok/s = measured x step speedup"
                         + precision("W - t_k", kernel_spread))]
    if op_part is not None:
        op_name = times["operation"].name
        tables.append(Table(title=f"Amdahl ceiling for its operation {op_name}", columns=["operation speedup", "step speedup", "tok/s (projected)"],
                            rows=quoted(ceiling_table(window, op_part, tok_s), op_spread),
                            note=f"t_op = {kernel} plus the other kernels its call launches ({times['operation'].source if 'source' in times['operation'].model_fields_set else 'same trace'})"
                                 + precision("W - t_op", op_spread)))
    return tables


def _published_case(target: Target, numbers: dict[str, Number], data: dict[str, Any]) -> None:
    """The target's published case recomputed from its raw inputs, into ``numbers`` and ``data``, when it gives them."""
    published = target.published
    if not {"kernel_time_ms", "dominant_ms", "tok_s"} <= set(published):
        return
    p_total = published["kernel_time_ms"] + published.get("idle_ms", 0)
    p_instant = amdahl(p_total, published["dominant_ms"])
    # the published case is the target's own inputs (declared), recomputed: no journal line holds them
    numbers["published_instant_speedup"] = Number(value=p_instant, unit="x", label="published case: T / (T - t)", declared=True)
    numbers["published_ceiling_tok_s"] = Number(value=published["tok_s"] * p_instant, unit="tok/s",
                                                label="published case: tok/s x T / (T - t)", declared=True)
    data["published"] = {"total_ms": p_total, "dominant_ms": published["dominant_ms"], "instant": p_instant,
                         "tok_s": published["tok_s"], "ceiling_tok_s": published["tok_s"] * p_instant}
    if published.get("steps"):  # its totals are over its steps; the report's other T's are one step's
        data["published"].update(steps=published["steps"], step_ms=p_total / published["steps"],
                                  dominant_step_ms=published["dominant_ms"] / published["steps"])
        # its rate at the goal's concurrency is a step of its own: where that is far longer than its kernel time a
        # step, the two figures do not describe one step, and scaling the rate by T / (T - t) is said to rest on that
        rate_step = 1000.0 * target.goal.concurrency / published["tok_s"]
        data["published"].update(rate_step_ms=rate_step, concurrency=target.goal.concurrency,
                                  reconciles=rate_step <= 1.5 * data["published"]["step_ms"])
