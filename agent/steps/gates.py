"""Gates: which of the engine's capability-gated fast paths the declared hardware is shut out of."""

from __future__ import annotations

from typing import Any

from agent.engines import Setting, bench_args, measured_batch
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps.levers import throughput
from agent.steps.survey import target_of

TOP_KERNELS = 20
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


def relevant_first(rows: list[dict[str, Any]], files: set[str]) -> list[dict[str, Any]]:
    """Failing gates of the engine proper (not its tests or benchmarks), those on the profiled
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


def scan_args(source: str | None, sm: int, kernels: list[str], env: dict[str, str]) -> dict[str, Any]:
    return {"source": source, "sm": sm, "kernels": kernels, "env": env}


def measure_what_if(state: InvestigationState, session: Session, box_sm: int) -> tuple[list[list], list[int]]:
    """Measure on the box each engine backend the target names for a fast path the box's gates allow
    and the declared hardware's do not: apart from the deployment's numbers, as a what-if."""
    target = target_of(state)
    profile = finding_for(state, "profile")
    profiled = profile.data["setting"]
    device = finding_for(state, "survey").data["box"]["device"]
    rows, seqs = [], []
    for backend, sms in sorted(target.engine.what_if_backends.items()):
        if box_sm not in sms or target.deployment.sm in sms:
            continue
        setting = Setting(f"what-if {backend}", dict(profiled["env"]), dict(profiled["options"]), backend=backend)
        result = session.call("engine.bench", bench_args(target, device, setting, [measured_batch(target, device)]))
        seqs.append(result["call_seq"])
        baseline = profile.number("setting_tok_s")
        if result["ok"]:
            tok_s = throughput(result, measured_batch(target, device))["tok_s"]
            rows.append([backend, f"sm_{box_sm}", tok_s, baseline, tok_s / baseline, str(result["call_seq"])])
        else:
            rows.append([backend, f"sm_{box_sm}", None, baseline, None, f"failed: {result['error']}"])
    return rows, seqs


def scan_gates(state: InvestigationState, session: Session) -> Finding:
    """Scan the engine's source on the box for capability gates, evaluated for the declared
    architecture with the deployment's environment, and tie them to the profiled kernels (which are
    fallbacks of a gated-off path, and which switches choose between them). Where the box's
    architecture differs, the same scan for the box and a measurement of the backends its gates
    open are reported apart, as a what-if."""
    target = target_of(state)
    survey, profile = finding_for(state, "survey"), finding_for(state, "profile")
    source = survey.data["software"].get("sglang_dir")
    kernels = [k["name"] for k in profile.data["summary"]["merged"]["kernels"][:TOP_KERNELS]] if profile else []
    env = dict(target.engine.env)
    declared_sm, box_sm = target.deployment.sm, survey.data["box"]["sm"]
    declared = session.call("gates.scan", scan_args(source, declared_sm, kernels, env))
    seqs = [declared["call_seq"]]
    if not declared["ok"]:
        return Finding(index=next_index(state), step="gates", verdict="failed", evidence=seqs, labels=["failed"],
                       headline=f"the gate scan failed: {declared['error']}",
                       data={"fallback_kernels": [], "architectures_passing": []})
    data = declared["data"]
    known = data["scan"]["sm_versions"]
    rows = data["evaluation"]
    ties = [t for t in data["kernels"] if t.get("fallback")]
    failing = [r for r in rows if r["passes"] is False]
    shown = relevant_first(failing, tie_files(ties))
    gate_rows = [[f"{r['file']}:{r['line']}", r["kind"], r.get("helper") or "-", sm_list(r.get("sms"), known),
                  r["guarded"][:80]] for r in shown[:SHOWN_GATES]]
    tie_rows = []
    fallback_kernels = []
    for tie in ties:
        for alternative in tie.get("alternatives", []):
            tie_rows.append([tie["kernel"], tie["defined_at"], alternative["at"], ", ".join(alternative["names"][:2]),
                             sm_list(alternative.get("sms"), known),
                             "; ".join(f"{e}={'|'.join(v)}" for e, v in sorted(tie.get("env_to_reach", {}).items()))])
            fallback_kernels.append({"kernel": tie["kernel"], "fast_path": alternative["names"][0],
                                     "sms": alternative.get("sms"), "at": alternative["at"]})
    switches = sorted({lever["env"] for tie in ties for lever in tie.get("levers", [])})
    unresolved = data["scan"].get("unresolved", [])
    tables = [
        Table(title="Profiled kernels that are fallbacks of a gated-off fast path",
              columns=["kernel", "defined at", "gated path at", "fast path", "allowed on", "environment that reaches the kernel"],
              rows=tie_rows),
        Table(title=f"Gates sm_{declared_sm} fails ({len(shown)} in the engine; the first {min(SHOWN_GATES, len(shown))}, "
                    "those on the profiled kernels' paths first)",
              columns=["where", "kind", "helper", "allows", "guards"], rows=gate_rows,
              note="the full list is in this finding's JSON"),
        Table(title=f"Unresolved ({len(unresolved)}; the first 10)", columns=["where", "why"],
              rows=[[u["at"], u["reason"][:120]] for u in unresolved[:10]]),
    ]
    labels, what_if_data = [], None
    if box_sm and box_sm != declared_sm:
        box_scan = session.call("gates.scan", scan_args(source, box_sm, kernels, env))
        seqs.append(box_scan["call_seq"])
        labels.append("what-if")
        if box_scan["ok"]:
            differs = [r for r in box_scan["data"]["evaluation"] if r["passes"] is True
                       and any(d["id"] == r["id"] and d["passes"] is False for d in failing)]
            measured, measured_seqs = measure_what_if(state, session, box_sm)
            seqs += measured_seqs
            tables.append(Table(title=f"What-if: gates the box (sm_{box_sm}) passes and sm_{declared_sm} fails",
                                columns=["where", "helper", "guards"],
                                rows=[[f"{r['file']}:{r['line']}", r.get("helper") or "-", r["guarded"][:80]]
                                      for r in relevant_first(differs, tie_files(ties))[:SHOWN_GATES]],
                                note=f"{len(differs)} gates; the box's picture, not the deployment's"))
            if measured:
                tables.append(Table(title="What-if: backends the box's gates open, measured on the box",
                                    columns=["backend", "gate passed", "tok/s", "profiled setting tok/s", "vs profiled", "log"],
                                    rows=measured, note="stand-in box numbers; never part of the deployment's ceiling"))
            what_if_data = {"sm": box_sm, "passes_more": len(differs), "measured": measured}
        else:
            tables.append(Table(title=f"What-if: the box's scan (sm_{box_sm}) failed", columns=["error"],
                                rows=[[box_scan["error"]]]))
    passing = sorted({s for f in fallback_kernels for s in (f["sms"] or []) if s != declared_sm})
    headline = (f"sm_{declared_sm} fails {len(shown)} of the engine's capability gates; "
                + (f"{', '.join(sorted({t['kernel'] for t in ties}))} is the fallback of "
                   f"{', '.join(sorted({f['fast_path'] for f in fallback_kernels}))}, reached by "
                   f"{', '.join(switches) or 'default'}" if ties else "no profiled kernel is tied to a gated-off path")
                + f"; {len(unresolved)} unresolved")
    return Finding(
        index=next_index(state), step="gates", headline=headline, verdict="gated" if ties else "open",
        numbers={"failing": Number(value=len(shown), label=f"engine gates sm_{declared_sm} fails", seqs=seqs[:1]),
                 "unresolved": Number(value=len(unresolved), label="gates the scan could not resolve", seqs=seqs[:1])},
        tables=tables, evidence=seqs, labels=labels,
        data={"fallback_kernels": fallback_kernels, "architectures_passing": passing, "switches": switches,
              "failing": [f"{r['file']}:{r['line']}" for r in shown], "ties": ties, "what_if": what_if_data},
    )
