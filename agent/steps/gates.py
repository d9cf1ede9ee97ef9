"""Gates: which of the engine's capability-gated fast paths the declared hardware is shut out of."""

from __future__ import annotations

from typing import Any

from agent import stats
from agent.config import Target
from agent.engine_runs import Setting, measured_batch, run_sweep
from agent.engines import engine_for
from agent.evidence import evidence, typed
from agent.session import Session
from agent.state import InvestigationState, finding_for
from agent.steps import Draft
from agent.steps.measurements import output_check, ratio_text, rounds_tok_s, sweep_runs
from schema.finding import Number, Table

SCANNED_KERNELS = 20  # the profile's largest kernels, tied to the gates on their paths
SHOWN_GATES = 25
SKIPPED_TREES = ("test/", "tests/", "benchmark/", "benchmarks/")


def sm_list(sms: list[int] | None, known: list[int]) -> str:
    """'sm_90, sm_100' or, when shorter, 'all but sm_120, sm_121'."""
    if sms is None:
        return "unknown"
    allowed = sorted(set(sms))
    excluded = sorted(set(known) - set(allowed))
    if allowed and excluded and len(excluded) < len(allowed):
        return "all but " + ", ".join(f"sm_{s}" for s in excluded)
    return ", ".join(f"sm_{s}" for s in allowed) or "none"


def allows_text(row: dict[str, Any], known: list[int]) -> str:
    """The SMs a gate row lets through, or which switch decides when the SM does not."""
    if row.get("decided_by") == "env":
        return "any SM; " + ", ".join(row.get("env") or []) + " decides"
    return sm_list(row.get("allows", row.get("sms")), known)


def role_text(row: dict[str, Any]) -> str:
    return "early exit" if row.get("role") == "exits" else "enables"


def reached_by(tie: dict[str, Any]) -> str:
    """The environment on the kernel's own path that reaches it: NAME=value, or the default."""
    if tie.get("reached") is True:
        return "the default environment"
    needed = tie.get("env_to_reach") or {}
    return ", ".join(f"{name}={'|'.join(values)}" for name, values in sorted(needed.items())) or "no environment found"


def relevant_first(rows: list[dict[str, Any]], files: set[str]) -> list[dict[str, Any]]:
    """Gate rows of the engine proper (not its tests or benchmarks), those in the files on the profiled
    kernels' call paths first."""
    engine = [r for r in rows if not r["file"].startswith(SKIPPED_TREES)]
    return sorted(engine, key=lambda r: (r["file"] not in files, r["file"], r["line"]))


def tie_files(ties: list[dict[str, Any]]) -> set[str]:
    files = set()
    for tie in ties:
        for path in tie.get("paths", []):
            files.update(step["at"].split(":")[0] for step in path.get("chain", []))
        files.update(alt["at"].split(":")[0] for alt in tie.get("alternatives", []))
    return files


def split_rows(rows: list[dict[str, Any]], ties: list[dict[str, Any]]) -> tuple[list, list, list]:
    """(failing, failing early-exit guards, early-exit guards passed) among the engine's gate rows,
    failing ones on the tied kernels' paths first. Failing an early-exit guard means taking its
    exit; passing one means going on to the code it guards (a test-truth reading inverts both)."""
    shown = relevant_first([r for r in rows if r["passes"] is False], tie_files(ties))
    shown_exits = [r for r in shown if r.get("role") == "exits"]
    exits_passed = relevant_first([r for r in rows if r.get("role") == "exits" and r["passes"] is True], set())
    return shown, shown_exits, exits_passed


def fallbacks_of(ties: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (fallback kernel, gated-off fast path): {"kernel", "fast_path", "sms", "at"}."""
    return [{"kernel": tie["kernel"], "fast_path": alternative["names"][0], "sms": alternative.get("sms"),
             "at": alternative["at"]}
            for tie in ties for alternative in tie.get("alternatives", [])]


def switches_of(ties: list[dict[str, Any]]) -> list[str]:
    """The environment levers of the tied kernels: switches on each kernel's own path whose value can
    open or close it (a prefill switch on the decode path's fall-through side is not one)."""
    return sorted({lever["env"] for tie in ties for lever in tie.get("levers", []) if "env" in lever})


def headline_for(sm: int, shown: list, shown_exits: list, exits_passed: list, ties: list[dict[str, Any]],
                 unresolved: int) -> str:
    fallbacks = fallbacks_of(ties)
    kernels = "; ".join(
        f"{t['kernel']} is the fallback of "
        f"{', '.join(sorted({f['fast_path'] for f in fallbacks if f['kernel'] == t['kernel']}))}, reached by {reached_by(t)}"
        for t in sorted(ties, key=lambda t: t["kernel"]))
    return (f"sm_{sm} fails {len(shown)} of the engine's capability gates ({len(shown) - len(shown_exits)} paths it "
            f"is not enabled for, {len(shown_exits)} early-exit guards it takes) and passes {len(exits_passed)} "
            f"early-exit guards; {kernels or 'no profiled kernel is tied to a gated-off path'}; {unresolved} unresolved")


def scan_args(source: str | None, sm: int, kernels: list[str], env: dict[str, str]) -> dict[str, Any]:
    return {"source": source, "sm": sm, "kernels": kernels, "env": env}


def measure_what_if(state: InvestigationState, session: Session, target: Target, box_sm: int) -> tuple[list[dict], list[int]]:
    """Measure on the box each engine backend the target names for a fast path the box's gates allow
    and the declared hardware's do not: apart from the deployment's numbers, as a what-if. One
    engine.sweep alternates the profiled setting and the what-ifs (a warm-up of each, then the
    split-K step's number of rounds), so each what-if gets a paired interval of its ratio and its
    output is checked against the profiled setting's, as a lever's is. Each row: backend, sm, tok_s
    and reference_tok_s (each setting's run of median step time among the rounds, projected, as the split-K
    step's are: the two steps' tok/s stand on one basis), x, interval, interval_basis,
    output, seq; or error."""
    profile = finding_for(state, "profile")
    profiled = typed(profile).setting.model_dump()
    device = evidence(state, "survey").box.device
    noise = target.thresholds.noise
    batch = measured_batch(target, device)
    backends = [b for b, sms in sorted(target.engine.what_if_backends.items())
                if box_sm in sms and target.deployment.sm not in sms]
    if not backends:
        return [], []
    reference = Setting(profiled["label"], dict(profiled["env"]), dict(profiled["options"]))
    settings = {"profiled": reference, **{b: Setting(f"what-if {b}", dict(profiled["env"]), dict(profiled["options"]),
                                                       backend=b) for b in backends}}
    plan = [(f"{name}#warmup", setting) for name, setting in settings.items()]
    for r in range(1, noise.rewrite_rounds + 1):
        plan += [(f"{name}#r{r}", setting) for name, setting in settings.items()]
    swept = run_sweep(session, target, device, plan, batch)
    baseline = profile.number("setting_tok_s")
    if not swept["ok"]:
        return [{"backend": b, "sm": box_sm, "tok_s": None, "reference_tok_s": baseline, "x": None,
                 "seq": swept["seq"], "error": swept["error"]} for b in backends], [swept["seq"]]
    runs = sweep_runs([{} for _ in plan], [label for label, _ in plan], swept, batch)
    by_label = {label: run for (label, _), run in zip(plan, runs)}
    references = [by_label[f"profiled#r{r}"] for r in range(1, noise.rewrite_rounds + 1)]
    rows = []
    for b in backends:
        measured = [by_label[f"{b}#r{r}"] for r in range(1, noise.rewrite_rounds + 1)]
        pairs = [(a["step_ms"], m["step_ms"]) for a, m in zip(references, measured) if a["ok"] and m["ok"]]
        failed = [m["error"] for m in measured if not m["ok"]]
        interval = stats.paired_interval(pairs, noise.confidence)
        if interval.ratio is None:
            rows.append({"backend": b, "sm": box_sm, "tok_s": None, "reference_tok_s": baseline, "x": None,
                         "seq": swept["seq"], "error": "; ".join(sorted(set(failed))) or "no round measured both"})
            continue
        ref_sketch = next((a["sketch"] for a in references if a["ok"] and a.get("sketch")), None)
        output = output_check(ref_sketch, [m.get("sketch") for m in measured if m["ok"]], noise.output_rtol)
        scales = [m["scale"] for a, m in zip(references, measured) if a["ok"] and m["ok"]]
        tok_s, ref_tok_s = rounds_tok_s(scales, [p[1] for p in pairs]), rounds_tok_s(scales, [p[0] for p in pairs])
        rows.append({"backend": b, "sm": box_sm, "tok_s": tok_s, "reference_tok_s": ref_tok_s,
                     "x": interval.ratio, "interval": [interval.low, interval.high] if interval.low is not None else None,
                     "interval_basis": (f"{100 * noise.confidence:.0f}% t-interval over {len(pairs)} rounds alternating "
                                        f"the profiled setting and the what-if in one engine process after a warm-up "
                                        f"of each (runs are the unit)" if interval.low is not None
                                        else f"{len(pairs)} paired run(s): {interval.note or 'no interval'}"),
                     "output": output, "failed_runs": len(failed), "seq": swept["seq"]})
    return rows, list(swept.get("seqs") or [swept["seq"]])


def noise_pct(target) -> str:
    return f"{100 * target.thresholds.noise.confidence:.0f}%"


def what_if_table_rows(measured: list[dict]) -> list[list]:
    rows = []
    for m in measured:
        if m.get("x") is None:
            rows.append([m["backend"], f"sm_{m['sm']}", None, m["reference_tok_s"], "-", f"failed: {m.get('error')}",
                         str(m["seq"])])
            continue
        low, high = m.get("interval") or (None, None)
        out = m["output"]
        out_text = (f"not checked: {out['note']}" if out["ok"] is None else
                    ("within" if out["ok"] else "BEYOND") + f" {100 * out['rtol']:.0f}% (median row {100 * out['error']:.2g}%)"
                    + (f"; {out['rows_beyond']} of {out['rows']} rows beyond" if out.get("rows_beyond") else ""))
        rows.append([m["backend"], f"sm_{m['sm']}", m["tok_s"], m["reference_tok_s"], ratio_text(m["x"], low, high),
                     out_text, str(m["seq"])])
    return rows


def scan_gates(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Scan the engine's source on the box for capability gates, evaluated for the declared
    architecture with the deployment's environment, and tie them to the profiled kernels (which are
    fallbacks of a gated-off path, and which switches choose between them). Where the box's
    architecture differs, the same scan for the box and a measurement of the backends its gates
    open are reported apart, as a what-if."""
    survey, profile = finding_for(state, "survey"), finding_for(state, "profile")
    source = typed(survey).software.sglang_dir
    summary = typed(profile).summary if profile else None
    kernels = [k["name"] for k in summary["merged"]["kernels"][:SCANNED_KERNELS]] if summary else []
    env = dict(target.engine.env)
    declared_sm, box_sm = target.deployment.sm, typed(survey).box.sm
    declared = session.call("gates.scan", scan_args(source, declared_sm, kernels, env))
    seqs = [declared["seq"]]
    if not declared["ok"]:
        return Draft(verdict="failed", evidence=seqs, labels=["failed"],
                     headline=f"the gate scan failed: {declared['error']}",
                     data={"fallback_kernels": [], "architectures_passing": []})
    data = declared["data"]
    rows = data["evaluation"]
    ties = [t for t in data["kernels"] if t.get("fallback")]
    shown, shown_exits, exits_passed = split_rows(rows, ties)
    unresolved = data["scan"].get("unresolved", [])
    tables = _tables(declared_sm, data["scan"]["sm_versions"], ties, shown, shown_exits, exits_passed, unresolved)
    labels, what_if_data = [], None
    if box_sm and box_sm != declared_sm:
        box_scan = session.call("gates.scan", scan_args(source, box_sm, kernels, env))
        seqs.append(box_scan["seq"])
        labels.append("what-if")
        failing = [r for r in rows if r["passes"] is False]
        what_if_data = _what_if(state, session, target, box_sm, box_scan, failing, ties, tables, seqs)
    fallback_kernels = fallbacks_of(ties)
    passing = sorted({s for f in fallback_kernels for s in (f["sms"] or []) if s != declared_sm})
    headline = headline_for(declared_sm, shown, shown_exits, exits_passed, ties, len(unresolved))
    scanned = engine_for(target).scanned_source(typed(survey).software, source)
    return Draft(
        headline=headline, verdict="gated" if ties else "open",
        numbers={"failing": Number(value=len(shown), label=f"engine gates sm_{declared_sm} fails", seqs=seqs[:1]),
                 "failing_exits": Number(value=len(shown_exits), label=f"of them, early-exit guards sm_{declared_sm} takes",
                                         seqs=seqs[:1]),
                 "exits_passed": Number(value=len(exits_passed), label=f"early-exit guards sm_{declared_sm} passes",
                                        seqs=seqs[:1]),
                 "unresolved": Number(value=len(unresolved), label="gates the scan could not resolve", seqs=seqs[:1])},
        tables=tables, evidence=seqs, labels=labels,
        data={"fallback_kernels": fallback_kernels, "architectures_passing": passing, "switches": switches_of(ties),
              "failing": [f"{r['file']}:{r['line']}" for r in shown],
              "failing_exits": [f"{r['file']}:{r['line']}" for r in shown_exits],
              "exits_passed": [f"{r['file']}:{r['line']}" for r in exits_passed],
              "ties": ties, "what_if": what_if_data,
              # a deployment's gates are its installed package's: the engine says which one was read
              **({"source": scanned} if scanned else {})},
    )


def _tables(declared_sm: int, known: list[int], ties: list[dict], shown: list[dict], shown_exits: list[dict],
            exits_passed: list[dict], unresolved: list[dict]) -> list[Table]:
    """The declared architecture's tables: the profiled kernels tied to gated-off paths, the gates it
    fails, the early-exit guards it passes, and what the scan could not resolve."""
    gate_rows = [[f"{r['file']}:{r['line']}", f"{role_text(r)} ({r['kind']})", r.get("helper") or "-", allows_text(r, known),
                  (("exit: " + r["alternative"][:72] + " | else ") if r.get("role") == "exits" else "") + r["guarded"][:80]]
                 for r in shown[:SHOWN_GATES]]
    tie_rows = [[tie["kernel"], tie["defined_at"], alternative["at"], ", ".join(alternative["names"][:2]),
                 sm_list(alternative.get("sms"), known), reached_by(tie)]
                for tie in ties for alternative in tie.get("alternatives", [])]
    return [
        Table(title="Profiled kernels that are fallbacks of a gated-off fast path",
              columns=["kernel", "defined at", "gated path at", "fast path", "allowed on", "environment that reaches the kernel"],
              rows=tie_rows),
        Table(title=f"Gates sm_{declared_sm} fails ({len(shown)} in the engine, {len(shown_exits)} of them early-exit "
                    f"guards it takes; the first {min(SHOWN_GATES, len(shown))}, those on the profiled kernels' paths first)",
              columns=["where", "guard (kind)", "helper", "allows", "guards"], rows=gate_rows,
              note="enables: the SMs whose test is true get the path; early exit: the SMs whose test is true "
                   "return/raise there and are shut out of what follows. The full list is in this finding's JSON"),
        Table(title=f"Early-exit guards sm_{declared_sm} passes ({len(exits_passed)}; the first "
                    f"{min(SHOWN_GATES, len(exits_passed))})",
              columns=["where", "test", "exit it does not take", "goes on to"],
              rows=[[f"{r['file']}:{r['line']}", r["test"][:60], r["alternative"][:60], r["guarded"][:60]]
                    for r in exits_passed[:SHOWN_GATES]]),
        Table(title=f"Unresolved ({len(unresolved)}; the first 10)", columns=["where", "why"],
              rows=[[u["at"], u["reason"][:120]] for u in unresolved[:10]]),
    ]


def _what_if(state: InvestigationState, session: Session, target: Target, box_sm: int, box_scan: dict,
             failing: list[dict], ties: list[dict], tables: list[Table], seqs: list[int]) -> dict[str, Any] | None:
    """The box's own scan, apart from the deployment's: the gates it passes that the declared
    architecture fails, and the backends they open measured on the box (measure_what_if). Appends
    its tables to ``tables`` and its log lines to ``seqs``; returns the finding's ``what_if`` data."""
    declared_sm = target.deployment.sm
    if not box_scan["ok"]:
        tables.append(Table(title=f"What-if: the box's scan (sm_{box_sm}) failed", columns=["error"],
                            rows=[[box_scan["error"]]]))
        return None
    differs = [r for r in box_scan["data"]["evaluation"] if r["passes"] is True
               and any(d["id"] == r["id"] and d["passes"] is False for d in failing)]
    measured, measured_seqs = measure_what_if(state, session, target, box_sm)
    seqs += measured_seqs
    tables.append(Table(title=f"What-if: gates the box (sm_{box_sm}) passes and sm_{declared_sm} fails",
                        columns=["where", "helper", "guards"],
                        rows=[[f"{r['file']}:{r['line']}", r.get("helper") or "-", r["guarded"][:80]]
                              for r in relevant_first(differs, tie_files(ties))[:SHOWN_GATES]],
                        note=f"{len(differs)} gates; the box's picture, not the deployment's"))
    if measured:
        tables.append(Table(title="What-if: backends the box's gates open, measured on the box",
                            columns=["backend", "gate passed", "tok/s (projected)", "profiled setting tok/s (projected)",
                                     f"vs the profiled setting [{noise_pct(target)} CI]", "output vs the profiled setting",
                                     "log"],
                            rows=what_if_table_rows(measured),
                            note="stand-in box numbers; never part of the deployment's ceiling; tok/s projected: "
                                 "each setting's run of median step time in the alternating rounds (as the split-K step's)"))
    return {"sm": box_sm, "passes_more": len(differs), "measured": measured}
