"""Gates: which of the engine's capability-gated fast paths the declared hardware is shut out of."""

from __future__ import annotations

from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps.survey import target_of

TOP_KERNELS = 20


def scan_gates(state: InvestigationState, session: Session) -> Finding:
    """Scan the engine's source on the box for capability gates, evaluated for the declared
    architecture, and tie them to the profiled kernels (which are fallbacks of a gated-off path).
    When the box's architecture differs, the same scan for it is reported apart, as a what-if."""
    target = target_of(state)
    survey = finding_for(state, "survey")
    profile = finding_for(state, "profile")
    source = survey.data["software"].get("sglang_dir")
    kernels = [k["name"] for k in profile.data["summary"]["merged"]["kernels"][:TOP_KERNELS]] if profile else []
    declared_sm = target.deployment.sm
    box_sm = survey.data["box"]["sm"]
    seqs, scans = [], {}
    for label, sm in [("declared", declared_sm)] + ([("box", box_sm)] if box_sm and box_sm != declared_sm else []):
        result = session.call("gates.scan", {"source": source, "sm": sm, "kernels": kernels})
        seqs.append(result["call_seq"])
        scans[label] = result
    declared = scans["declared"]
    if not declared["ok"]:
        return Finding(index=next_index(state), step="gates", verdict="failed", evidence=seqs, labels=["failed"],
                       headline=f"the gate scan failed: {declared['error']}",
                       data={"fallback_kernels": [], "architectures_passing": []})
    data = declared["data"]
    rows = [[g["where"], g["kind"], g["helper"], g["allows"], _yes(g["passes"]), g["guarded"]] for g in data["gates"]]
    fallbacks = data.get("kernel_ties", [])
    tie_rows = [[t["kernel"], t["reached_by"], t["fast_path"], ", ".join(t.get("switches", [])) or "-"] for t in fallbacks]
    failing = [g for g in data["gates"] if g["passes"] is False]
    passing_elsewhere = sorted({sm for g in failing for sm in (g.get("allowed_sms") or []) if sm != declared_sm})
    tables = [
        Table(title=f"Capability gates for sm_{declared_sm} (declared)", columns=["where", "kind", "helper", "allows", "passes", "guards"], rows=rows),
        Table(title="Profiled kernels tied to gates", columns=["kernel", "reached by", "gated-off fast path", "switches"], rows=tie_rows),
        Table(title="Unresolved", columns=["where", "why"], rows=[[u["where"], u["why"]] for u in data.get("unresolved", [])]),
    ]
    labels = []
    what_if = scans.get("box")
    if what_if is not None and what_if["ok"]:
        box_rows = [[g["where"], g["helper"], g["allows"], _yes(g["passes"]), g["guarded"]]
                    for g in what_if["data"]["gates"] if g["passes"] != _passes(data, g)]
        tables.append(Table(title=f"What-if: the box (sm_{box_sm}) passes differently", columns=["where", "helper", "allows", "passes on box", "guards"],
                            rows=box_rows, note="the box's picture, not the deployment's: reported apart"))
        labels.append("what-if")
    headline = (f"sm_{declared_sm} fails {len(failing)} of {len(data['gates'])} capability gates; "
                f"{len(fallbacks)} profiled kernel(s) tied to a gated-off fast path"
                + (f"; {len(data.get('unresolved', []))} unresolved" if data.get("unresolved") else ""))
    return Finding(
        index=next_index(state), step="gates", headline=headline, verdict="gated" if failing else "open",
        numbers={"gates": Number(value=len(data["gates"]), label="capability gates found", seqs=seqs[:1]),
                 "failing": Number(value=len(failing), label=f"gates sm_{declared_sm} fails", seqs=seqs[:1])},
        tables=tables, evidence=seqs, labels=labels,
        data={"fallback_kernels": fallbacks, "architectures_passing": passing_elsewhere,
              "declared": data, "what_if": what_if["data"] if what_if is not None and what_if["ok"] else None},
    )


def _yes(value) -> str:
    return {True: "yes", False: "no", None: "unknown"}[value]


def _passes(declared: dict, gate: dict):
    match = next((g for g in declared["gates"] if g["where"] == gate["where"] and g["helper"] == gate["helper"]), None)
    return match["passes"] if match else None
