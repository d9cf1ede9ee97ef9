"""Split-K: re-run the engine with the rewrite, check and time it at the calls the engine made, and
hold the measurement against the prediction and the ceiling."""

from __future__ import annotations

import math

from statistics import mean, stdev
from typing import Any

from agent import consistency, stats
from agent.config import Target
from agent.engine_runs import Setting, bench_args, run_sweep
from agent.evidence import typed
from agent.session import Session
from agent.state import InvestigationState, finding_for, findings_of
from agent.steps import Draft, StepFailed
from agent.steps.amdahl import amdahl, profile_times
from agent.steps.attribution import SHOWN_KERNELS, attribute_dominant
from agent.steps.measurements import interpretation_labels, output_check, rounds_tok_s, sweep_runs, throughput
from schema.finding import Finding, Number, Table
from reports.format import digit_spec, kernel_label, kernel_names_of
from tools import trace
from tools.kernels.splitk import declared as declared_hw


def replacement_time_us(baseline_kernels: list[dict], splitk_kernels: list[dict], dominant: str) -> float:
    """Time of the kernels that replaced the dominant one: those in the split-K trace the baseline
    trace did not have (plus the dominant one itself, should any call of it remain)."""
    before = {k["name"] for k in baseline_kernels}
    return math.fsum(k["total_us"] for k in splitk_kernels if k["name"] not in before or k["name"] == dominant)


def vanished_kernels(baseline_kernels: list[dict], splitk_kernels: list[dict]) -> list[dict]:
    """Kernels of the baseline trace that the split-K trace no longer has (the old wrapper's own)."""
    after = {k["name"] for k in splitk_kernels}
    return [{"name": k["name"], "calls": k["calls"], "total_us": k["total_us"]} for k in baseline_kernels
            if k["name"] not in after]


def worst_error(check: dict, key: str) -> float | None:
    """The largest error of one kind against the float32 reference over the check's input variants."""
    values = [v["vs_reference"][key] for v in check.get("variants", {}).values() if key in v.get("vs_reference", {})]
    return max(values) if values else None


def rewrite_plan(target: Target, box_sm: int | None) -> dict[str, Any]:
    """Whose tile plan the rewrite is built, checked and timed with: the declared GPU's, since the
    decision is for it (``rewrite.plan``: declared), or the box's own. On a box of another architecture
    the declared plan runs as ``declared.plan_env`` sets it up (its kernels; on a Hopper box, the dots
    lowered to the mma.sync the declared GPU has instead of wgmma). Returns ``arch`` (the plan's compute
    capability; None: the box's own), ``env`` (for the engine and the kernel tools), ``declared`` (whether
    the decision's GPU is the one planned for) and ``text`` (what the report says of it)."""
    declared_sm = target.deployment.sm
    on = f"on this sm_{box_sm} box" if box_sm else "under the CPU interpreter"
    if declared_sm == box_sm:
        return {"arch": None, "env": {}, "declared": True, "box_sm": box_sm, "declared_sm": declared_sm, "short": "",
                "text": f"sm_{declared_sm}'s own plan, on the declared GPU's architecture"}
    if target.rewrite.plan == "box":
        return {"arch": None, "env": {}, "declared": False, "box_sm": box_sm, "declared_sm": declared_sm,
                "short": f"the box's own plan, a what-if for sm_{declared_sm}",
                "text": f"the box's own plan {on} (rewrite.plan: box), a what-if for the sm_{declared_sm} deployment"}
    try:
        env = declared_hw.plan_env(declared_sm, box_sm)
    except ValueError as exc:  # Hopper's plan is wgmma and Gluon: it runs on a Hopper GPU only
        return {"arch": None, "env": {}, "declared": False, "box_sm": box_sm, "declared_sm": declared_sm,
                "short": f"the box's own plan, a what-if for sm_{declared_sm}",
                "text": f"the box's own plan {on}, a what-if for the sm_{declared_sm} deployment ({exc})"}
    lowered = " with the dots on mma.sync (Triton's wgmma lowering off), as sm_{} lowers them".format(declared_sm) \
        if declared_hw.WGMMA_OFF_ENV in env else ""
    return {"arch": declared_sm, "env": env, "declared": True, "box_sm": box_sm, "declared_sm": declared_sm,
            "short": f"sm_{declared_sm}'s kernels {on}" + (", dots on mma.sync" if lowered else ""),
            "text": f"sm_{declared_sm}'s plan (its tile configs and kernels) {on}{lowered}"}


def engine_calls(run: dict, batch: int) -> list[dict]:
    rows = [r for r in run["data"]["results"] if r["batch"] == batch]
    return (rows[0].get("attention_calls") or []) if rows else []


def call_label(call: dict) -> str:
    caches = "window" + (f" + compressed (width {call['extra_topk']})" if call.get("extra_topk") else "")
    return f"{caches}, top-k width {call['topk']}"


def check_calls(session: Session, calls: list[dict], device: str, seqs: list[int],
                plan: dict[str, Any] | None = None) -> tuple[list[dict], list[str]]:
    """The rewrite checked (and on a GPU, timed) at each distinct call the engine made, in that call's
    form (its caches, its sink) and with the configuration the engine's wrapper chose for it, under
    ``plan`` (``rewrite_plan``); where that is the declared GPU's plan on a Hopper box, the box's own
    plan is timed beside it as a what-if of this box only (``box_bench``), never the decision's number."""
    rows, problems = [], []
    arch = (plan or {}).get("arch")
    for call in calls:
        args = {"batch": call["batch"], "topk": call["topk"], "heads": call["heads"], "device": device,
                "extra_topk": call.get("extra_topk"), "sink": bool(call.get("sink")),
                **({"plan_arch": arch} if arch else {})}
        check = session.call("kernel.splitk_check", args)
        seqs.append(check["seq"])
        row = {"call": call, "check_seq": check["seq"], "check_ok": check["ok"], "check": check.get("data")}
        if not check["ok"]:
            problems.append(f"{call_label(call)}: {check['error']}")
        elif (check["data"] or {}).get("config_name") != call.get("config"):
            problems.append(f"{call_label(call)}: the check ran config {check['data'].get('config_name')}, "
                            f"the engine {call.get('config')}")
        elif "extra_config" in call and (check["data"] or {}).get("extra_config_name") != call["extra_config"]:
            # a journal from before each cache got its own config logs none for the compressed cache
            problems.append(f"{call_label(call)}: the check ran config {check['data'].get('extra_config_name')} for "
                            f"the compressed cache, the engine {call['extra_config']}")
        if device == "cuda":
            bench = session.call("kernel.splitk_bench", {k: v for k, v in args.items() if k != "device"})
            seqs.append(bench["seq"])
            row.update(bench_seq=bench["seq"], bench_ok=bench["ok"], bench=bench.get("data") if bench["ok"] else None,
                       bench_error=bench.get("error"))
            if arch and (plan or {}).get("box_sm") == declared_hw.HOPPER:
                own = session.call("kernel.splitk_bench", {k: v for k, v in args.items() if k not in ("device", "plan_arch")})
                seqs.append(own["seq"])
                row.update(box_bench_seq=own["seq"], box_bench=own.get("data") if own["ok"] else None,
                           box_bench_error=own.get("error"))
        rows.append(row)
    return rows, problems


def operation_us(session: Session, run: dict, summary, before_kernels: list[dict]) -> tuple[float | None, dict]:
    """The attention operation's GPU time in the split-K run, attributed as the profile step
    attributes the baseline's (its eager twin where the run was graph-replayed), around the largest of
    the kernels that replaced the dominant one."""
    before = {k["name"] for k in before_kernels}
    new = [k for k in summary.merged.kernels if k.name not in before]
    if not new:
        return None, {"status": "no replacement kernel in the trace"}
    refs = {ref["name"]: ref for ref in run["artifacts"]}
    info = run["data"]["trace"]
    op, _ = attribute_dominant(session, refs, info, refs[info["file"]], new[0], summary.merged.steps or info["steps"])
    return (op["total_us"] if op["status"] == trace.ops.ATTRIBUTED else None), op


def _run_ms(run: dict, batch: int) -> float:
    return throughput(run, batch)["step_ms"]


def build_splitk(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Re-run the engine with the split-K rewrite (profiled the same way as the profiled setting),
    then check it against the float32 reference and the original at each distinct attention call the
    engine made (its shapes, caches, sink, and the configuration the wrapper chose), timing each on a
    GPU beside its share of the step; measure the engine again, alternating with the profiled setting,
    for the interval of the speedup; and hold that measurement against the predictions (Amdahl with the
    kernel's and the operation's measured speedups) and the ceiling's bounds. A wrong kernel fails the
    step: a fast wrong kernel is no option. A measurement above a bound makes the verdict say the
    model failed."""
    survey, profile = finding_for(state, "survey"), finding_for(state, "profile")
    device = typed(survey).box.device
    batch = typed(profile).batch
    profiled = typed(profile).setting.model_dump()
    plan = rewrite_plan(target, typed(survey).box.sm)
    setting = Setting(f"{profiled['label']} + split-K",
                      {**profiled["env"], target.engine.attention_env: "splitk", **plan["env"]}, dict(profiled["options"]))
    reference = Setting(profiled["label"], dict(profiled["env"]), dict(profiled["options"]))
    seqs: list[int] = []
    run, call_rows = _run_checked(session, target, device, batch, setting, seqs, plan)
    checked = len(seqs)
    interval, pairs, runs, output = _alternate(session, target, device, batch, reference, setting, run, seqs)
    figures = _compare(session, profile, run, batch)
    # the rounds' figures (tok/s, the ratio and its interval) are computed from the sweep's lines alone
    figures.update(interval=interval, pairs=len(pairs), measured_x=interval.ratio, sweep_seqs=seqs[checked:],
                   measured_tok_s=runs["splitk_tok_s"], rounds_reference_tok_s=runs["reference_tok_s"])
    numbers = _numbers(target, profile, run, call_rows, figures, profiled["label"])

    # Hold the measurement against the ceiling's bounds and the predictions, with this comparison's noise.
    held_data = {"measured_interval": [interval.low, interval.high] if interval.low is not None else None,
                 "measured_interval_basis": _basis(interval, len(pairs)), "vanished_kernels": figures["gone"],
                 "launches_per_step": figures["launches"], "prediction_intervals": figures["prediction_intervals"],
                 "profiler_stretch": figures["stretch"]}
    interim = Draft(headline="", verdict="", numbers=numbers, data=held_data).numbered(state, "splitk")
    held = consistency.check(findings_of(state) + [interim], target.model_dump(mode="json"))
    mine = [c for c in held.checks if c.measurement == "split-K rewrite"]
    violated = [c for c in mine if c.verdict == "violated"]
    # the step's own predictions (from the profiles); the options' earlier estimate is held in the report
    missed = [c for c in mine if c.verdict == "missed" and c.claim_finding == interim.stem]
    verdict = "model-failed" if violated else ("prediction-missed" if missed else "prediction-holds")
    refs = {ref["name"]: ref for ref in run["artifacts"]}
    return Draft(
        headline=_headline(figures, output, violated, missed, mine, plan["short"]), verdict=verdict, numbers=numbers,
        tables=_tables(figures, call_rows, throughput(run, batch)["step_ms"], output, target.thresholds.noise.output_rtol,
                       profiled["label"], plan, run["seq"]),
        artifacts={"trace": refs[run["data"]["trace"]["file"]]["path"],
                   **({"eager_trace": refs[run["data"]["trace"]["eager_file"]]["path"]}
                      if run["data"]["trace"].get("eager_file") in refs else {})},
        evidence=sorted(set(seqs)), labels=interpretation_labels(state),
        data={"setting": {"label": setting.label, "env": setting.env, "options": setting.options}, "plan": plan,
              "calls": call_rows, "kernel_speedup": figures["kernel_speedup"], "operation_speedup": figures["op_speedup"],
              "kernel_speedup_interval": figures["kernel_speedup_interval"],
              "operation_after": figures["attribution"], "predicted_x": figures["predicted_x"], "predicted_operation_x": figures["predicted_op_x"],
              "measured_x": figures["measured_x"], "measured_interval": held_data["measured_interval"],
              "measured_interval_basis": held_data["measured_interval_basis"], "runs_ms": runs,
              "vanished_kernels": figures["gone"], "launches_per_step": figures["launches"], "dominant_after": figures["now"],
              "prediction_intervals": figures["prediction_intervals"], "profiler_stretch": figures["stretch"], "output": output,
              "checks": [c.model_dump(mode="json") for c in mine],
              # the box's names for the kernels round 2 shows from this run's trace (none from an older journal)
              **kernel_names_of(run["data"].get("kernel_names"), figures["shown"])},
    )


def _run_checked(session: Session, target: Target, device: str, batch: int, setting: Setting,
                 seqs: list[int], plan: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
    """The engine profiled with the rewrite, and the rewrite checked at each call it made (check_calls);
    fails when the engine fails, reports no call, or the kernel fails a check."""
    run = session.call("engine.bench", bench_args(target, device, setting, [batch],
                                                  profile={"batch": batch, "steps": target.profile.steps}))
    seqs.append(run["seq"])
    if not run["ok"]:
        raise StepFailed(f"the engine failed with the split-K kernel: {run['error']}")
    calls = engine_calls(run, batch)
    if not calls:
        raise StepFailed("the engine reported no attention calls to check the split-K kernel at")
    call_rows, problems = check_calls(session, calls, device, seqs, plan)
    if problems:
        raise StepFailed("the split-K kernel failed its check at the engine's calls: " + "; ".join(problems))
    return run, call_rows


def _alternate(session: Session, target: Target, device: str, batch: int, reference: Setting, setting: Setting,
               run: dict[str, Any], seqs: list[int]) -> tuple[stats.Interval, list[tuple[float, float]], dict, dict]:
    """The speedup's interval: more runs of both settings, alternating (runs are the unit of noise).
    Returns the interval, the paired step times, the runs' record (``runs_ms``) and the output check;
    fails when no round measured both or the output with split-K differs from the profiled setting's."""
    noise = target.thresholds.noise
    rounds = noise.rewrite_rounds
    # The profiled runs (the profile step's and this step's first) are left out, as a sweep's warm-up:
    # the first run of a new kernel in a process pays for its compile and cold caches. The rounds run
    # in one engine process (engine.sweep), alternating the two settings after one warm-up of each.
    plan = [("reference#warmup", reference), ("splitk#warmup", setting)]
    for r in range(1, rounds + 1):
        plan += [(f"reference#r{r}", reference), (f"splitk#r{r}", setting)]
    swept = run_sweep(session, target, device, plan, batch)
    seqs.extend(swept.get("seqs") or [swept["seq"]])
    if not swept["ok"]:
        raise StepFailed(f"the rounds alternating the profiled setting and split-K failed: {swept['error']}")
    measured_runs = sweep_runs([{} for _ in plan], [label for label, _ in plan], swept, batch)
    pairs: list[tuple[float, float]] = []
    runs: dict[str, Any] = {"reference": [], "splitk": [], "profiled_splitk_ms": _run_ms(run, batch),
                            "sweep_seq": swept["seq"]}
    scales = []
    for a, b in zip(measured_runs[2::2], measured_runs[3::2]):
        if a["ok"] and b["ok"]:
            pairs.append((a["step_ms"], b["step_ms"]))
            runs["reference"].append(a["step_ms"])
            runs["splitk"].append(b["step_ms"])
            scales.append(b["scale"])
    interval = stats.paired_interval(pairs, noise.confidence)
    if interval.ratio is None:
        raise StepFailed(f"no round measured both the profiled setting and split-K ({rounds} tried)")
    # Each setting's tok/s is what its own runs in these rounds measured: the run of median step time,
    # projected as the engine projects every run (tok/s x step ms is one scale at this batch and depth),
    # so round 2's T (the median split-K step) and its tok/s are one and the same run's figures.
    runs["splitk_tok_s"] = rounds_tok_s(scales, runs["splitk"])
    runs["reference_tok_s"] = rounds_tok_s(scales, runs["reference"])
    # The engine's answer with the rewrite against the profiled setting's, as every lever's is checked.
    ref_sketch = next((a["sketch"] for a in measured_runs[2::2] if a["ok"] and a.get("sketch")), None)
    output = output_check(ref_sketch, [b.get("sketch") for b in measured_runs[3::2] if b["ok"]], noise.output_rtol)
    if output["ok"] is False:
        raise StepFailed(f"the engine's output with split-K differs from the profiled setting's: median row "
                         f"{100 * output['error']:.3g}% beyond {100 * noise.output_rtol:.0f}% (engine.sweep, log line "
                         f"{swept['seq']}): a fast wrong answer is no option")
    return interval, pairs, runs, output


def _compare(session: Session, profile: Finding, run: dict[str, Any], batch: int) -> dict[str, Any]:
    """The two profiles compared: the dominant kernel's and its operation's time before and after, the
    Amdahl predictions from those speedups (with their intervals), the launches a step, the kernels
    gone, the profiler's stretch of each step and the largest kernel now."""
    refs = {ref["name"]: ref for ref in run["artifacts"]}
    split_summary = trace.summarize([session.artifact_path(refs[run["data"]["trace"]["file"]])])
    before_kernels = typed(profile).summary["merged"]["kernels"]
    after_kernels = [k.to_dict() for k in split_summary.merged.kernels]
    dominant = typed(profile).dominant
    times = profile_times(profile)
    steps, window = times["steps"], times["window_ms"]
    t_before = dominant.total_us / 1000
    t_after = replacement_time_us(before_kernels, after_kernels, dominant.name) / 1000
    kernel_speedup = t_before / t_after if t_after else None
    op_before = times["operation_ms"]
    op_after_us, attribution = operation_us(session, run, split_summary, before_kernels) if op_before is not None else (None, {})
    op_speedup = op_before / (op_after_us / 1000) if op_before and op_after_us else None
    # the operation (from the eager twin where the run was graph-replayed) and its kernels (from the replay) are
    # two traces: where the operation reads shorter than its own kernels, that is their difference, and said
    below = t_after - op_after_us / 1000 if op_after_us is not None and op_after_us / 1000 < t_after else None
    predicted_x = amdahl(window, t_before, kernel_speedup) if kernel_speedup else None
    predicted_op_x = amdahl(window, op_before, op_speedup) if op_speedup else None
    prediction_intervals = {key: _prediction_interval(times, part, x, s)
                            for key, part, x, s in (("predicted_x", t_before, predicted_x, kernel_speedup),
                                                    ("predicted_operation_x", op_before, predicted_op_x, op_speedup))
                            if x is not None}
    launches = {"before": sum(k["calls"] for k in before_kernels) / steps,
                "after": sum(k["calls"] for k in after_kernels) / steps}
    gone = [k for k in vanished_kernels(before_kernels, after_kernels) if k["name"] != dominant.name]
    # How much the profiler stretched each setting's step (its in-step window against the step timed
    # without it): speedups read from two profiles carry both stretches.
    after_window = split_summary.merged.in_step_window_us / 1000 / (split_summary.merged.steps or steps)
    stretch = ({"before": window / steps / profile.number("timed_step_ms"),
                "after": after_window / _run_ms(run, batch), "before_window_ms": window / steps,
                "before_timed_ms": profile.number("timed_step_ms"), "after_window_ms": after_window,
                "after_timed_ms": _run_ms(run, batch)} if after_window > 0 else None)
    now = split_summary.merged.kernels[0].to_dict() if split_summary.merged.kernels else None
    # the kernels round 2's tables show from this trace: its top ones and those the rewrite brought
    shown = [k["name"] for k in after_kernels[:SHOWN_KERNELS]] + [k["name"] for k in after_kernels
                                                                  if k["name"] not in {b["name"] for b in before_kernels}]
    after_windows = [w.window_us / 1000 for w in split_summary.merged.step_windows]
    kernel_interval = _ratio_interval(kernel_speedup, times["step_windows_ms"], after_windows)
    return {"kernel_speedup_interval": kernel_interval,"dominant": dominant.name, "t_before": t_before, "t_after": t_after, "kernel_speedup": kernel_speedup,
            "op_before": op_before, "op_after_us": op_after_us, "attribution": attribution, "op_speedup": op_speedup,
            "predicted_x": predicted_x, "predicted_op_x": predicted_op_x, "prediction_intervals": prediction_intervals,
            "launches": launches, "gone": gone, "stretch": stretch, "now": now, "op_below_kernels_ms": below,
            "op_source": attribution.get("source"), "shown": shown,
            "baseline_tok_s": profile.number("setting_tok_s")}


def _numbers(target: Target, profile: Finding, run: dict[str, Any], call_rows: list[dict], figures: dict[str, Any],
             profiled: str) -> dict[str, Number]:
    interval, noise, rounds = figures["interval"], target.thresholds.noise, sorted(set(figures["sweep_seqs"]))
    profiles = [run["seq"]] + profile.evidence
    numbers = {
        "kernel_speedup": Number(value=figures["kernel_speedup"], unit="x", label=f"{kernel_label(figures['dominant'], typed(profile).kernel_names, None)} time / the kernels that replaced it (profiles)", seqs=profiles),
        "predicted_x": Number(value=figures["predicted_x"], unit="x", label="Amdahl with the kernel's measured speedup (shares of W)", seqs=profiles),
        "measured_x": Number(value=figures["measured_x"], unit="x", label=f"engine tok/s with split-K / {profiled}: geometric mean over {figures['pairs']} paired round(s)", seqs=rounds,
                             spread=_half_width(interval)),
        "measured_low_x": Number(value=interval.low, unit="x", label=f"{100 * noise.confidence:.0f}% interval, low", seqs=rounds),
        "measured_high_x": Number(value=interval.high, unit="x", label=f"{100 * noise.confidence:.0f}% interval, high", seqs=rounds),
        "splitk_tok_s": Number(value=figures["measured_tok_s"], unit="tok/s", label=f"engine with split-K, measured: its run of median step time among the {figures['pairs']} alternating rounds (projected to {target.model.layers} layers)", seqs=rounds),
        "rounds_reference_tok_s": Number(value=figures["rounds_reference_tok_s"], unit="tok/s", label=f"engine, {profiled}, measured: its run of median step time among the same rounds (projected to {target.model.layers} layers)", seqs=rounds),
        "launches_before": Number(value=figures["launches"]["before"], unit="launches/step", label="kernel launches a step, profiled setting", seqs=profile.evidence),
        "launches_after": Number(value=figures["launches"]["after"], unit="launches/step", label="kernel launches a step, with split-K", seqs=[run["seq"]]),
        "check_out_rel_err": Number(value=max((worst_error(r["check"] or {}, "out_norm_rel") or 0) for r in call_rows), label="worst norm-wise relative error of the output vs float32, over the engine's calls", seqs=[r["check_seq"] for r in call_rows]),
        "check_lse_abs_err": Number(value=max((worst_error(r["check"] or {}, "lse_max_abs") or 0) for r in call_rows), label="worst LSE error vs float32, over the engine's calls", seqs=[r["check_seq"] for r in call_rows]),
    }
    if figures["predicted_op_x"] is not None:
        numbers["operation_speedup"] = Number(value=figures["op_speedup"], unit="x", label="the attention operation's time before / after (profiles)", seqs=profiles)
        numbers["predicted_operation_x"] = Number(value=figures["predicted_op_x"], unit="x", label="Amdahl with the operation's measured speedup (shares of W)", seqs=profiles)
    if figures["now"]:
        numbers["dominant_after_share"] = Number(value=figures["now"]["share"], unit="fraction", label=f"{kernel_label(figures['now']['name'], run['data'].get('kernel_names'), None)}: the largest kernel with split-K", seqs=[run["seq"]])
    return numbers


def _headline(figures: dict[str, Any], output: dict[str, Any], violated: list, missed: list, mine: list,
              plan_short: str = "") -> str:
    predicted_x, predicted_op_x, interval = figures["predicted_x"], figures["predicted_op_x"], figures["interval"]
    pred = f"predicts {predicted_op_x:.3g}x from the operation, {predicted_x:.3g}x from the kernel" if predicted_op_x else (
        f"predicts {predicted_x:.3g}x from the kernel" if predicted_x else "has no prediction")
    # the measurement to the digits at which it, its interval and the bounds it is held against read apart
    spec = digit_spec([figures['measured_x'], interval.low, interval.high, *(c.claim_x for c in mine)])
    ival = f" [{interval.low:{spec}}, {interval.high:{spec}}]" if interval.low is not None else ""
    what = f"split-K ({plan_short})" if plan_short else "split-K"
    headline = (f"{what}: {figures['dominant']} {figures['kernel_speedup']:.3g}x faster in the profile; Amdahl {pred}; the engine "
                f"measured {figures['measured_x']:{spec}}x{ival} ({figures['rounds_reference_tok_s']:.3g} -> {figures['measured_tok_s']:.3g} tok/s in the same rounds, projected)"
                if figures["kernel_speedup"] else f"{what}: the replacement kernels were not found in the trace")
    if output["ok"] is None:
        headline += f"; engine output not checked ({output['note']})"
    elif output.get("rows_beyond"):
        headline += f"; engine output: {output['note']}"
    if violated:
        headline += f"; above the bound {violated[0].claim_x:.3g}x ({violated[0].claim}): the model failed"
    elif missed:
        headline += "; the prediction missed"
    return headline + _held_text(mine, missed)


def _held_text(mine: list, missed: list) -> str:
    """What the headline adds from the consistency check: bounds the measurement cannot be separated
    from, the options' earlier estimate when it missed, and predictions that hold only by overlap."""
    text = ""
    close = sorted({c.claim_x for c in mine if c.kind == "bound" and c.verdict == "within noise of the bound"})
    if close:
        text += f"; within noise of the bound {', '.join(f'{x:.4g}x' for x in close)} (its interval reaches it)"
    earlier = [c for c in mine if c.verdict == "missed" and c not in missed]
    if earlier:
        text += f"; the options' estimate {earlier[0].claim_x:.3g}x missed"
    loose = [c for c in mine if c.kind == "prediction" and c.verdict == "holds" and c.note.startswith(consistency.LOOSE)]
    if loose:
        text += f"; the prediction holds only by overlap of wide intervals ({loose[0].note.split(': ', 1)[1].split(', so')[0]})"
    return text


def _tables(figures: dict[str, Any], call_rows: list[dict], step_ms: float, output: dict[str, Any], rtol: float,
            profiled: str, plan: dict[str, Any], run_seq: int | None = None) -> list[Table]:
    """The rewrite against the original, and the engine's calls as checked and timed (each row's log: the
    engine's run that recorded the call, ``run_seq``, with its configs and splits, then the call's check and bench)."""
    rows = [
        [f"{figures['dominant']} in the profile (ms)", figures["t_before"], figures["t_after"], figures["kernel_speedup"]],
        *([["the attention operation in the profile (ms)", figures["op_before"], figures["op_after_us"] / 1000, figures["op_speedup"]]]
          if figures["op_speedup"] else []),
        [f"engine tok/s ({profiled}), measured in the alternating rounds, projected", figures["rounds_reference_tok_s"],
         figures["measured_tok_s"], figures["measured_x"]],
        ["kernel launches a step", figures["launches"]["before"], figures["launches"]["after"], None],
    ]
    call_table = [[call_label(r["call"]), r["call"].get("calls_per_step"), r["call"].get("config"),
                   r["call"].get("splits"),
                   "one launch with the window" if r["call"].get("fused") else r["call"].get("extra_config"),
                   None if r["call"].get("fused") else r["call"].get("extra_splits"),
                   worst_error(r["check"] or {}, "out_norm_rel"),
                   (r.get("bench") or {}).get("upstream_graph_us"), (r.get("bench") or {}).get("rewrite_graph_us"),
                   (r.get("bench") or {}).get("speedup_vs_upstream"),
                   _share_of_step(r, step_ms), ", ".join(str(s) for s in (run_seq, r["check_seq"], r.get("bench_seq")) if s)]
                  for r in call_rows]
    what_if = any("box_bench_seq" in r for r in call_rows)
    if what_if:  # the box's own plan, timed beside the declared one: this box only, never the decision's number
        for line, r in zip(call_table, call_rows):
            line[-1:-1] = [(r.get("box_bench") or {}).get("rewrite_graph_us"), r.get("box_bench_seq")]
    return [Table(title="Split-K against the original", columns=["measure", "original", "split-K", "ratio"], rows=rows,
                  note=(f"split-K: the rewrite as {plan['text']}; original: the profiled setting as this box runs it; "
                        if plan["arch"] else "") + _two_traces_text(figures) +
                       f"measured: {_basis(figures['interval'], figures['pairs'])}; kernel and operation times from the two profiles; "
                       f"tok/s: each setting's run of median step time in those rounds (projected to the model's layers); ratio: "
                       f"the geometric mean of the paired rounds' ratios; "
                       + _output_text(output, rtol)),
            Table(title="The engine's attention calls, checked and timed as the engine made them",
                  columns=["call", "calls a step", "config", "splits", "compressed config", "compressed splits", "error vs float32",
                           "upstream us", "split-K us", "speedup", "share of the step",
                           *(["what-if: this box's own plan us", "its log"] if what_if else []), "log"], rows=call_table,
                  note=f"the rewrite as {plan['text']}; " + (
                       f"what-if: the box's own plan (sm_{plan['box_sm']}: wgmma and Gluon kernels) timed at the same call, "
                       f"on this box only, never the deployment's number; " if what_if else "") +
                       "each distinct call of one decode step, in its own form (caches, sink, index widths) and "
                       "with the configurations the wrapper chose (the window cache's, the compressed cache's; \"one launch with the window\": both "
                       "caches in one launch, on the config and split count of their joined row); us: CUDA-graph replay medians on the box; share: "
                       "split-K us x calls a step / the split-K engine's timed step; log: the engine's run that recorded the call "
                       "(its calls a step, configs and splits), then the call's check (error) and bench (us)")]


def _two_traces_text(figures: dict[str, Any]) -> str:
    below = figures.get("op_below_kernels_ms")
    if below is None:
        return ""
    return (f"the attention operation with split-K ({figures['op_after_us'] / 1000:.6g} ms, {figures.get('op_source') or 'its trace'}) "
            f"reads {1000 * below:.3g} us shorter than the kernels that replaced the original ({figures['t_after']:.6g} ms, the "
            f"profiled trace): an operation holds its kernels, so this is the two traces' difference, and the operation's "
            f"speedup is known to it; ")


def _output_text(output: dict[str, Any], rtol: float) -> str:
    if output["ok"] is None:
        return f"engine output not checked: {output['note']}"
    text = f"engine output within {100 * rtol:.0f}% of the profiled setting's (median row {100 * output['error']:.2g}%)"
    return text + (f"; {output['note']}" if output.get("rows_beyond") else "")


def _prediction_interval(times: dict[str, Any], part_ms: float, x: float, speedup: float) -> list[float] | None:
    """A prediction's interval from what it rests on: the rest of the step plus the part's new time,
    ``R + t/s`` a step, varies at most as the profiled steps' windows do."""
    windows = times["step_windows_ms"]
    if len(windows) < 2:
        return None
    remaining = (times["window_ms"] - part_ms + part_ms / speedup) / times["steps"]
    spread = stdev(windows) / remaining if remaining > 0 else None
    return [x / (1 + spread), x * (1 + spread)] if spread is not None else None


def _ratio_interval(ratio: float | None, before: list[float], after: list[float]) -> list[float] | None:
    """A ratio of two profiles' times known to the profiled steps' variation on each side: each side's
    windows' relative standard deviation, added (the profiles are one run each, so this is their
    step-to-step spread, not a confidence interval)."""
    if ratio is None or len(before) < 2 or len(after) < 2:
        return None
    spread = stdev(before) / mean(before) + stdev(after) / mean(after)
    return [ratio / (1 + spread), ratio * (1 + spread)]


def _half_width(interval: stats.Interval) -> float | None:
    if interval.low is None or not interval.ratio:
        return None
    return (interval.high - interval.low) / 2 / interval.ratio


def _basis(interval: stats.Interval, pairs: int) -> str:
    if interval.low is None:
        return f"{pairs} paired run(s): {interval.note or 'no interval'}"
    return (f"{100 * interval.confidence:.0f}% t-interval over {pairs} rounds alternating the profiled setting and "
            f"split-K in one engine process after a warm-up of each (runs are the unit)"
            + (f"; {interval.note}" if interval.note else ""))


def _share_of_step(row: dict[str, Any], step_ms: float) -> float | None:
    bench = row.get("bench") or {}
    if not bench.get("rewrite_graph_us") or not step_ms:
        return None
    return bench["rewrite_graph_us"] * row["call"].get("calls_per_step", 1) / 1000 / step_ms
