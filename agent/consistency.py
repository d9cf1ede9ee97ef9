"""The consistency check: every measurement against every bound the run stated for the same setting,
and every prediction against its measurement, each with the noise of that comparison.

A bound on speeding up an operation ("the attention call instant gives at most 2.7x") applies to
every measurement whose setting differs from the bound's reference setting only in that operation:
another attention backend (a lever), the built rewrite, a what-if backend. A measurement whose
interval lies wholly above such a bound is a finding about the model (the bound was wrong), never a
hit; so is a prediction outside its measurement's interval. The check reads findings only (and,
for runs recorded before findings carried their runs' samples, an optional look-up of the journal's
step samples), so it runs the same live, on replay, and on an old journal.
"""

from __future__ import annotations


from typing import Any, Callable, Iterable

from agent.causes import causes_of
from agent.evidence import Option, data_of
from agent.steps.diagnosis import call_text
from reports.format import fmt
from schema.consistency import KERNEL_MEASUREMENT, Bound, Check, Consistency, Measurement, Prediction, Setting
from schema.finding import Finding, value_of

# Backends whose kernels run under Triton's interpreter on a CPU box (the others run natively there).
TRITON_BACKENDS = {"sglang-triton", "splitk"}
# Values of the attention environment variable -> reference-engine backend (agent.engine_runs keeps the same map).
ENV_BACKENDS = {"triton": "sglang-triton", "torch": "torch", "splitk": "splitk", "flashinfer": "flashinfer"}

SampleLookup = Callable[[int], list[float] | None]


# -- what the findings state -----------------------------------------------------------------


def _by_step(findings: Iterable[Finding]) -> dict[str, Finding]:
    return {f.step: f for f in findings}


def _seqs(f: Finding, *keys: str) -> list[int]:
    return sorted({s for k in keys if k in f.numbers for s in f.numbers[k].seqs})


def profiled_setting(profile: Finding) -> Setting:
    s = data_of(profile).setting
    return Setting(label=s.label, env=dict(s.env), options=dict(s.options))


def backend_of(setting: Setting, attention_env: str) -> str | None:
    if setting.backend:
        return setting.backend
    value = setting.env.get(attention_env)
    return ENV_BACKENDS.get(value, value) if value is not None else None


def bounds_of(findings: list[Finding]) -> list[Bound]:
    """Every ceiling's bounds (each on the setting the profile before it explained: a run that went
    on from a better setting has two) and the options' bounds, on the last profiled setting."""
    bounds, profile = [], None
    by = _by_step(findings)
    note = layer_mix_note(by.get("levers"))
    for f in findings:
        if f.step == "profile":
            profile = f
        elif f.step == "ceiling" and profile is not None:
            bounds += _ceiling_bounds(profile, f, None, note=note)
    if by.get("options") is not None and by.get("profile") is not None and by.get("ceiling") is not None:
        bounds += _ceiling_bounds(by["profile"], by["ceiling"], by["options"], options_only=True, note=note)
    return bounds


def _ceiling_bounds(profile: Finding, ceiling: Finding, options: Finding | None, options_only: bool = False,
                    note: str = "") -> list[Bound]:
    reference = profiled_setting(profile)
    tok_s = value_of(ceiling, "baseline_tok_s")
    kernel = data_of(ceiling).kernel
    operation = (data_of(ceiling).operation or {}).get("name")
    stem = ceiling.stem
    bounds = []
    candidates = [
        # (number key, scope, what is instant, T)
        # runs since 2026-12: shares of W (the profiled steps' window), applied to the step timed without the profiler
        ("kernel_instant_x", "kernel", kernel, "shares of W, over the step timed without the profiler"),
        ("operation_instant_x", "operation", operation, "shares of W, over the step timed without the profiler"),
        ("instant_speedup", "kernel", kernel, "T the profiled window"),
        ("timed_instant_speedup", "kernel", kernel, "T the step timed without the profiler"),
    ]
    seen = set()
    ranges = {scope: _model_range(ceiling, scope) for scope in ("kernel", "operation")}
    for key, scope, what, basis in ([] if options_only else candidates):
        x = value_of(ceiling, key)
        if x is None or what is None or (scope, round(x, 12)) in seen:
            continue
        seen.add((scope, round(x, 12)))
        bounds.append(Bound(name=f"{what} instant ({basis})", finding=stem, scope=scope, operation=what,
                            reference=reference, reference_tok_s=tok_s, x=x, basis=ceiling.numbers[key].label,
                            seqs=ceiling.numbers[key].seqs, spread=ceiling.numbers[key].spread,
                            model_range=_scaled(ranges[scope], value_of(ceiling, f"{scope}_instant_x"), x), model_note=note))
    if options is not None:
        ref_tok_s = value_of(profile, "setting_tok_s") or tok_s
        for option in data_of(options).options:
            if option.name == "accept-ceiling" or not option.offered or option.upper_x is None:
                continue
            # every option's bound speaks for anything that replaces the operation: a backend lever, a what-if
            # backend, the rewrite (a FlashMLA above the floors of owning the stack is a finding about them)
            applies = "any"
            scope = "operation" if "operation" in option.bound_from else "kernel"
            bounds.append(Bound(name=f"option {option.name}: {option.bound_from}".strip(), finding=options.stem,
                                scope=scope, operation=kernel, reference=reference, reference_tok_s=ref_tok_s,
                                x=option.upper_x, basis=option.bound_from, applies_to=applies,
                                spread=ceiling.numbers["ceiling_tok_s"].spread if "ceiling_tok_s" in ceiling.numbers else None,
                                model_range=_scaled(ranges[scope], value_of(ceiling, f"{scope}_instant_x"), option.upper_x),
                                model_note=note))
    return bounds


def _model_range(ceiling: Finding, scope: str) -> tuple[float, float | None] | None:
    """The ceiling's stated range for its bound; a low end alone is a range with no top (None): the profiler's
    stretch of the step exceeded the rest of it."""
    low, high = value_of(ceiling, f"{scope}_instant_low_x"), value_of(ceiling, f"{scope}_instant_high_x")
    return (low, high) if low is not None else None


def _scaled(known: tuple[float, float] | None, stated: float | None, x: float) -> tuple[float, float] | None:
    """The ceiling's range for its own bound ``stated``, carried to a bound ``x`` that rests on the same profile
    (an option restating it, or one built on it): the same relative ends."""
    if known is None or not stated:
        return None
    return (x * known[0] / stated, None if known[1] is None else x * known[1] / stated)


def layer_mix_note(levers: Finding | None) -> str:
    """What the bound's model does not count: the layers the engine ran against the model's mix (the sweep's
    extrapolation; the shares are the run layers', the layer types not run are not measured, nor estimated here)."""
    engine = (data_of(levers).extrapolation or {}) if levers is not None else {}
    run, model = engine.get("run_mix"), engine.get("model_mix")
    if not run or not model or run == model:
        return ""
    kinds = {"0": "window-only", "4": "c4", "128": "c128"}
    mix = lambda m: ", ".join(f"{m[r]} {kinds.get(r, 'ratio ' + r)}" for r in sorted(m, key=int))  # noqa: E731
    missing = [kinds.get(r, r) for r in model if r not in run]
    return (f"its shares are the layers run ({mix(run)}), not the model's mix ({mix(model)})"
            + (f"; the {', '.join(missing)} layers were not run, and are not estimated" if missing else ""))


def _samples_interval(ref: list[float], other: list[float]) -> tuple[float, float] | None:
    """Throughput ratio range from the step samples of one run each: ref step over other step."""
    if not ref or not other:
        return None
    return min(ref) / max(other), max(ref) / min(other)


def measurements_of(by: dict[str, Finding], target: dict[str, Any], samples: SampleLookup | None = None) -> list[Measurement]:
    """Every measured setting the findings hold, each against the setting it was compared with."""
    profile = by.get("profile")
    survey = by.get("survey")
    if profile is None:
        return []
    attention_env = (target.get("engine") or {}).get("attention_env", "SGLANG_SM120_FLASHMLA_BACKEND")
    on_cpu = bool(survey and data_of(survey).box.device == "cpu")
    profiled = profiled_setting(profile)
    profiled_samples = _lookup(samples, profile.numbers.get("setting_tok_s"))

    def interpreted(setting: Setting) -> bool:
        return on_cpu and backend_of(setting, attention_env) in TRITON_BACKENDS

    found: list[Measurement] = []
    levers = by.get("levers")
    if levers is not None:
        engine_env = dict((target.get("engine") or {}).get("env") or {})
        baseline = Setting(label="baseline", env=engine_env, options=dict(data_of(levers).baseline_options))
        declared = {lever["name"]: lever for lever in target.get("levers", [])}
        base_tok_s = value_of(levers, "baseline_tok_s")
        for result in data_of(levers).levers:
            if result.tok_s is None or result.name not in declared:
                continue
            lever = declared[result.name]
            setting = Setting(label=result.name, env={**engine_env, **(lever.get("env") or {})},
                              options={**baseline.options, **(lever.get("options") or {})})
            interval = tuple(result.interval) if result.interval else None
            found.append(Measurement(
                name=f"lever {result.name}", finding=levers.stem, setting=setting, reference=baseline,
                backend=backend_of(setting, attention_env), interpreted=interpreted(setting),
                reference_interpreted=interpreted(baseline), tok_s=result.tok_s,
                x=result.ratio or result.tok_s / base_tok_s, interval=interval,
                noise=result.interval_basis if "interval_basis" in result.model_fields_set else ("" if interval else "no interval recorded"),
                seqs=list(result.seqs or ([result.seq] if result.seq else []))))
    gates = by.get("gates")
    for row in ((data_of(gates).what_if or {}).get("measured") or []) if gates else []:
        record = _what_if_row(row)
        if record.get("x") is None:
            continue  # a failed what-if measured nothing to hold against a bound
        if not record.get("seq") and samples is not None:
            # rows recorded before they named their call: the gates step's one engine run is the what-if's
            runs = [s for s in gates.evidence if samples(s)]
            record["seq"] = runs[0] if len(runs) == 1 else None
        setting = profiled.model_copy(update={"label": f"what-if {record['backend']}", "backend": record["backend"]})
        interval = tuple(record["interval"]) if record.get("interval") else None
        noise = record.get("interval_basis", "")
        if interval is None and samples is not None and record.get("seq"):
            interval = _samples_interval(profiled_samples or [], samples(record["seq"]) or [])
            noise = "range of the step samples of one run each (run-to-run noise not measured)" if interval else ""
        found.append(Measurement(
            name=f"what-if {record['backend']}", finding=gates.stem, setting=setting, reference=profiled,
            backend=record["backend"], what_if=True, interpreted=interpreted(setting),
            reference_interpreted=interpreted(profiled), tok_s=record["tok_s"], x=record["x"], interval=interval,
            noise=noise or "no interval recorded", seqs=[record["seq"]] if record.get("seq") else []))
    splitk = by.get("splitk")
    if splitk is not None and value_of(splitk, "splitk_tok_s") is not None:
        setting = profiled.model_copy(update={"label": f"{profiled.label} + split-K",
                                              "env": {**profiled.env, attention_env: "splitk"}})
        interval = tuple(data_of(splitk).measured_interval) if data_of(splitk).measured_interval else None
        noise = data_of(splitk).measured_interval_basis
        if interval is None and samples is not None:
            # the step samples of the split-K step's engine run (its first line that has any: the tok/s cites the
            # rounds' sweep, and an older journal's kernel checks came before the run)
            run_samples = next((found for found in map(samples, splitk.evidence) if found), None)
            interval = _samples_interval(profiled_samples or [], run_samples or [])
            noise = "range of the step samples of one run each (run-to-run noise not measured)" if interval else ""
        found.append(Measurement(
            name="split-K rewrite", finding=splitk.stem, setting=setting, reference=profiled, backend="splitk",
            interpreted=interpreted(setting), reference_interpreted=interpreted(profiled),
            tok_s=value_of(splitk, "splitk_tok_s"), x=value_of(splitk, "measured_x"), interval=interval,
            noise=noise or "no interval recorded", seqs=_seqs(splitk, "splitk_tok_s", "measured_x")))
    return found


def _what_if_row(row: Any) -> dict[str, Any]:
    """A what-if measurement, from the gates finding's row (a list in runs before 2026-12, else a dict)."""
    if isinstance(row, dict):
        return row
    backend, _sm, tok_s, reference_tok_s, x, *_ = row
    return {"backend": backend, "tok_s": tok_s, "reference_tok_s": reference_tok_s, "x": x}


def _lookup(samples: SampleLookup | None, number: Any) -> list[float] | None:
    if samples is None or number is None or not number.seqs:
        return None
    return samples(number.seqs[0])


def predictions_of(by: dict[str, Finding]) -> list[Prediction]:
    """The split-K step's Amdahl predictions from the profiles, and the options step's estimate for the
    split-K option (made before the rewrite existed), each against the rewrite's measurement."""
    splitk = by.get("splitk")
    if splitk is None:
        return []
    found = []
    options = by.get("options")
    for option in (data_of(options).options if options else []):
        if option.name == "splitk" and option.estimate_x is not None:
            what = option.estimate_basis.split(" (")[0] or "its estimate"
            found.append(Prediction(name=f"option splitk estimate: {what}, the rest of the step as measured",
                                    finding=options.stem, predicted_x=option.estimate_x, interval=None,
                                    basis="the options step's estimate, before the rewrite was built",
                                    measurement="split-K rewrite", verdict_claimed=""))
    for key, basis in (("predicted_operation_x", "Amdahl over W with the operation's measured speedup; interval: "
                                                 "the profiled steps' window spread, not a confidence interval"),
                       ("predicted_x", "Amdahl over W with the kernel's measured speedup; interval: the profiled "
                                       "steps' window spread, not a confidence interval"),
                       ("predicted_timed_x", "Amdahl, the kernel's measured speedup, T timed")):
        x = value_of(splitk, key)
        if x is None:
            continue
        interval = (data_of(splitk).prediction_intervals or {}).get(key)
        found.append(Prediction(name=f"split-K {splitk.numbers[key].label}", finding=splitk.stem, predicted_x=x,
                                interval=tuple(interval) if interval else None, basis=basis,
                                measurement="split-K rewrite", verdict_claimed=splitk.verdict,
                                scope="operation" if key == "predicted_operation_x" else ""))
    return found


# -- holding them against each other ------------------------------------------------------------


def _applies(bound: Bound, m: Measurement, attention_env: str) -> bool:
    """A bound covers a measurement whose setting differs from the bound's reference only in the
    attention backend (the operation the bound speeds up), and whose class the bound speaks for."""
    diff = m.setting.differences(bound.reference)
    if not diff or not diff <= {attention_env, "backend"}:
        return False
    if bound.applies_to == "any":
        return True
    if bound.applies_to == "declared":
        return not m.what_if
    if bound.applies_to == "what-if":
        return m.what_if
    return m.backend == bound.applies_to


def _low(m: Measurement) -> float:
    return m.interval[0] if m.interval else m.x


def hold(bounds: list[Bound], measurements: list[Measurement], predictions: list[Prediction],
         attention_env: str, causes: dict[str, str] | None = None) -> list[Check]:
    """Every bound against every measurement it covers; every prediction against its measurement.
    ``causes`` (by measurement name, "*" for any) is what the run found about why its model may fail,
    set on each violation."""
    causes = causes or {}
    checks: list[Check] = []
    with_operation_bound = {b.reference.label for b in bounds if b.scope == "operation"}
    for m in measurements:
        for b in bounds:
            if not _applies(b, m, attention_env):
                continue
            base = dict(kind="bound", claim=b.name, claim_finding=b.finding, claim_x=b.x, claim_spread=b.spread, measurement=m.name,
                        measurement_finding=m.finding, measured_x=m.x, measured_interval=m.interval)
            if m.interpreted != m.reference_interpreted:
                checks.append(Check(**base, verdict="not comparable",
                                    note=("one side ran its Triton kernels under the CPU interpreter and the other "
                                          "ran natively: their ratio says nothing about either kernel")))
                continue
            if m.x <= b.x and m.interval is not None and m.interval[1] > b.x:
                checks.append(Check(**base, verdict="within noise of the bound", note=(
                    f"the point lies below the bound, its interval reaches above it: not separable ({m.noise})")))
                continue
            if m.x <= b.x:
                checks.append(Check(**base, verdict="holds", note=m.noise))
                continue
            if m.interval is not None and m.interval[0] <= b.x:
                checks.append(Check(**base, verdict="within noise of the bound", note=(
                    f"the point lies above the bound, its interval reaches below it: not separable ({m.noise})")))
                continue
            if b.model_range is not None and m.interval is not None and (
                    b.model_range[1] is None or m.interval[0] <= b.model_range[1]) and not (
                    b.scope == "kernel" and b.reference.label in with_operation_bound):
                # above the bound's point but not beyond what its model leaves it known to: not a failure
                checks.append(Check(**base, verdict="within the bound's model error", note=(
                    f"the interval's low end {m.interval[0]:.4g} is within the bound's model range "
                    f"[{b.model_range[0]:.4g}, {'unbounded' if b.model_range[1] is None else format(b.model_range[1], '.4g')}] "
                    f"(where the profiler's stretch of the step lies is "
                    f"not measured){'; ' + b.model_note if b.model_note else ''} ({m.noise})")))
                continue
            if b.scope == "kernel" and b.reference.label in with_operation_bound:
                # The backend replaced the whole operation, so the kernel-only bound does not cover it; the
                # operation's bound (held in its own row) does.
                checks.append(Check(**base, verdict="beyond the kernel bound", note=(
                    "the measurement replaced the whole operation, not only the kernel: held against the "
                    "operation's bound instead")))
                continue
            if m.interval is None:
                # One number above the bound without its noise: it may beat the bound or be within noise of it.
                checks.append(Check(**base, verdict="undetermined", note=(
                    f"measured without an interval ({m.noise}): whether it beats the bound is not known")))
                continue
            checks.append(Check(**base, verdict="violated", note=m.noise, cause=causes.get(m.name, causes.get("*", ""))))
    named = {m.name: m for m in measurements}
    for p in predictions:
        m = named.get(p.measurement)
        if m is None:
            continue
        base = dict(kind="prediction", claim=p.name, claim_finding=p.finding, claim_x=p.predicted_x,
                    claim_interval=p.interval, measurement=m.name, measurement_finding=m.finding,
                    measured_x=m.x, measured_interval=m.interval)
        lo, hi = m.interval or (m.x, m.x)
        plo, phi = p.interval or (p.predicted_x, p.predicted_x)
        if phi >= lo and plo <= hi:
            checks.append(Check(**base, verdict="holds", note=_loose(p.interval, m.interval) + m.noise))
        else:
            claimed = f"; the finding's verdict said {p.verdict_claimed}" if p.verdict_claimed else ""
            cause = causes.get(f"{m.name}/{p.scope}") if p.scope else None
            cause = cause if cause is not None else causes.get(m.name, causes.get("*", ""))
            checks.append(Check(**base, verdict="missed", note=m.noise + claimed, cause=cause))
    return checks


def estimated_call_row(option: Option, splitk: Finding) -> dict[str, Any] | None:
    """The split-K step's row for the engine call the options' kernel estimate was derived for (its batch, and
    its top-k width as the grid point read it: the call's compressed width where it has one, else its own),
    when that call was timed alone; None when the estimate names no call or no timed row matches."""
    call = option.estimate_call or {}
    shapes = call.get("shapes") or {}
    topk = shapes.get("topk")
    for row in data_of(splitk).calls or []:
        c, bench = row.get("call") or {}, row.get("bench") or {}
        width = c.get("extra_topk") or c.get("topk")
        if bench.get("speedup_vs_upstream") and c.get("batch") == call.get("batch") and topk is not None and width == topk:
            return row
    return None


def _call_measurement(row: dict[str, Any]) -> tuple[str, float, tuple[float, float] | None, str]:
    """The timed call's kernel speedup (upstream over rewrite, CUDA-graph replay) with the range its samples span."""
    c, bench = row["call"], row["bench"]
    up, rw = bench.get("upstream_samples_us") or [], bench.get("rewrite_samples_us") or []
    interval = (min(up) / max(rw), max(up) / min(rw)) if up and rw else None
    noise = (f"range of the call's timed samples ({len(up)} upstream, {len(rw)} rewrite, CUDA-graph replay): not a "
             "confidence interval" if interval else "one timing each: no interval")
    width = f"top-k {c.get('topk')}" + (f" + {c['extra_topk']} compressed" if c.get("extra_topk") else "")
    name = (f"split-K kernel alone, the call at batch {c.get('batch')}, {width} "
            f"({bench['upstream_graph_us']:.5g} -> {bench['rewrite_graph_us']:.4g} us)")
    return name, bench["speedup_vs_upstream"], interval, noise


def kernel_checks(by: dict[str, Finding]) -> list[Check]:
    """The options step's kernel-level estimate for the rewrite ("the kernel Nx faster"), held against the
    kernel speedup measured for the call it was derived for: the split-K step's timing of that call alone.
    A speedup pooled over calls (the profiles' kernel totals) is no measurement of one call's estimate: a
    call the estimate misses can hide behind another it does not speak for. An upper estimate the call's
    measurement beats (its whole range above) is "exceeded", a finding about the model, never a hit; an
    estimate with no side misses on either side."""
    options, splitk = by.get("options"), by.get("splitk")
    option = next((o for o in (data_of(options).options if options else []) if o.name == "splitk"), None)
    if option is None or option.estimate_kernel_x is None or splitk is None:
        return []
    claim_x, kind = option.estimate_kernel_x, option.estimate_kind or "upper estimate"
    call = option.estimate_call
    row = estimated_call_row(option, splitk)
    if row is None:
        return _untimed_call(by, option)
    name, measured, interval, noise = _call_measurement(row)
    if (row.get("call") or {}).get("extra_topk"):
        # the estimate is for one launch (the grid read one cache's kernel); the call's timing is both caches'
        # launches and the original's merge, which the rewrite joins: no timing of that launch alone to hold it to
        where = f" for the call at {call_text(call)}" if call.get("point") else ""
        return [Check(kind="bound" if kind == "upper estimate" else "prediction",
                      claim=f"option splitk: the kernel {claim_x:.3g}x faster ({kind}{where})", claim_finding=options.stem,
                      claim_x=claim_x, measurement=name, measurement_finding=splitk.stem, measured_x=measured,
                      measured_interval=interval, verdict="not comparable",
                      note=(f"the estimate is for one launch of the kernel (top-k {(call.get('shapes') or {}).get('topk')}), the "
                            f"call's timing is both its caches' launches and the original's merge, which the rewrite runs as "
                            f"{'one launch' if row['call'].get('fused') else 'its own launches'}: the bench timed the call, "
                            "not that launch alone (the two profiles time each launch, but this run does not match one "
                            f"launch across them: not checked here); {noise}"))]
    where = f" for the call at {call_text(call)}" if call.get("point") else ""
    base = dict(kind="bound" if kind == "upper estimate" else "prediction",
                claim=f"option splitk: the kernel {claim_x:.3g}x faster ({kind}{where})", claim_finding=options.stem,
                claim_x=claim_x, measurement=name, measurement_finding=splitk.stem, measured_x=measured, measured_interval=interval)
    lo, hi = interval or (measured, measured)
    if lo <= claim_x <= hi:
        return [Check(**base, verdict="holds" if kind != "upper estimate" else "within noise of the bound",
                      note=f"the call's range reaches the estimate ({noise})")]
    if hi < claim_x:
        verdict = "holds" if kind == "upper estimate" else "missed"
        return [Check(**base, verdict=verdict, note=noise,
                      cause="" if verdict == "holds" else f"the call measured {measured:.3g}x, below the estimate")]
    cause = (f"the call measured {measured:.3g}x, above the {kind} of {claim_x:.3g}x: "
             + ("its time did not follow what the estimate counts" if kind == "upper estimate" else
                "the estimate counted the loads alone; the rewrite also moved the reductions (a likely source of the MIO stalls) to "
                "tensor cores, which it did not count (the rewrite has no Nsight Compute capture: what its time follows is not measured)"))
    return [Check(**base, verdict="exceeded", note=noise, cause=cause)]


def _untimed_call(by: dict[str, Finding], option: Option) -> list[Check]:
    """The estimate's call was not timed alone (no GPU, or no row matches): the profiles' pooled kernel speedup
    stands for it only where the engine made that one call (or the estimate names none, as in older runs)."""
    splitk, call = by["splitk"], option.estimate_call
    calls = data_of(splitk).calls or []
    if not call or len(calls) <= 1:
        return _pooled_check(by, option)
    measured = value_of(splitk, "kernel_speedup")
    if measured is None:
        return []
    return [Check(kind="bound", claim=f"option splitk: the kernel {option.estimate_kernel_x:.3g}x faster "
                                      f"({option.estimate_kind or 'upper estimate'} for the call at {call_text(call)})",
                  claim_finding=by["options"].stem, claim_x=option.estimate_kernel_x, measurement=KERNEL_MEASUREMENT,
                  measurement_finding=splitk.stem, measured_x=measured, verdict="not comparable",
                  note=(f"the estimate is for one call; that call was not timed alone, and the profiles' kernel speedup "
                        f"pools the engine's {len(calls)} calls"))]


def _pooled_check(by: dict[str, Finding], option: Option) -> list[Check]:
    """For an estimate that names no call (runs recorded before estimates named theirs): the kernel speedup the
    two profiles measured, pooled over the calls, as before; the check's claim says it is pooled."""
    options, splitk, survey = by["options"], by["splitk"], by.get("survey")
    measured = value_of(splitk, "kernel_speedup")
    if measured is None:
        return []
    claim_x = option.estimate_kernel_x
    interval = tuple(data_of(splitk).kernel_speedup_interval) if data_of(splitk).kernel_speedup_interval else None
    noise = ("the two profiles' step-to-step window spread, added (one run each: not a confidence interval)"
             if interval else "no interval: one profile each")
    basis = ("bytes loaded / unique bytes" if "unique bytes" in (option.estimate_basis or "")
             else "the grid's structural estimate")
    base = dict(kind="bound", claim=f"option splitk: the kernel at most {claim_x:.3g}x faster (its upper estimate, {basis}; "
                                    "against the profiles' speedup, pooled over the calls)",
                claim_finding=options.stem, claim_x=claim_x, measurement=KERNEL_MEASUREMENT, measurement_finding=splitk.stem,
                measured_x=measured, measured_interval=interval)
    lo, hi = interval or (measured, measured)
    if hi <= claim_x:
        return [Check(**base, verdict="holds", note=noise)]
    if lo <= claim_x:
        return [Check(**base, verdict="within noise of the bound", note=f"the interval reaches the estimate: not separable ({noise})")]
    if interval is None:
        return [Check(**base, verdict="undetermined", note=f"measured without an interval ({noise})")]
    interpreted = bool(survey and data_of(survey).box.device == "cpu")
    cause = (f"the estimate is {basis}: it counts only what the kernel's programs load; the profiles measured the kernel "
             f"{measured:.3g}x faster, so its time did not follow those bytes"
             + ("; under the Triton CPU interpreter a kernel's time is the interpreter's cost of each program and "
                "operation, which a byte ratio does not model" if interpreted else ""))
    return [Check(**base, verdict="violated", note=noise, cause=cause)]


def _estimate_cause(by: dict[str, Finding], checks: list[Check], cause: str) -> str:
    """Why the options' step-level estimate missed, where the run can tell: the kernel factor it took
    against the one the profiles measured, and whether Amdahl with the measured factor holds (then the
    miss is the kernel estimate's alone, not the rest of the step's)."""
    option = next((o for o in (data_of(by["options"]).options if by.get("options") else []) if o.name == "splitk"), None)
    measured, estimated = value_of(by.get("splitk"), "kernel_speedup"), option.estimate_kernel_x if option else None
    if measured is None or estimated is None:
        return cause
    own = next((c for c in checks if c.kind == "prediction" and c.claim_finding == by["splitk"].stem
                and "kernel's measured speedup" in c.claim), None)
    row = estimated_call_row(option, by["splitk"])
    # the estimate's own call first, as measured alone; the profiles' figure pools every call the engine made
    alone = (f" for the call at {call_text(option.estimate_call)}; that call alone measured "
             f"{row['bench']['speedup_vs_upstream']:.3g}x" if row is not None else "")
    benched = [r["bench"]["speedup_vs_upstream"] for r in data_of(by["splitk"]).calls or []
               if (r.get("bench") or {}).get("speedup_vs_upstream")]
    # the profiles' figure is the kernels' time in the engine; below every call's bench figure, the kernels ran
    # slower in the engine than alone, which no averaging of the calls explains (why is not measured here)
    slower = (f" in the engine, below each call's bench ({', '.join(f'{x:.3g}x' for x in benched)}): the rewrite's kernels "
              "ran slower in the engine than alone (the cause is not measured here)"
              if benched and measured < min(benched) else " in the engine")
    text = f"the estimate took the kernel {estimated:.3g}x faster{alone}, the profiles measured {measured:.3g}x{slower}"
    if own is not None and own.verdict == "holds":
        return (text + f"; Amdahl with the measured kernel speedup gives {own.claim_x:.3g}x, which the measurement holds: "
                "the miss is the kernel estimate's, not the rest of the step's")
    return text + ("; " + cause if cause else "")


# An interval spanning more than this factor (high / low) makes a held prediction an overlap, not a confirmation.
WIDE = 1.5
LOOSE = "holds only by overlap"


def _loose(predicted: tuple[float, float] | None, measured: tuple[float, float] | None) -> str:
    """The note's lead when a prediction holds only because a wide interval overlaps the other side:
    the points' agreement inside such a band confirms nothing sharper than the band."""
    wide = [f"the {what} interval [{fmt(i[0], '.3g')}, {fmt(i[1], '.3g')}] spans {fmt(i[1] / i[0], '.2g')}x"
            for what, i in (("predicted", predicted), ("measured", measured)) if i and i[0] > 0 and i[1] / i[0] > WIDE]
    if not wide:
        return ""
    return f"{LOOSE}: {' and '.join(wide)}, so the points' agreement is no sharper confirmation than that; "


def check(findings: Iterable[Finding], target: dict[str, Any], samples: SampleLookup | None = None) -> Consistency:
    """Hold every measurement in ``findings`` against every bound they state and every prediction
    against its measurement. ``target`` is the run's target as data (the journal's ``run_start``);
    ``samples`` maps a tool-call line to that run's step samples (for findings that lack them)."""
    findings = list(findings)
    by = _by_step(findings)
    attention_env = (target.get("engine") or {}).get("attention_env", "SGLANG_SM120_FLASHMLA_BACKEND")
    bounds = bounds_of(list(findings))
    measurements = measurements_of(by, target, samples)
    predictions = predictions_of(by)
    checks = hold(bounds, measurements, predictions, attention_env, causes_of(by))
    checks = [c.model_copy(update={"cause": _estimate_cause(by, checks, c.cause)})
              if c.verdict == "missed" and c.claim.startswith("option splitk estimate") else c for c in checks]
    return Consistency(bounds=bounds, measurements=measurements, predictions=predictions,
                       checks=checks + kernel_checks(by))


def journal_samples(events: list[dict]) -> SampleLookup:
    """Step samples by tool-call line, from a journal's engine.bench results (first batch row)."""
    by_call = {}
    for event in events:
        if event.get("kind") == "tool_result" and event.get("tool") == "engine.bench" and event.get("ok"):
            rows = ((event.get("data") or {}).get("results")) or []
            if rows and rows[0].get("step_ms_samples"):
                by_call[event["call"]] = list(rows[0]["step_ms_samples"])
    return by_call.get
