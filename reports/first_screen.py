"""The report's first screen (issue 30): the recommendation in one sentence, where it was measured, what the
evidence does not cover, the next bottleneck, and the few findings that carry the decision; then the
stand-in's limits, said once and pointed to from beside every ceiling and "not reachable" verdict.

Every number here is one a finding already holds, shown with ``reports.render.num`` (its finding and its
log lines), so the first screen adds no arithmetic of its own: it only chooses which numbers to put first.
"""

from __future__ import annotations

from typing import Any

from reports.format import code, fmt, kernel_md, md_text
from reports.numbers import chosen_option, finding_link, num, num_with_interval
from schema.finding import Finding

LIMITS_ANCHOR = "#the-stand-ins-limits"


def _num(f: Finding | None, key: str, spec: str = ".3g") -> str:
    return num(f, key, spec)


def goal_text(levers: Finding) -> str:
    """The goal, said the one way every part of the report says it: its rate at its concurrency, its step budget."""
    return (f"the goal, {_num(levers, 'goal_tok_s', '.0f')} at concurrency {levers.data['concurrency']} "
            f"(a {_num(levers, 'step_budget_ms', '.3g')} step budget)")


def measured_ratio(splitk: Finding) -> str:
    """The split-K rewrite's measured ratio beside its interval, both to the digits at which they read apart (a
    "[2.199, 2.21]" hides the digit it hangs on; a "2.1 x" beside "[2.069, 2.124]" drops two the interval has)."""
    ends = [splitk.number(k) if k in splitk.numbers else None for k in ("measured_low_x", "measured_high_x")]
    return num_with_interval(splitk, "measured_x", ends, ".4g")


def recommendation(s: dict[str, Finding], decision: dict[str, Any] | None) -> str:
    """Do X; the tok/s it measured with its interval; against the goal. Without a measured option, the decision as taken."""
    levers, splitk, ceiling, options = s["levers"], s.get("splitk"), s.get("ceiling"), s.get("options")
    chosen = chosen_option(decision)
    goal = levers.number("goal_tok_s")
    if chosen == "splitk" and splitk is not None and "splitk_tok_s" in splitk.numbers:
        op = (ceiling.data.get("operation") or {}).get("name") if ceiling else None
        what = f"the split-K rewrite of {_kernel(s, ceiling, 60)}" if ceiling else "the split-K rewrite"
        where = "at or above" if splitk.number("splitk_tok_s") >= goal else "below"
        # the tok/s is split-K's run of median step among the alternating rounds, projected to the model's layers
        # (projected, never "measured"); the ratio is the rounds' paired ratios' geometric mean, so the tok/s is
        # not the ratio times the reference's tok/s: each is said for what it is
        return (f"take {what}{f' (the {op} operation)' if op else ''}: {_num(splitk, 'splitk_tok_s', '.4g')} "
                f"(projected: its run of median step time among the alternating rounds); measured "
                f"{measured_ratio(splitk)} over the profiled setting (its run: "
                f"{_num(splitk, 'rounds_reference_tok_s', '.4g')}) by the same rounds' paired ratios (the sweep's baseline "
                f"median: {_num(levers, 'baseline_tok_s', '.4g')}){_output_changes(splitk)}; {where} {goal_text(levers)}."
                f"{_before_running(splitk)}")
    if decision and options is not None and f"{chosen}_upper_x" in options.numbers:
        return (f"`{chosen}` ({decision['source']}), not measured in this run: the options bound it at "
                f"{_num(options, f'{chosen}_upper_x', '.4g')} over the profiled setting, against {goal_text(levers)}.")
    if ceiling is not None:
        return (f"none decided in this run; even the dominant operation instant reaches {_num(ceiling, 'ceiling_tok_s', '.4g')} "
                f"(projected), against {goal_text(levers)}.")
    return f"none: {md_text(levers.headline)}; against {goal_text(levers)}."


def _output_changes(splitk: Finding) -> str:
    """Where the rewrite's decode output differs from the profiled setting's beyond the tolerance: said beside
    the decision, as it is for the best lever (a faster setting that changes answers is not a free win)."""
    out = splitk.data.get("output") or {}
    if not out.get("rows_beyond"):
        return ""
    return (f"; its engine output changes {out['rows_beyond']} of {out['rows']} rows beyond {100 * out['rtol']:.0f}%, "
            f"up to {100 * out['worst_row']:.3g}% (the median row agrees)")


def _before_running(splitk: Finding) -> str:
    """What must be measured before the rewrite is run in the deployment, where this run's figure is not the
    deployment's kernels on a GPU (``agent recommend`` applies the same rule and gives the command to run now)."""
    plan = splitk.data.get("plan") or {}
    missing = []
    if "cpu-interpreter" in splitk.labels:
        missing.append("on a GPU (these are the Triton CPU interpreter's times)")
    if plan and not plan.get("declared", True):
        missing.append(f"with the declared GPU's kernels (this was {md_text(plan.get('short') or 'the box plan')})")
    if not missing:
        return ""
    return (f" Before running it, measure it again {' and '.join(missing)}; until then `agent recommend` gives the "
            "command to run (the best measured setting).")


def measured_on(s: dict[str, Finding], run: dict[str, Any]) -> str:
    """The box against the declared hardware, from the survey; the declared bandwidth only where the run holds a cited figure."""
    survey = s["survey"]
    device = next((row for row in survey.tables[0].rows if row[0] == "device"), None) if survey.tables else None
    box, declared = (device[1], device[2]) if device else (survey.data["box"].get("gpu") or "the box", "-")
    rates = f"copy {_num(survey, 'copy_gb_s', '.4g')} measured" if "copy_gb_s" in survey.numbers else ""
    if "stand-in" not in survey.labels:
        return f"{md_text(box)}{f' ({rates})' if rates else ''}, the declared hardware itself."
    declared_text = f"{md_text(declared)} (sm_{fmt(survey.number('declared_sm'), '.0f')}, {_num(survey, 'declared_sm_count', 'd')}"
    bandwidth = declared_bandwidth(run)
    declared_text += (f", {bandwidth})" if bandwidth else "; its bandwidth: no cited figure in this project)")
    interpreter = ("; the engine ran at reduced shapes under the Triton CPU interpreter: the structure carries over, "
                   "the magnitudes do not" if "cpu-interpreter" in _labels(s) else "")
    return (f"a stand-in, {md_text(box)}{f' ({rates})' if rates else ''}, for the declared {declared_text}{interpreter}: "
            f"see [the stand-in's limits]({LIMITS_ANCHOR}).")


def _labels(s: dict[str, Finding]) -> set[str]:
    return {label for f in s.values() for label in f.labels}


def declared_bandwidth(run: dict[str, Any], linked: bool = True) -> str:
    """The declared GPU's memory bandwidth as the report finding holds it (a cited figure), or ""."""
    rate = (run.get("declared_rates") or {}).get("memory_GBps")
    if not rate:
        return ""
    cite = rate["citations"][0]["url"]
    held = f" ({run['report_stem']}, [cited]({cite}))" if linked else f" ([cited]({cite}))"
    return f"**{fmt(rate['value'], ',.0f')} GB/s**{held} {md_text(rate['what'])}"


def engine_limits(levers: Finding) -> list[str]:
    """What the engine did not run, in the engine's own words (its notes in the sweep's result)."""
    keep = ("one rank of", "weights are bf16", "not modelled")
    return [note for note in levers.data.get("engine_notes") or [] if note.startswith(keep)]


def unmeasured_layers(levers: Finding) -> str:
    """Layer kinds the model has and the run did not run (the extrapolation's mixes): not estimated."""
    ext = levers.data.get("extrapolation") or {}
    missing = {k: n for k, n in (ext.get("model_mix") or {}).items() if k not in (ext.get("run_mix") or {})}
    names = {"0": "window-only"}
    if not missing:
        return ""
    kinds = ", ".join(f"{n} {names.get(k, f'c{k}')}" for k, n in sorted(missing.items()))
    return f"the model's {kinds} layers were not run (counted at the run layers' mean time, not measured)"


def unmeasured_default_backends(s: dict[str, Finding], run: dict[str, Any]) -> list[str]:
    """The engine's defaults the target pinned away from, by the gate scan (which read each switch's default) and
    the target's engine environment: the deployment's own default was not measured."""
    gates, levers, survey = s.get("gates"), s["levers"], s["survey"]
    pinned = run.get("engine_env") or {}
    if gates is None:
        return []
    out, seen = [], set()
    for tie in gates.data.get("ties") or []:
        for lever in tie.get("levers") or []:
            env, default = lever.get("env"), lever.get("default")
            if not env or default is None or env in seen or pinned.get(env) in (None, default):
                continue
            seen.add(env)
            version = survey.data.get("software", {}).get("sglang")
            tried = [r for r in levers.data.get("levers") or [] if r["status"] == "not tried" and default in r["name"]]
            why = f" ({tried[0]['name']}: not tried, {tried[0]['reason']})" if tried and tried[0].get("reason") else ""
            out.append(f"sglang {version or ''}'s default `{env}={default}` ({lever.get('defined_at')}) for "
                       f"{code(tie['kernel'])}'s operation was not measured: the target pins `{pinned[env]}`{why}")
    return out


def not_covered(s: dict[str, Finding], run: dict[str, Any]) -> str:
    """The deployment's defaults not measured, the layer kinds not run, and in a few words what the engine left
    out (its notes, whole, are in the stand-in's limits: said once)."""
    levers, splitk = s["levers"], s.get("splitk")
    plan = (splitk.data.get("plan") or {}) if splitk is not None else {}
    # the rewrite measured is the declared GPU's only where the run built that GPU's plan (issue 29)
    box_plan = ([f"the rewrite measured is {md_text(plan['text'])} ({finding_link(splitk)}): the declared GPU's own "
                 f"plan was not measured in this run"] if plan and not plan.get("declared") else [])
    parts = box_plan + unmeasured_default_backends(s, run) + [p for p in [unmeasured_layers(levers)] if p]
    left = engine_left_out(levers)
    if left:
        parts.append(", ".join(left) + f" ([the stand-in's limits]({LIMITS_ANCHOR}))")
    return "; ".join(parts) + "." if parts else "nothing the run records as left out."


def engine_left_out(levers: Finding) -> list[str]:
    """A few words for each part of the deployment the engine's notes say it did not run."""
    notes = " ".join(levers.data.get("engine_notes") or [])
    return [phrase for key, phrase in (("weights are bf16", "bf16 weights where the checkpoint holds FP8/FP4"),
                                       ("no all-reduce", "no TP all-reduce"), ("LM head", "no LM head")) if key in notes]


def next_bottleneck(s: dict[str, Finding]) -> str:
    """What dominates once the recommendation is in: the second round's profile, where the run made one."""
    r2, ceiling = s.get("round2"), s.get("ceiling")
    if r2 is not None and r2.data.get("complete"):
        op = (r2.data.get("operation") or {}).get("name")
        share = (f"{_num(r2, 'operation_share')} of the profiled window with the rewrite" if op
                 else f"{_num(r2, 'dominant_share')} of the time")
        reach = r2.data.get("reach") or ("reachable" if r2.data.get("reachable") else "not reachable")
        lead = (f"the {code(op)} operation ({md_text(r2.data['category'])}, kernel {_kernel(s, r2, 40)})" if op
                else f"{_kernel(s, r2, 60)} ({md_text(r2.data['category'])})")
        return (f"{lead}: {share}; even instant, the ceiling is "
                f"{_num(r2, 'ceiling_tok_s', '.4g')} (projected): the goal is {reach}{'' if ' by ' in reach else ' this way'}"
                f"{stand_in_caveat(s)}.")
    if ceiling is not None:
        return ("not measured: no second profile after the decision; the first round's ceiling is "
                f"{_num(ceiling, 'ceiling_tok_s', '.4g')} (projected){stand_in_caveat(s)}.")
    return "not measured: the run has no profile."


def _kernel(s: dict[str, Finding], f: Finding, width: int) -> str:
    """The kernel a ceiling or round-2 finding names, by its meaning where the box's names give one (round 2's own,
    the first profile's for the first round's ceiling), its name cut to ``width`` as a code span otherwise."""
    names = f.data.get("kernel_names") if f.step == "round2" else (s["profile"].data.get("kernel_names") if "profile" in s else None)
    return kernel_md(f.data["kernel"], names, width)


def why(s: dict[str, Finding]) -> list[str]:
    """The three or four findings that carry the decision, each with the numbers that do, linked."""
    levers, ceiling, grid, splitk = s["levers"], s.get("ceiling"), s.get("grid"), s.get("splitk")
    items = []
    if "best_tok_s" in levers.numbers:
        met = levers.number("best_tok_s") >= levers.number("goal_tok_s")  # a comparison of two held numbers, no arithmetic
        items.append(f"{'A lever setting reaches' if met else 'No lever reaches'} the goal: the best setting measured, "
                     f"{_num(levers, 'best_tok_s', '.4g')}{best_setting_outputs(levers)}.")
    if ceiling is not None:
        # the ceiling's bound: its operation's where the profile attributed one, else the kernel's
        share, whom, instant = (("operation_share", "its operation", "operation_instant_x") if "operation_share" in ceiling.numbers
                                else ("kernel_share", "it", "kernel_instant_x"))
        # the ceiling's own baseline is the profiled run's, a third figure beside the first line's two: said as such;
        # a live server's profile takes the sweep's median (the same tool call), said as that
        whose = "the sweep's median for the profiled setting," if from_sweep(s) else "the profiled run's own"
        # a largest kernel under the profile's dominance threshold is the largest, not a dominant one
        kernel = _kernel(s, ceiling, 60)
        lead = (f"{kernel} dominates the profile: {whom} is" if ceiling.data.get("dominant", True) else
                f"No kernel dominates the profile: the largest, {kernel}, is" if whom == "it" else
                f"No kernel dominates the profile: the largest is {kernel}; {whom} is")
        items.append(f"{lead} {_num(ceiling, share)} of "
                     f"the profiled window; instant, the step would give {_num(ceiling, 'ceiling_tok_s', '.4g')} (projected: "
                     f"{num(ceiling, instant, '.5g', by_spread=False)} {whose} "
                     f"{num(ceiling, 'baseline_tok_s', '.5g', by_spread=False)})"
                     f"{stand_in_caveat(s)}.")
    if grid is not None and "redundancy_factor" in grid.numbers:
        ncu = f"; Nsight Compute: {_num(grid, 'bound')}" if "bound" in grid.numbers else ""
        binds = ((grid.data.get("diagnosis") or {}).get("rewrite_estimate") or {}).get("binding")
        if binds and "binding" in grid.numbers:  # what the counters say binds, not the speed-of-light verdict alone
            ncu = (f"; Nsight Compute: {md_text(binds['short'])} ({finding_link(grid)}, the counters of "
                   f"{md_text(binds['source'])})" + ("" if binds.get("bytes_bind") else ": not the bytes"))
        items.append(f"Its programs load {_num(grid, 'redundancy_factor')} the unique bytes, their inner products a "
                     f"{_num(grid, 'inner_product')}{ncu}.")
    if splitk is not None and "kernel_speedup" in splitk.numbers:
        items.append(f"The rewrite, checked against the original and a float32 reference, made the kernel "
                     f"{_num(splitk, 'kernel_speedup')} faster in the profile and the engine {_num(splitk, 'measured_x', '.4g')} "
                     f"faster in alternating rounds.")
    return [f"{i}. {item}" for i, item in enumerate(items[:4], 1)]


def from_sweep(s: dict[str, Finding]) -> bool:
    """Whether the profiled setting's tok/s is the lever sweep's own figure (one tool call holds both: a live
    server's profile is timed by the sweep's runs, the profiler on only for the trace), not a run of its own."""
    profile, levers = s.get("profile"), s["levers"]
    if profile is None or "setting_tok_s" not in profile.numbers:
        return False
    sweep = {seq for n in levers.numbers.values() for seq in (n.seqs or [])}
    return bool(profile.numbers["setting_tok_s"].seqs) and set(profile.numbers["setting_tok_s"].seqs) <= sweep


def best_setting_outputs(levers: Finding) -> str:
    """Which setting the best tok/s is, and, where its decode output differs from the baseline's beyond the
    tolerance, by how much (the levers step's output check): a faster setting that changes the answers is
    not a free win, and the reader of one sentence must see it."""
    best = levers.data.get("best") or {}
    if not best.get("levers"):
        return ""
    name = "+".join(best["levers"])
    row = next((r for r in levers.data.get("levers") or [] if r.get("name") == name), {})
    out = row.get("output") or {}
    if not out.get("rows_beyond"):
        return f" ({code(name)})"
    return (f" ({code(name)}, which changes {out['rows_beyond']} of {out['rows']} output rows beyond "
            f"{100 * out['rtol']:.0f}%, up to {100 * out['worst_row']:.3g}%)")


def stand_in_caveat(s: dict[str, Finding]) -> str:
    """Beside a ceiling or a "not reachable": the shares are the stand-in's, in a few words from what the run
    records, and where the full statement is; "" when the box is the declared hardware."""
    survey, levers = s["survey"], s["levers"]
    if "stand-in" not in survey.labels:
        return ""
    what = engine_left_out(levers)
    box = survey.data["box"].get("gpu") or "a CPU"
    return (f" (shares measured on the stand-in, {box}" + (f", with {', '.join(what)}" if what else "")
            + f": [the stand-in's limits]({LIMITS_ANCHOR}))")


def stand_in_limits(s: dict[str, Finding], run: dict[str, Any]) -> str:
    """The stand-in's limits, said once: what the box measured the shares with, and what the declared box changes."""
    survey, levers = s["survey"], s["levers"]
    box = next((row[1] for row in (survey.tables[0].rows if survey.tables else []) if row[0] == "device"), "the box")
    lines = [f"Every time share, ceiling and \"not reachable\" in this report was measured on {md_text(box)}"
             + (f" (copy bandwidth {_num(survey, 'copy_gb_s', '.4g')}, measured)" if "copy_gb_s" in survey.numbers else "")
             + ", with the engine as its own notes record it:", ""]
    lines += [f"- {md_text(n)}" for n in engine_limits(levers)]
    bandwidth = declared_bandwidth(run)
    lines += ["", f"The declared {md_text(run.get('declared_gpu') or 'hardware')} has {_num(survey, 'declared_sm_count', 'd')} "
              f"(sm_{fmt(survey.number('declared_sm'), '.0f')}) per GPU"
              + (f" and {bandwidth}" if bandwidth else "; no cited figure for its bandwidth is held, so none is given")
              + ": the shares move there (a smaller weight read with FP8/FP4 weights, another memory system, the TP "
              "all-reduce added), so a ceiling here is the stand-in's, not the deployment's."]
    return "\n".join(lines)


def first_screen(s: dict[str, Finding], decision: dict[str, Any] | None, run: dict[str, Any]) -> str:
    """The lines that follow the title: recommendation and measurement box first (the report's first three lines)."""
    lines = [f"- **Recommendation:** {recommendation(s, decision)}",
             f"- **Measured on:** {measured_on(s, run)}",
             f"- **Not covered by this evidence:** {not_covered(s, run)}",
             f"- **Next bottleneck:** {next_bottleneck(s)}",
             *([f"- **What else the run measured:** {steps}"] if (steps := evidence_beyond(s)) else []),
             "", "### Why", "", *why(s)]
    if "stand-in" in s["survey"].labels:
        lines += ["", "### The stand-in's limits", "", stand_in_limits(s, run)]
    return "\n".join(lines)


def evidence_beyond(s: dict[str, Finding]) -> str:
    """Beside the next bottleneck, what else this run measured that a next step would start from (round 2's
    ``beyond``: the rewrite's profile's other kernel categories, the levers measured moving the baseline up), each
    linked to the finding that holds it; "" where round 2 recorded none."""
    r2, levers = s.get("round2"), s.get("levers")
    beyond = (r2.data.get("beyond") or {}) if r2 is not None else {}
    parts = []
    if beyond.get("categories"):
        shares = ", ".join(f"{md_text(c['category'])} {100 * c['share_of_kernel_time']:.0f}%" for c in beyond["categories"])
        parts.append(f"the rewrite's profile by kernel time: {shares} ({finding_link(r2)})")
    if beyond.get("levers_up") and levers is not None:
        up = ", ".join(f"{code(m['lever'])} {100 * (m['ratio'] - 1):+.1f}%" for m in beyond["levers_up"])
        parts.append(f"levers measured to move the baseline up, before the rewrite: {up} ({finding_link(levers)})")
    return "; ".join(parts) + ("." if parts else "")


def decision_caveat(s: dict[str, Finding], run: dict[str, Any]) -> str:
    """Beside the decision: the deployment's own default for the investigated kernel, which the run did not measure."""
    missed = unmeasured_default_backends(s, run)
    return (" Note: " + "; ".join(missed) + ".") if missed else ""
