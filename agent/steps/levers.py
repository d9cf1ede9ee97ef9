"""Levers: the deployment's setting and each known lever, interleaved over rounds, judged by interval."""

from __future__ import annotations

from typing import Any

from agent import stats
from agent.config import Lever, Target
from agent.engines import (applicability, baseline, baseline_options, bench_args, best_setting, measured_batch,
                           shapes_for, with_lever)
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps import StepFailed
from agent.steps.survey import target_of

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def throughput(result: dict[str, Any], batch: int) -> dict[str, float]:
    """tok/s and step time at one batch size from an engine.bench result, measured and projected."""
    rows = [r for r in result["data"]["results"] if r["batch"] == batch]
    if not rows:
        raise StepFailed(f"the engine reported no result at batch {batch}")
    row = rows[0]
    return {"tok_s": row["tok_s_projected"], "tok_s_measured": row["tok_s"], "step_ms": row["step_ms"],
            "layer_ms": row["layer_ms"]}


def interpretation_labels(state: InvestigationState) -> list[str]:
    survey = finding_for(state, "survey")
    labels = ["stand-in"] if survey.data["stand_in"] else []
    if survey.data["box"]["device"] == "cpu":
        labels.append("cpu-interpreter")
    return labels


def sweep_plan(lever_names: list[str], rounds: int, warmup_runs: int) -> list[dict[str, Any]]:
    """The runs of a sweep in order: ``warmup_runs`` baseline runs (discarded), then ``rounds``
    rounds of ``A L1 A L2 ...`` (A the baseline), so every lever run follows its own baseline run;
    with no lever a round is one baseline run. Each entry: setting, round, warmup, repeat label."""
    plan = [{"setting": stats.BASELINE, "round": 0, "warmup": True,
             "repeat": "warmup" if warmup_runs == 1 else f"warmup{i + 1}"} for i in range(warmup_runs)]
    for r in range(1, rounds + 1):
        if not lever_names:
            plan.append({"setting": stats.BASELINE, "round": r, "warmup": False, "repeat": f"r{r}"})
        for j, name in enumerate(lever_names):
            plan.append({"setting": stats.BASELINE, "round": r, "warmup": False, "repeat": f"r{r}{LETTERS[j % 26]}"})
            plan.append({"setting": name, "round": r, "warmup": False, "repeat": f"r{r}"})
    return plan


def ratio_text(ratio: float | None, low: float | None, high: float | None) -> str:
    """``+95.7% [+94.8, +96.6]`` for a throughput ratio and its interval; ``12.3x [11.9, 12.8]``
    from 2x up, where percentages stop being readable."""
    if ratio is None:
        return "-"
    if ratio >= 2:
        bounds = f" [{low:.3g}, {high:.3g}]" if low is not None else " (no interval)"
        return f"{ratio:.3g}x{bounds}"
    bounds = f" [{100 * (low - 1):+.1f}, {100 * (high - 1):+.1f}]" if low is not None else " (no interval)"
    return f"{100 * (ratio - 1):+.1f}%{bounds}"


def _sketch(result: dict[str, Any], batch: int) -> dict | None:
    rows = [r for r in result["data"]["results"] if r["batch"] == batch]
    return rows[0].get("output_sketch") if rows else None


def output_check(reference: dict | None, sketches: list[dict | None], rtol: float) -> dict[str, Any]:
    """A setting's outputs against the baseline's: the worst norm-relative error over its runs.
    ``ok`` None (with a note) when there is nothing to compare, never a silent pass."""
    if reference is None:
        return {"ok": None, "error": None, "rtol": rtol, "note": "no baseline output sketch to compare with"}
    if not sketches or any(s is None for s in sketches):
        return {"ok": None, "error": None, "rtol": rtol, "note": "the engine reported no output sketch"}
    try:
        error = max(stats.output_error(reference, s) for s in sketches)
    except ValueError as exc:
        return {"ok": None, "error": None, "rtol": rtol, "note": str(exc)}
    return {"ok": error <= rtol, "error": error, "rtol": rtol, "note": ""}


def sweep_levers(state: InvestigationState, session: Session) -> Finding:
    """Measure the deployment's setting as it runs (CUDA graphs on where the box has a GPU) and
    each applicable lever at the goal's concurrency: a discarded warm-up run, then ``rounds``
    rounds of ``A B A C ...`` (one engine.bench run each). Per setting: the median of its run
    medians and (levers) a paired interval of its tok/s ratio to the baseline; a lever moves only
    when the interval excludes no change and its effect passes ``min_effect`` (agent/stats.py).
    Every lever's output sketch is checked against the baseline's: one that differs beyond
    ``output_rtol`` "changes the output" whatever its speed; one timed under another execution
    mode (Triton interpreted vs native) is "not comparable". Levers that cannot run here are listed
    with the reason. Fails when the baseline does not succeed in at least two rounds."""
    target: Target = target_of(state)
    device = finding_for(state, "survey").data["box"]["device"]
    batch = measured_batch(target, device)
    rules = target.thresholds.noise
    rounds = rules.rounds_for(device)
    base = baseline(target, device)
    base_notes = baseline_options(target, device)[1]

    tried: list[Lever] = []
    not_tried: dict[str, str] = {}
    for lever in target.levers:
        reason = applicability(target, lever, device)
        if reason:
            not_tried[lever.name] = reason
        else:
            tried.append(lever)
    settings = {stats.BASELINE: base, **{lever.name: with_lever(target, lever, device) for lever in tried}}

    runs: list[dict[str, Any]] = []
    for entry in sweep_plan([lever.name for lever in tried], rounds, rules.warmup_runs):
        result = session.call("engine.bench", bench_args(target, device, settings[entry["setting"]], [batch],
                                                         repeat=entry["repeat"]))
        # evidence names the result line, which holds the numbers, not the call line
        run = {**entry, "label": f"{settings[entry['setting']].label}#{entry['repeat']}", "seq": result["seq"],
               "ok": result["ok"]}
        if result["ok"]:
            measured = throughput(result, batch)
            samples = [r for r in result["data"]["results"] if r["batch"] == batch][0]["step_ms_samples"]
            run.update(step_ms=measured["step_ms"], samples=samples, tok_s=measured["tok_s"],
                       # tok/s x step ms is the same for every run of the engine at this batch and depth
                       scale=measured["tok_s"] * measured["step_ms"], interpreted=bool(result["data"].get("interpreter")),
                       sketch=_sketch(result, batch))
        else:
            run["error"] = result["error"]
        runs.append(run)

    sweep = stats.analyze_sweep(
        [stats.Run(r["setting"], tuple(r["samples"]) if r["ok"] else None, r["round"], r["warmup"]) for r in runs],
        rules.confidence, rules.min_effect)
    base_runs = [r for r in runs if r["setting"] == stats.BASELINE and not r["warmup"]]
    base_ok = [r for r in base_runs if r["ok"]]
    if len(base_ok) < 2:
        errors = "; ".join(sorted({r["error"] for r in base_runs if not r["ok"]})) or "no runs"
        raise StepFailed(f"the baseline succeeded in {len(base_ok)} of {len(base_runs)} rounds: {errors}")
    scale = base_ok[0]["scale"]
    mid_ms = sweep.baseline.median_ms
    mid = scale / mid_ms
    base_interpreted = base_ok[0]["interpreted"]
    reference = next((r["sketch"] for r in runs if r["setting"] == stats.BASELINE and r["ok"] and r.get("sketch")), None)
    base_output = output_check(reference, [r.get("sketch") for r in base_ok], rules.output_rtol)
    base_seqs = [r["seq"] for r in base_runs]
    layers_run = min(shapes_for(target, device).layers, target.model.layers)
    projected = f"projected to {target.model.layers} layers from {layers_run} measured"

    lever_results = []
    for lever in target.levers:
        if lever.name in not_tried:
            lever_results.append({"name": lever.name, "status": "not tried", "reason": not_tried[lever.name]})
            continue
        lever_results.append(_judge(lever, runs, sweep.levers.get(lever.name), reference, base_interpreted, rules, scale))

    warmups = [r for r in runs if r["warmup"]]
    sde = sweep.smallest_detectable_effect
    rows = [["baseline (warm-up, discarded)", _setting_text(base.env, base.options),
             scale / r["step_ms"] if r["ok"] else None, "-", "1", "warm-up" if r["ok"] else f"failed: {r['error']}",
             str(r["seq"])] for r in warmups]
    rows.append(["baseline", _setting_text(base.env, base.options), mid, "reference", _runs_text(len(base_ok), len(base_runs)),
                 "reference", _seqs_text(base_seqs)])
    for lever, result in zip(target.levers, lever_results):
        rows.append(_row(lever, result))

    movers = [r["name"] for r in lever_results if r["status"] == "moves up"]
    chosen = best_setting(target, {"levers": lever_results})
    best = next((r["tok_s"] for r in lever_results if chosen and r["name"] == chosen[0].name), mid)
    goal = target.goal.output_tok_s
    goal_met = best >= goal
    sde_text = f"{100 * sde:.1f}%" if sde is not None else "not stated (fewer than two rounds)"
    headline = (f"baseline {mid:.3g} tok/s at batch {batch} ({projected}; {rounds} rounds, smallest detectable "
                f"effect {sde_text}); "
                + (f"levers that move it up: {', '.join(movers)}" if movers else "no lever moves it up")
                + ("; goal met" if goal_met else f"; goal {goal:.0f} tok/s not met"))
    numbers = {
        "baseline_tok_s": Number(value=mid, unit="tok/s", label=f"baseline median of {len(base_ok)} runs, {projected}", seqs=base_seqs),
        "baseline_step_ms": Number(value=mid_ms, unit="ms", label="baseline decode step, median of runs (layers run)", seqs=base_seqs),
        "baseline_layer_ms": Number(value=mid_ms / layers_run, unit="ms", label="baseline time per layer", seqs=base_seqs),
        "projected_step_ms": Number(value=mid_ms / layers_run * target.model.layers, unit="ms",
                                    label=f"decode step, {projected}", seqs=base_seqs),
        "run_log_sd": Number(value=sweep.run_log_sd, unit="log", seqs=base_seqs,
                             label=f"baseline run-to-run spread: s.d. of log run medians ({sweep.run_log_df} d.f.)"),
        "smallest_detectable_effect": Number(value=sde, unit="fraction", seqs=base_seqs,
                                             label=f"max(min_effect, half-width of the {rules.confidence:.0%} paired "
                                                   f"interval the baseline's spread gives at {rounds} rounds)"),
        "min_effect": Number(value=rules.min_effect, unit="fraction", label="smallest change that counts as a move (target)"),
        "best_tok_s": Number(value=best, unit="tok/s", seqs=base_seqs if not chosen else next(r["seqs"] for r in lever_results if r["name"] == chosen[0].name),
                             label=f"best measured setting the declared hardware allows: "
                                   f"{'baseline + ' + chosen[0].name if chosen else 'baseline'}"),
        "goal_tok_s": Number(value=goal, unit="tok/s", label=f"goal at concurrency {target.goal.concurrency}"),
        "step_budget_ms": Number(value=target.goal.step_budget_ms, unit="ms", label="decode step budget for the goal"),
    }
    for result in lever_results:
        if result.get("interval"):
            seqs = result["seqs"]
            numbers[f"{result['name']}_ratio"] = Number(value=result["ratio"], unit="x", seqs=seqs,
                                                        label=f"{result['name']} tok/s / baseline tok/s (paired rounds)")
            numbers[f"{result['name']}_ratio_low"] = Number(value=result["interval"][0], unit="x", seqs=seqs,
                                                            label=f"{rules.confidence:.0%} interval, low")
            numbers[f"{result['name']}_ratio_high"] = Number(value=result["interval"][1], unit="x", seqs=seqs,
                                                             label=f"{rules.confidence:.0%} interval, high")
    note = (f"tok/s {projected}; ratio = lever tok/s / baseline tok/s with its {rules.confidence:.0%} interval "
            f"(t-interval on the log ratios of {rounds} rounds, each lever run paired with the baseline run before it; "
            f"runs, not step samples, are the unit); a lever moves when the interval excludes no change and the "
            f"effect is at least {100 * rules.min_effect:.0f}%; smallest detectable effect {sde_text}; outputs must "
            f"match the baseline's within {100 * rules.output_rtol:.0f}% (norm-relative, sketch of the decode output)")
    if base_output["ok"] is False:
        note += f"; the baseline's own outputs differ run to run by {100 * base_output['error']:.2g}%"
    note += "".join(f"; {n}" for n in base_notes)
    return Finding(
        index=next_index(state),
        step="levers",
        headline=headline,
        verdict="goal-met" if goal_met else "goal-not-met",
        numbers=numbers,
        tables=[Table(title="Lever sweep",
                      columns=["setting", "change", "median tok/s", f"vs baseline [{rules.confidence:.0%} CI]", "runs",
                               "verdict", "log"],
                      rows=rows, note=note)],
        evidence=[r["seq"] for r in runs],
        labels=interpretation_labels(state),
        data={
            "device": device, "batch": batch, "concurrency": target.goal.concurrency, "layers_run": layers_run,
            "goal_met": goal_met,
            "baseline_options": base.options, "baseline_notes": base_notes,
            "baseline": {"tok_s": mid, "step_ms": mid_ms, "run_ms": sweep.baseline.run_ms, "failed_runs": sweep.baseline.failed,
                         "interpreted": base_interpreted, "output": base_output, "seqs": base_seqs},
            "levers": lever_results,
            "best": {"levers": [lever.name for lever in chosen], "tok_s": best},
            "sweep": {"rounds": rounds, "warmup_runs": rules.warmup_runs, "confidence": rules.confidence,
                      "min_effect": rules.min_effect, "output_rtol": rules.output_rtol,
                      "run_log_sd": sweep.run_log_sd, "run_log_df": sweep.run_log_df,
                      "smallest_detectable_effect": sde},
            "runs": [{k: r.get(k) for k in ("label", "setting", "round", "warmup", "seq", "ok", "step_ms", "error")}
                     for r in runs],
        },
    )


def _judge(lever: Lever, runs: list[dict], stat: stats.SettingStats | None, reference: dict | None,
           base_interpreted: bool, rules, scale: float) -> dict[str, Any]:
    """One tried lever's result: its runs' statistics, output check and verdict."""
    own = [r for r in runs if r["setting"] == lever.name]
    ok = [r for r in own if r["ok"]]
    result: dict[str, Any] = {"name": lever.name, "seqs": [r["seq"] for r in own], "failed_runs": len(own) - len(ok)}
    if not ok or stat is None:
        result.update(status="failed", reason="; ".join(sorted({r["error"] for r in own})) or "no runs")
        return result
    interval = stat.interval
    output = output_check(reference, [r.get("sketch") for r in ok], rules.output_rtol)
    interpreted = ok[0]["interpreted"]
    comparable = interpreted == base_interpreted
    result.update(
        tok_s=scale / stat.median_ms, step_ms=stat.median_ms, run_ms=stat.run_ms, unpaired=stat.unpaired,
        ratio=interval.ratio if interval else None,
        interval=[interval.low, interval.high] if interval and interval.low is not None else None,
        interval_basis=(f"{interval.confidence:.0%} t-interval on the log ratios of {interval.n} paired rounds"
                        + (f" ({interval.note})" if interval.note else "")) if interval else "no paired rounds",
        pairs=interval.n if interval else 0, interpreted=interpreted, comparable=comparable, output=output,
    )
    if output["ok"] is False:
        result.update(status="changes the output",
                      reason=f"outputs differ from the baseline's by {100 * output['error']:.3g}% (> {100 * rules.output_rtol:.0f}%)")
    elif not comparable:
        modes = {True: "Triton under the CPU interpreter", False: "not interpreted"}
        result.update(status="not comparable",
                      reason=f"the baseline ran {modes[base_interpreted]}, this lever {modes[interpreted]}: their tok/s "
                             f"measure different execution, not the lever")
    else:
        result["status"] = stats.speed_verdict(interval, rules.min_effect)
    return result


def _row(lever: Lever, result: dict[str, Any]) -> list[Any]:
    change = _setting_text(lever.env, lever.options)
    if result["status"] == "not tried":
        return [lever.name, change, None, "-", "0", f"not tried: {result['reason']}", ""]
    runs = len(result["seqs"])
    if result["status"] == "failed":
        return [lever.name, change, None, "-", _runs_text(0, runs), f"failed: {result['reason']}", _seqs_text(result["seqs"])]
    low, high = result["interval"] or (None, None)
    verdict = result["status"]
    if result.get("reason"):
        verdict += f": {result['reason']}"
    elif result["output"]["ok"] is None:
        verdict += f" (output not checked: {result['output']['note']})"
    if result["failed_runs"]:
        verdict += f" ({result['failed_runs']} runs failed)"
    ratio = ratio_text(result["ratio"], low, high)
    if result["status"] == "not comparable":
        ratio += " (not comparable)"
    return [lever.name, change, result["tok_s"], ratio, _runs_text(runs - result["failed_runs"], runs), verdict,
            _seqs_text(result["seqs"])]


def _runs_text(ok: int, total: int) -> str:
    return str(total) if ok == total else f"{ok} of {total}"


def _seqs_text(seqs: list[int]) -> str:
    return ", ".join(str(s) for s in seqs)


def _setting_text(env: dict[str, str], options: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in sorted(env.items())] + [f"{k}={v}" for k, v in sorted(options.items())]
    return " ".join(parts) or "-"
