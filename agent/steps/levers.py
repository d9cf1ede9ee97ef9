"""Levers: the baseline measured several times (its spread is the noise floor), then each known lever."""

from __future__ import annotations

from statistics import median
from typing import Any

from agent.config import Target
from agent.engines import applicability, baseline, bench_args, measured_batch, shapes_for, with_lever
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps import StepFailed
from agent.steps.survey import target_of


def throughput(result: dict[str, Any], batch: int) -> dict[str, float]:
    """tok/s and step time at one batch size from an engine.bench result, measured and projected."""
    rows = [r for r in result["data"]["results"] if r["batch"] == batch]
    if not rows:
        raise StepFailed(f"the engine reported no result at batch {batch}")
    row = rows[0]
    return {"tok_s": row["tok_s_projected"], "tok_s_measured": row["tok_s"], "step_ms": row["step_ms"],
            "layer_ms": row["layer_ms"]}


def noise_band(values: list[float], k: float, floor: float) -> tuple[float, float, float]:
    """(median, relative spread, threshold): a change counts only beyond max(k x spread, floor)."""
    mid = median(values)
    spread = (max(values) - min(values)) / mid if mid else 0.0
    return mid, spread, max(k * spread, floor)


def verdict_of(delta: float, threshold: float) -> str:
    if abs(delta) <= threshold:
        return "within noise"
    return "moves up" if delta > 0 else "moves down"


def interpretation_labels(state: InvestigationState) -> list[str]:
    survey = finding_for(state, "survey")
    labels = ["stand-in"] if survey.data["stand_in"] else []
    if survey.data["box"]["device"] == "cpu":
        labels.append("cpu-interpreter")
    return labels


def sweep_levers(state: InvestigationState, session: Session) -> Finding:
    """Measure the deployment's setting ``repeats`` times at the goal's concurrency, then each lever
    once. A lever counts as moving throughput only beyond the baseline's noise band. Levers that
    cannot run on this engine or box are listed with the reason, not silently dropped. Fails when
    no baseline measurement succeeds."""
    target: Target = target_of(state)
    device = finding_for(state, "survey").data["box"]["device"]
    batch = measured_batch(target, device)
    noise = target.thresholds.noise
    base = baseline(target)

    base_runs, seqs, failures = [], [], []
    for repeat in range(1, noise.repeats + 1):
        result = session.call("engine.bench", bench_args(target, device, base, [batch], repeat=repeat))
        seqs.append(result["call_seq"])
        if result["ok"]:
            base_runs.append(throughput(result, batch))
        else:
            failures.append(result["error"])
    base_seqs = list(seqs)
    if len(base_runs) < 2:
        raise StepFailed(f"the baseline could not be measured twice: {'; '.join(failures) or 'no runs'}")
    mid, spread, threshold = noise_band([r["tok_s"] for r in base_runs], noise.k, noise.floor)
    step_ms = median(r["step_ms"] for r in base_runs)
    layer_ms = median(r["layer_ms"] for r in base_runs)

    rows = [[f"baseline (x{len(base_runs)})", _setting_text(base.env, base.options), mid, 0.0, "reference",
             ", ".join(str(s) for s in seqs)]]
    lever_results = []
    for lever in target.levers:
        reason = applicability(target, lever, device)
        setting = with_lever(target, lever)
        if reason:
            rows.append([lever.name, _setting_text(lever.env, lever.options), None, None, f"not tried: {reason}", ""])
            lever_results.append({"name": lever.name, "status": "not tried", "reason": reason})
            continue
        result = session.call("engine.bench", bench_args(target, device, setting, [batch]))
        seqs.append(result["call_seq"])
        if not result["ok"]:
            rows.append([lever.name, _setting_text(lever.env, lever.options), None, None,
                         f"failed: {result['error']}", str(result["call_seq"])])
            lever_results.append({"name": lever.name, "status": "failed", "reason": result["error"],
                                  "seq": result["call_seq"]})
            continue
        measured = throughput(result, batch)
        delta = (measured["tok_s"] - mid) / mid
        verdict = verdict_of(delta, threshold)
        rows.append([lever.name, _setting_text(lever.env, lever.options), measured["tok_s"], delta, verdict,
                     str(result["call_seq"])])
        lever_results.append({"name": lever.name, "status": verdict, "tok_s": measured["tok_s"], "delta": delta,
                              "seq": result["call_seq"]})

    best = max([mid] + [r["tok_s"] for r in lever_results if "tok_s" in r])
    goal = target.goal.output_tok_s
    goal_met = best >= goal
    movers = [r["name"] for r in lever_results if r["status"] == "moves up"]
    layers_run = min(shapes_for(target, device).layers, target.model.layers)
    projected = f"projected to {target.model.layers} layers from {layers_run} measured"
    headline = (f"baseline {mid:.3g} tok/s at batch {batch} ({projected}), noise +/-{100 * spread:.1f}%; "
                + (f"levers that move it: {', '.join(movers)}" if movers else "no lever moves it beyond noise")
                + ("; goal met" if goal_met else f"; goal {goal:.0f} tok/s not met"))
    return Finding(
        index=next_index(state),
        step="levers",
        headline=headline,
        verdict="goal-met" if goal_met else "goal-not-met",
        numbers={
            "baseline_tok_s": Number(value=mid, unit="tok/s", label=f"baseline median, {projected}", seqs=base_seqs),
            "baseline_step_ms": Number(value=step_ms, unit="ms", label="baseline decode step (layers run)", seqs=base_seqs),
            "baseline_layer_ms": Number(value=layer_ms, unit="ms", label="baseline time per layer", seqs=base_seqs),
            "projected_step_ms": Number(value=layer_ms * target.model.layers, unit="ms", label=f"decode step, {projected}", seqs=base_seqs),
            "noise_spread": Number(value=spread, unit="fraction", label="baseline relative spread (max-min)/median", seqs=base_seqs),
            "noise_threshold": Number(value=threshold, unit="fraction", label=f"a lever moves only beyond max({noise.k} x spread, {noise.floor})"),
            "best_tok_s": Number(value=best, unit="tok/s", label="best measured setting", seqs=seqs),
            "goal_tok_s": Number(value=goal, unit="tok/s", label=f"goal at concurrency {target.goal.concurrency}"),
            "step_budget_ms": Number(value=target.goal.step_budget_ms, unit="ms", label="decode step budget for the goal"),
        },
        tables=[Table(title="Lever sweep", columns=["setting", "change", "tok/s", "vs baseline", "verdict", "log"], rows=rows,
                      note=f"tok/s {projected}; a lever counts beyond +/-{100 * threshold:.1f}%")],
        evidence=seqs,
        labels=interpretation_labels(state),
        data={"device": device, "batch": batch, "concurrency": target.goal.concurrency, "baseline_runs": base_runs, "levers": lever_results,
              "goal_met": goal_met, "layers_run": layers_run},
    )


def _setting_text(env: dict[str, str], options: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in sorted(env.items())] + [f"{k}={v}" for k, v in sorted(options.items())]
    return " ".join(parts) or "-"
