"""Levers: the deployment's setting and each known lever, interleaved over rounds, judged by interval."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

from agent import stats
from agent.config import Lever, Noise, Target
from agent.engine_runs import Setting, best_setting
from agent.engines import Engine, engine_for, lever_args
from agent.evidence import evidence
from agent.session import Session
from agent.state import InvestigationState
from agent.steps import Draft, StepFailed
from agent.steps.measurements import interpretation_labels, output_check, ratio_text, sweep_runs
from schema.finding import Number, Table


def sweep_plan(lever_names: list[str], rounds: int, warmup_runs: int) -> list[dict[str, Any]]:
    """The runs of a sweep in order: ``warmup_runs`` runs of the baseline and then of each lever
    (discarded: a setting's first run in the process pays for its compile, autotune and cold
    caches), then ``rounds`` rounds of ``A L1 L2 ...`` (A the baseline), the levers' order rotated
    by one each round so that no lever always runs furthest from its round's baseline run; each
    lever run is paired with its round's baseline run (stats.analyze_sweep). Each entry: setting,
    round, warmup, repeat label."""
    plan = [{"setting": name, "round": 0, "warmup": True,
             "repeat": "warmup" if warmup_runs == 1 else f"warmup{i + 1}"}
            for name in [stats.BASELINE, *lever_names] for i in range(warmup_runs)]
    for r in range(1, rounds + 1):
        plan.append({"setting": stats.BASELINE, "round": r, "warmup": False, "repeat": f"r{r}"})
        shift = (r - 1) % len(lever_names) if lever_names else 0
        for name in lever_names[shift:] + lever_names[:shift]:
            plan.append({"setting": name, "round": r, "warmup": False, "repeat": f"r{r}"})
    return plan


@dataclass
class _Measured:
    """A lever sweep as measured and analysed: what the finding's parts are written from."""

    device: str
    batch: int
    rules: Noise
    rounds: int
    min_effect: float
    base: Setting
    base_notes: list[str]
    swept: dict[str, Any]  # the engine.sweep result (agent.engine_runs.run_sweep)
    runs: list[dict[str, Any]]  # sweep_runs
    sweep: stats.Sweep
    base_runs: list[dict[str, Any]]
    base_ok: list[dict[str, Any]]
    scale: float  # tok/s x step ms, the same for every run
    base_output: dict[str, Any]
    base_seqs: list[int]
    layers_run: int
    extrapolation: dict[str, Any] | None
    lever_results: list[dict[str, Any]]
    # an SGLang server's sweep: which server the numbers come from, and each setting's median measured tok/s
    server: str | None = None
    tok_s_of: dict[str, float] | None = None

    @property
    def mid_ms(self) -> float:
        return self.sweep.baseline.median_ms

    @property
    def mid(self) -> float:
        return self.tok_s_of[stats.BASELINE] if self.tok_s_of else self.scale / self.mid_ms

    def run_tok_s(self, run: dict[str, Any]) -> float:
        """One run's tok/s: the server's measured output throughput, or the engine's scale over its step."""
        return run["tok_s"] if self.server else self.scale / run["step_ms"]

    @property
    def base_interpreted(self) -> bool:
        return self.base_ok[0]["interpreted"]

    @property
    def sde(self) -> float | None:
        return self.sweep.smallest_detectable_effect

    @property
    def sde_text(self) -> str:
        return f"{100 * self.sde:.1f}%" if self.sde is not None else "not stated (fewer than two rounds)"

    def projected(self, target: Target) -> str:
        if self.server:
            return f"measured by sglang.benchmark.serving on {self.server}"
        return f"projected to {target.model.layers} layers from {self.layers_run} measured"


def sweep_levers(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Measure the deployment's setting as it runs (CUDA graphs on where the box has a GPU) and
    each applicable lever at the goal's concurrency: a discarded warm-up run, then ``rounds``
    rounds of ``A B C ...`` (sweep_plan), all in one engine.sweep call (one process, weights built
    once, each run its own setting, state and graph). Per setting: the median of its run medians
    and (levers) a paired interval of its tok/s ratio to the baseline; a lever moves only when the
    interval excludes no change and its effect passes the device's ``min_effect`` (agent/stats.py).
    Planted levers (config.Lever.planted) are checked against what was planted (planted_check).
    Every lever's output sketch is checked against the baseline's: one that differs beyond
    ``output_rtol`` "changes the output" whatever its speed; one timed under another execution
    mode (Triton interpreted vs native) is "not comparable". Levers that cannot run here are listed
    with the reason. Fails when the sweep call fails or the baseline does not succeed in at least
    two rounds."""
    m = _measure(session, target, evidence(state, "survey").box.device)
    chosen = best_setting(target, {"levers": m.lever_results})
    best = next((r["tok_s"] for r in m.lever_results if chosen and r["name"] == chosen[0].name), m.mid)
    goal_met = best >= target.goal.output_tok_s
    return Draft(
        headline=_headline(target, m, goal_met),
        verdict="goal-met" if goal_met else "goal-not-met",
        numbers=_server_numbers(_numbers(target, m, chosen, best), m),
        tables=[Table(title="Lever sweep",
                      columns=["setting", "change", "median tok/s", f"vs baseline [{m.rules.confidence:.0%} CI]", "runs",
                               "verdict", "log"],
                      rows=_rows(target, m), note=_note(target, m)), *_crash_tables(m)],
        evidence=sorted({r["seq"] for r in m.runs}),
        labels=interpretation_labels(state, target),
        data=_data(target, m, goal_met, chosen, best),
    )


def _measure(session: Session, target: Target, device: str) -> _Measured:
    """Run the sweep (the baseline and every lever that applies here) and judge each lever; fails when
    the sweep call fails or the baseline succeeds in fewer than two rounds. An SGLang target's settings are
    server launches (agent.engine_sglang), each run a server of its own, measured by SGLang's client."""
    engine = engine_for(target)
    batch = engine.sweep_batch(target, device)
    rules = target.thresholds.noise
    rounds = rules.rounds_for(device)
    min_effect = rules.min_effect_for(device)
    base = engine.baseline(target, device)
    not_tried = {lever.name: reason for lever in target.levers if (reason := engine.applicability(target, lever, device))}
    tried = [lever for lever in target.levers if lever.name not in not_tried]
    settings = {stats.BASELINE: base, **{lever.name: engine.with_lever(target, lever, device) for lever in tried}}

    plan = sweep_plan([lever.name for lever in tried], rounds, rules.warmup_runs)
    labels = [f"{settings[e['setting']].label}#{e['repeat']}" for e in plan]
    pairs = [(label, settings[e["setting"]]) for label, e in zip(labels, plan)]
    swept = engine.sweep(session, target, device, pairs, batch)
    if not swept["ok"]:
        raise StepFailed(f"the lever sweep ({engine.sweep_tool}, log line {swept['seq']}) failed: {swept['error']}")
    runs = sweep_runs(plan, labels, swept, batch)

    sweep = stats.analyze_sweep(
        [stats.Run(r["setting"], tuple(r["samples"]) if r["ok"] else None, r["round"], r["warmup"]) for r in runs],
        rules.confidence, min_effect)
    base_runs = [r for r in runs if r["setting"] == stats.BASELINE and not r["warmup"]]
    base_ok = [r for r in base_runs if r["ok"]]
    if len(base_ok) < 2:
        errors = "; ".join(sorted({r["error"] for r in base_runs if not r["ok"]})) or "no runs"
        raise StepFailed(f"the baseline succeeded in {len(base_ok)} of {len(base_runs)} rounds: {errors}")
    scale = base_ok[0]["scale"]
    reference = next((r["sketch"] for r in runs if r["setting"] == stats.BASELINE and r["ok"] and r.get("sketch")), None)
    base_seqs = sorted({r["seq"] for r in base_runs})
    lever_results = [
        {"name": lever.name, "status": "not tried", "reason": not_tried[lever.name]} if lever.name in not_tried else
        _judge(lever, runs, sweep.levers.get(lever.name), reference, base_ok[0]["interpreted"], rules, scale, min_effect)
        for lever in target.levers]
    for lever, result in zip(target.levers, lever_results):
        needed = needed_lever(lever, tried)
        if needed is not None and result.get("ratio") is not None:
            result["needs"] = against_needed(lever, needed, runs, rules.confidence, min_effect)
    measured = _Measured(
        device=device, batch=batch, rules=rules, rounds=rounds, min_effect=min_effect, base=base,
        base_notes=engine.baseline_notes(target, device), swept=swept, runs=runs, sweep=sweep,
        base_runs=base_runs, base_ok=base_ok, scale=scale,
        base_output=output_check(reference, [r.get("sketch") for r in base_ok], rules.output_rtol), base_seqs=base_seqs,
        layers_run=engine.layers_run(target, device),
        extrapolation=_extrapolation(swept["data"].get("extrapolation"), sweep.baseline.median_ms, base_seqs),
        lever_results=lever_results)
    return _served(target, engine, measured) if engine.measured_by_client else measured


def _change(lever: Lever) -> set[tuple]:
    return ({("env", k, v) for k, v in lever.env.items()} | {("option", k, str(v)) for k, v in lever.options.items()}
            | {("arg", a) for a in lever_args(lever)})


def needed_lever(lever: Lever, tried: list[Lever]) -> Lever | None:
    """The tried lever whose whole change this one's includes and goes beyond (moe-loop sets cuda-graph-off's
    cuda_graph=False, since its host loop cannot be captured): against the baseline this lever measures the
    combination, so it is also held against that lever alone. The one with the largest change, if several."""
    own = _change(lever)
    inside = [other for other in tried if other.name != lever.name and _change(other) and _change(other) < own]
    return max(inside, key=lambda other: len(_change(other)), default=None)


def against_needed(lever: Lever, needed: Lever, runs: list[dict], confidence: float, min_effect: float) -> dict[str, Any]:
    """``lever`` against ``needed`` alone: the tok/s ratio of their runs paired by round (each round ran both),
    a t-interval on the log ratios as for the baseline, and its verdict under the same minimum effect."""
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        if r["ok"] and not r["warmup"] and r["setting"] in (lever.name, needed.name):
            by_round.setdefault(r["round"], {})[r["setting"]] = r["step_ms"]
    pairs = [(ms[needed.name], ms[lever.name]) for _, ms in sorted(by_round.items()) if len(ms) == 2]
    if not pairs:
        return {"lever": needed.name, "ratio": None, "interval": None, "pairs": 0, "status": "not compared",
                "reason": f"no round measured both {lever.name} and {needed.name}"}
    interval = stats.paired_interval(pairs, confidence)
    return {"lever": needed.name, "change": _setting_text(needed.env, needed.options, lever_args(needed)),
            "ratio": interval.ratio, "interval": [interval.low, interval.high] if interval.low is not None else None,
            "pairs": len(pairs), "status": stats.speed_verdict(interval, min_effect),
            "basis": f"{interval.confidence:.0%} t-interval on the log ratios of {interval.n} rounds that ran both"}


def _served(target: Target, engine: Engine, m: _Measured) -> _Measured:
    """An SGLang sweep's measurement as its numbers are read: each setting's tok/s the median of its runs'
    measured output throughput (the interval stays the paired one of the decode step, the median TPOT), the
    server they come from named, and the output check said to be none (a live server's outputs are not
    sketched)."""
    m.server = engine.served(target, [r["server"] for r in m.runs if r.get("server")])
    ok = [r for r in m.runs if r["ok"] and not r["warmup"]]
    m.tok_s_of = {name: median(r["tok_s"] for r in ok if r["setting"] == name)
                  for name in {r["setting"] for r in ok}}
    unchecked = {"ok": None, "error": None, "rtol": m.rules.output_rtol, "note": SERVER_OUTPUTS}
    m.base_output = unchecked
    for result in m.lever_results:
        if result.get("tok_s") is not None and result["name"] in m.tok_s_of:
            result["tok_s"] = m.tok_s_of[result["name"]]
        if "output" in result:
            result["output"] = unchecked
        excerpts = [r["log_excerpt"] for r in m.runs if r["setting"] == result["name"] and r.get("log_excerpt")]
        if excerpts:
            result["log_excerpt"] = excerpts[0]
    return m


SERVER_OUTPUTS = "a live server's outputs are not sketched"


def _rows(target: Target, m: _Measured) -> list[list[Any]]:
    """The sweep table: the baseline's warm-ups, the baseline, then each lever."""
    setting = _setting_text(m.base.env, m.base.options, getattr(m.base, "args", ()))
    rows = [["baseline (warm-up, discarded)", setting, m.run_tok_s(r) if r["ok"] else None, "-", "1",
             "warm-up" if r["ok"] else f"failed: {r['error']}", str(r["seq"])]
            for r in m.runs if r["warmup"] and r["setting"] == stats.BASELINE]
    rows.append(["baseline", setting, m.mid, "reference", _runs_text(len(m.base_ok), len(m.base_runs)), "reference",
                 _seqs_text(m.base_seqs)])
    rows += [_row(lever, result, m.min_effect) for lever, result in zip(target.levers, m.lever_results)]
    return rows


def _sde_basis(m: _Measured) -> tuple[float | None, str]:
    """The baseline's spread effect and what sets the smallest detectable effect: the spread's
    half-width, or the min_effect floor above it."""
    spread = stats.spread_effect(m.sweep.run_log_sd, m.rounds, m.rules.confidence)
    basis = ("not stated" if spread is None else
             f"the baseline's run-to-run spread ({100 * spread:.2g}% at {m.rounds} rounds; the floor, min_effect, is "
             f"{100 * m.min_effect:.2g}%)" if spread >= m.min_effect else
             f"the floor, min_effect {100 * m.min_effect:.2g}% (the baseline's run-to-run spread alone would "
             f"allow {100 * spread:.2g}% at {m.rounds} rounds)")
    return spread, basis


def movers_text(results: list[dict]) -> str:
    """The levers that move throughput up, each with the output rows it changes beyond the tolerance;
    when none does, whether any lever was measured comparably at all (the others counted by status)."""
    movers = []
    for r in results:
        if r["status"] == "moves up":
            out = r.get("output") or {}
            needs = r.get("needs")
            movers.append(r["name"] + (f" (with {needs['lever']}; {needs['status']} against it alone)" if needs else "")
                          + (f" (changes {out['rows_beyond']} of {out['rows']} output rows beyond "
                                       f"{100 * out['rtol']:.0f}%, up to {100 * out['worst_row']:.3g}%)" if out.get("rows_beyond") else ""))
    if movers:
        return "levers that move it up: " + ", ".join(movers)
    measured = [r for r in results if r["status"] in ("moves down", "no change detected")]
    if measured:
        return "no lever moves it up"
    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return "no lever was measured comparably (" + ", ".join(f"{n} {status}" for status, n in counts.items()) + ")"


def _headline(target: Target, m: _Measured, goal_met: bool) -> str:
    budget_text = f", {m.rules.budget} budget" if m.rules.budget != "normal" else ""
    return (f"baseline {m.mid:.3g} tok/s at {'concurrency' if m.server else 'batch'} {m.batch} ({m.projected(target)}; {m.rounds} rounds{budget_text}, "
            f"smallest detectable effect {m.sde_text}); " + movers_text(m.lever_results)
            + ("; goal met" if goal_met else f"; goal {target.goal.output_tok_s:.0f} tok/s not met"))


def _numbers(target: Target, m: _Measured, chosen: list[Lever], best: float) -> dict[str, Number]:
    projected, rules, base_seqs, mid_ms = m.projected(target), m.rules, m.base_seqs, m.mid_ms
    numbers = {
        "baseline_tok_s": Number(value=m.mid, unit="tok/s", label=f"baseline median of {len(m.base_ok)} runs, {projected}", seqs=base_seqs),
        "baseline_step_ms": Number(value=mid_ms, unit="ms", label="baseline decode step, median of runs (layers run)", seqs=base_seqs),
        "baseline_layer_ms": Number(value=mid_ms / m.layers_run, unit="ms", label="baseline time per layer", seqs=base_seqs),
        "projected_step_ms": Number(value=mid_ms / m.layers_run * target.model.layers, unit="ms",
                                    label=f"decode step, {projected}", seqs=base_seqs),
        "run_log_sd": Number(value=m.sweep.run_log_sd, unit="log", seqs=base_seqs,
                             label=f"baseline run-to-run spread: s.d. of log run medians ({m.sweep.run_log_df} d.f.)"),
        "smallest_detectable_effect": Number(value=m.sde, unit="fraction", seqs=base_seqs,
                                             label=f"max(min_effect, half-width of the {rules.confidence:.0%} paired "
                                                   f"interval the baseline's spread gives at {m.rounds} rounds)"),
        "min_effect": Number(value=m.min_effect, unit="fraction",
                             label=f"smallest change that counts as a move on a {'GPU' if m.device == 'cuda' else 'CPU'} box (target)",
                             declared=True),
        "best_tok_s": Number(value=best, unit="tok/s", seqs=base_seqs if not chosen else next(r["seqs"] for r in m.lever_results if r["name"] == chosen[0].name),
                             label=f"best measured setting the declared hardware allows: "
                                   f"{'baseline + ' + chosen[0].name if chosen else 'baseline'}"),
        "goal_tok_s": Number(value=target.goal.output_tok_s, unit="tok/s", label=f"goal at concurrency {target.goal.concurrency}", declared=True),
        "step_budget_ms": Number(value=target.goal.step_budget_ms, unit="ms", label="decode step budget for the goal", declared=True),
    }
    for result in m.lever_results:
        if result.get("interval"):
            seqs = result["seqs"]
            numbers[f"{result['name']}_ratio"] = Number(value=result["ratio"], unit="x", seqs=seqs,
                                                        label=f"{result['name']} tok/s / baseline tok/s (paired rounds)")
            numbers[f"{result['name']}_ratio_low"] = Number(value=result["interval"][0], unit="x", seqs=seqs,
                                                            label=f"{rules.confidence:.0%} interval, low")
            numbers[f"{result['name']}_ratio_high"] = Number(value=result["interval"][1], unit="x", seqs=seqs,
                                                             label=f"{rules.confidence:.0%} interval, high")
    return numbers


# An SGLang server's numbers, relabelled: a step is the client's time per output token, nothing is projected.
SERVER_LABELS = {
    "baseline_step_ms": "baseline decode step: median TPOT (time per output token), median of runs",
    "baseline_layer_ms": "baseline decode step per model layer (median TPOT / layers)",
    "projected_step_ms": "decode step: median TPOT, measured (not projected)",
}


def _server_numbers(numbers: dict[str, Number], m: _Measured) -> dict[str, Number]:
    """An SGLang sweep's numbers each naming the server they come from (measured ones: those with log lines);
    the ratios are of the paired decode steps (median TPOT). The reference engine's are returned as they are."""
    if not m.server:
        return numbers
    out = {}
    for key, number in numbers.items():
        label = SERVER_LABELS.get(key, number.label)
        if key.endswith("_ratio"):
            label = f"{key.removesuffix('_ratio')}: baseline median TPOT / its median TPOT (paired rounds)"
        out[key] = number.model_copy(update={"label": f"{label} [{m.server}]" if number.seqs else label})
    return out


CRASH_LINES = 6


def _crash_tables(m: _Measured) -> list[Table]:
    """The server log's last lines for each lever whose server crashed, ran out of memory or never became healthy."""
    # the last lines in the table (the whole excerpt is in the finding's data and the server log an artifact)
    rows = [[r["name"], r.get("reason"), "\n".join(r["log_excerpt"].splitlines()[-CRASH_LINES:])]
            for r in m.lever_results if r.get("log_excerpt")]
    if not rows:
        return []
    return [Table(title="Failed levers: the server log's last lines", columns=["lever", "why", "server log (excerpt)"],
                  rows=rows, note=f"each from the run's server log (sglang.sweep keeps them as artifacts), {m.server}")]


def _note(target: Target, m: _Measured) -> str:
    """The sweep table's note: how the ratios, intervals and output checks were made, and in what process."""
    rules, swept, runs = m.rules, m.swept, m.runs
    if m.server:
        return _server_note(m)
    note = (f"tok/s {m.projected(target)}; ratio = lever tok/s / baseline tok/s with its {rules.confidence:.0%} interval "
            f"(t-interval on the log ratios of {m.rounds} rounds, each lever run paired with its round's baseline run; "
            f"runs, not step samples, are the unit); a lever moves when the interval excludes no change and the "
            f"effect is at least {100 * m.min_effect:.3g}%; smallest detectable effect {m.sde_text}; outputs must "
            f"match the baseline's within {100 * rules.output_rtol:.0f}% (norm-relative, sketch of the decode output, "
            f"median row: a request whose expert choice flips on a near tie differs beyond rounding, and is counted); "
            + (f"all {len(runs)} runs ran in order in one engine process (engine.sweep, log line {swept['seq']}) on weights "
               if not swept.get("deaths") else
               f"all {len(runs)} runs ran in order, in {len(swept['seqs'])} engine processes (engine.sweep, log lines "
               f"{', '.join(map(str, swept['seqs']))}: the process died in "
               f"{', '.join(d['label'] for d in swept['deaths'])}, and the runs after it went on in a new one) on weights ")
            + "built once: each run has its own setting, state, graph capture, warm-up and timed steps, but the "
              "process, weights, compiled kernels and allocator are shared, so the intervals leave out "
              "process-to-process variation")
    lever_warmups = [r for r in runs if r["warmup"] and r["setting"] != stats.BASELINE]
    if lever_warmups:
        note += ("; each lever's first run was a warm-up too, discarded (tok/s: "
                 + ", ".join(f"{r['setting']} " + (f"{m.run_tok_s(r):.4g}" if r["ok"] else "failed")
                             for r in lever_warmups) + ")")
    if rules.budget != "normal":
        note += (f"; {rules.budget} budget: {m.rounds} rounds instead of {rules.rounds_for_budget(m.device, 'normal')}, "
                 f"so the intervals are wider and the smallest detectable effect larger")
    if m.extrapolation:
        note += f"; layers: {m.extrapolation['text']}"
    if m.base_output["ok"] is False:
        note += f"; the baseline's own outputs differ run to run by {100 * m.base_output['error']:.2g}%"
    note += "".join(f"; {n}" for n in m.base_notes)
    return note


def _server_note(m: _Measured) -> str:
    """The sweep table's note for an SGLang server: what a run is, what the ratios and tok/s are."""
    rules = m.rules
    note = (f"tok/s: each setting's median over its runs of the output throughput sglang.benchmark.serving measured "
            f"(random-ids, {m.batch} requests in flight), {m.server}; ratio = baseline median TPOT / the lever's, with "
            f"its {rules.confidence:.0%} interval (t-interval on the log ratios of {m.rounds} rounds, each lever run "
            f"paired with its round's baseline run; runs, not requests, are the unit); a lever moves when the interval "
            f"excludes no change and the effect is at least {100 * m.min_effect:.3g}%; smallest detectable effect "
            f"{m.sde_text}; outputs not checked: {SERVER_OUTPUTS}; each of the {len(m.runs)} runs launched a server of its own "
            f"with the setting's arguments and environment (sglang.sweep, log line {m.swept['seq']}), a warm-up pass, "
            f"then the measured pass, then stopped it: the intervals include launch-to-launch variation")
    warmups = [r for r in m.runs if r["warmup"] and r["setting"] != stats.BASELINE]
    if warmups:
        note += ("; each lever's first run was a warm-up too, discarded (tok/s: "
                 + ", ".join(f"{r['setting']} " + (f"{r['tok_s']:.4g}" if r["ok"] else "failed") for r in warmups) + ")")
    if rules.budget != "normal":
        note += f"; {rules.budget} budget: {m.rounds} rounds instead of {rules.rounds_for_budget(m.device, 'normal')}"
    return note


def _data(target: Target, m: _Measured, goal_met: bool, chosen: list[Lever], best: float) -> dict[str, Any]:
    rules, swept, runs, sweep = m.rules, m.swept, m.runs, m.sweep
    spread, sde_basis = _sde_basis(m)
    return {
        "device": m.device, "batch": m.batch, "concurrency": target.goal.concurrency, "layers_run": m.layers_run,
        "goal_met": goal_met,
        "baseline_options": m.base.options, "baseline_notes": m.base_notes,
        "baseline": {"tok_s": m.mid, "step_ms": m.mid_ms, "run_ms": sweep.baseline.run_ms, "failed_runs": sweep.baseline.failed,
                     "interpreted": m.base_interpreted, "output": m.base_output, "seqs": m.base_seqs},
        "levers": m.lever_results,
        "best": {"levers": [lever.name for lever in chosen], "tok_s": best},
        "sweep": {"rounds": m.rounds, "warmup_runs": rules.warmup_runs, "confidence": rules.confidence,
                  "min_effect": m.min_effect, "output_rtol": rules.output_rtol,
                  "run_log_sd": sweep.run_log_sd, "run_log_df": sweep.run_log_df,
                  "smallest_detectable_effect": m.sde, "spread_effect": spread, "sde_basis": sde_basis,
                  "budget": rules.budget,
                  "rounds_normal": rules.rounds_for_budget(m.device, "normal"), "seq": swept["seq"],
                  # a server sweep launches a server for each run: never one process
                  "one_process": not m.server and not swept.get("deaths"), **({"deaths": swept["deaths"]} if swept.get("deaths") else {}),
                  "runs": len(runs), "wall_s": swept["data"].get("wall_s"),
                  "weights_s": swept["data"].get("weights_s")},
        "extrapolation": m.extrapolation,
        "planted": [{"name": r["name"], **r["planted"]} for r in m.lever_results if r.get("planted")],
        "engine_notes": list(swept["data"].get("notes") or []),
        **({"server": m.server, "sglang": swept["data"].get("sglang")} if m.server else {}),
        "runs": [{k: r.get(k) for k in ("label", "setting", "round", "warmup", "seq", "ok", "step_ms", "error", "wall_s")}
                 for r in runs],
    }


def _judge(lever: Lever, runs: list[dict], stat: stats.SettingStats | None, reference: dict | None,
           base_interpreted: bool, rules, scale: float, min_effect: float) -> dict[str, Any]:
    """One tried lever's result: its runs' statistics, output check and verdict (and, for a planted
    lever, whether it came out as planted: planted_check)."""
    own = [r for r in runs if r["setting"] == lever.name and not r["warmup"]]
    ok = [r for r in own if r["ok"]]
    result: dict[str, Any] = {"name": lever.name, "seqs": sorted({r["seq"] for r in own}), "runs": len(own),
                              "failed_runs": len(own) - len(ok)}
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
                      reason=f"outputs differ from the baseline's by {100 * output['error']:.3g}% in the median row "
                             f"(> {100 * rules.output_rtol:.0f}%; {output['rows_beyond']} of {output['rows']} rows beyond)")
    elif not comparable:
        modes = {True: "Triton under the CPU interpreter", False: "not interpreted"}
        result.update(status="not comparable",
                      reason=f"the baseline ran {modes[base_interpreted]}, this lever {modes[interpreted]}: their tok/s "
                             f"measure different execution, not the lever")
    else:
        result["status"] = stats.speed_verdict(interval, min_effect)
    if lever.planted:
        result["planted"] = planted_check(lever.planted, result["status"], interval,
                                          [r.get("planted_delay") for r in ok])
    return result


def planted_check(kind: str, status: str, interval: stats.Interval | None, delays: list[dict | None]) -> dict[str, Any]:
    """Whether a calibration lever came out as planted. ``null`` (changes nothing the engine reads):
    "no change detected". ``delay``: "moves down" with its interval covering the expected ratio,
    the median over its runs of 1 / (1 + planted delay / undelayed step), each measured in the run
    (``delays``: the engine's planted_delay reports)."""
    if kind == "null":
        return {"kind": kind, "expected": "no change detected", "as_expected": status == "no change detected"}
    measured = [d for d in delays if d]
    if not measured or len(measured) != len(delays):
        return {"kind": kind, "expected": "moves down", "as_expected": False, "expected_ratio": None, "covered": None,
                "note": f"{len(delays) - len(measured)} of {len(delays)} runs reported no planted delay"}
    expected = median(d["expected_ratio"] for d in measured)
    covered = bool(interval and interval.covers(expected))
    return {"kind": kind, "expected": "moves down", "expected_ratio": expected, "covered": covered,
            "as_expected": status == "moves down" and covered,
            "frac": median(d["frac"] for d in measured), "planned_frac": measured[0]["planned_frac"],
            "delay_ms": median(d["delay_ms"] for d in measured),
            "undelayed_step_ms": median(d["undelayed_step_ms"] for d in measured)}


def _extrapolation(engine: dict | None, step_ms: float, seqs: list[int]) -> dict[str, Any] | None:
    """The engine's layer extrapolation with the baseline's numbers through it: which layer types
    ran, the per-layer time, x the model's layers."""
    if not engine:
        return None
    layer_ms = step_ms / engine["layers_run"]
    kinds = {"0": "window-only", "4": "c4", "128": "c128"}
    # the journal's JSON sorts keys as strings: order the layer types by compress ratio again
    mix = lambda m: ", ".join(f"{m[r]} {kinds.get(r, 'ratio ' + r)}" for r in sorted(m, key=int))  # noqa: E731
    return {**engine, "step_ms": step_ms, "layer_ms": layer_ms, "projected_step_ms": layer_ms * engine["layers_model"],
            "seqs": seqs,
            "text": (f"{engine['layers_run']} of {engine['layers_model']} layers run (model layers {engine['layer_ids']}: "
                     f"{mix(engine['run_mix'])}; the model has {mix(engine['model_mix'])}): {step_ms:.4g} ms / "
                     f"{engine['layers_run']} = {layer_ms:.4g} ms a layer, x {engine['layers_model']} = "
                     f"{layer_ms * engine['layers_model']:.4g} ms a step")}


def _row(lever: Lever, result: dict[str, Any], min_effect: float) -> list[Any]:
    change = _setting_text(lever.env, lever.options, lever_args(lever))
    if result["status"] == "not tried":
        return [lever.name, change, None, "-", "0", f"not tried: {result['reason']}", ""]
    runs = result.get("runs", len(result["seqs"]))
    if result["status"] == "failed":
        return [lever.name, change, None, "-", _runs_text(0, runs), f"failed: {result['reason']}", _seqs_text(result["seqs"])]
    low, high = result["interval"] or (None, None)
    verdict = result["status"]
    if verdict == "no change detected" and low is not None and (low > 1.0 or high < 1.0):
        # the interval excludes no change but the effect is under the floor: said, not called "nothing"
        verdict = (f"no change that counts: the interval excludes none, but the effect is under the "
                   f"{100 * min_effect:.3g}% minimum")
    if result.get("reason"):
        verdict += f": {result['reason']}"
    elif result["output"]["ok"] is None:
        verdict += f" (output not checked: {result['output']['note']})"
    elif result["output"].get("rows_beyond"):
        verdict += f" (output: {result['output']['note']})"
    if result["failed_runs"]:
        verdict += f" ({result['failed_runs']} runs failed)"
    needs = result.get("needs")
    if needs:  # against the baseline it measured the combination: said, with the lever against its other part
        low_n, high_n = needs["interval"] or (None, None)
        verdict += (f"; the combination with {needs['lever']} ({needs['change']}): against {needs['lever']} alone "
                    f"{ratio_text(needs['ratio'], low_n, high_n)}, {needs['status']}" if needs["ratio"] is not None
                    else f"; the combination with {needs['lever']}: {needs['reason']}")
    planted = result.get("planted")
    if planted:
        verdict += f"; planted {planted['kind']}: " + ("as expected" if planted["as_expected"] else "NOT as expected")
        if planted.get("expected_ratio") is not None:
            verdict += (f" (expected {100 * (planted['expected_ratio'] - 1):+.1f}% from a {planted['delay_ms']:.3g} ms "
                        f"spin, {100 * planted['frac']:.2f}% of the step; {'inside' if planted['covered'] else 'outside'} "
                        f"the interval)")
    ratio = ratio_text(result["ratio"], low, high)
    if result["status"] == "not comparable":
        ratio += " (not comparable)"
    if needs:  # the row's tok/s and ratio are the combination's: said where they stand, not only in the verdict
        ratio += f" (with {needs['lever']})"
    return [lever.name, change, result["tok_s"], ratio, _runs_text(runs - result["failed_runs"], runs), verdict,
            _seqs_text(result["seqs"])]


def _runs_text(ok: int, total: int) -> str:
    return str(total) if ok == total else f"{ok} of {total}"


def _seqs_text(seqs: list[int]) -> str:
    return ", ".join(str(s) for s in seqs)


def _setting_text(env: dict[str, str], options: dict[str, Any], args=()) -> str:
    """``K=V`` for the environment and engine options, then the server arguments as given."""
    parts = [f"{k}={v}" for k, v in sorted(env.items())] + [f"{k}={v}" for k, v in sorted(options.items())] + list(args)
    return " ".join(parts) or "-"
