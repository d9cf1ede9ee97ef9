"""Report: PROFILE_FINDINGS.md from the findings, with its plots."""

from __future__ import annotations

from agent.rundir import REPORT
from agent.session import Session
from agent.state import Finding, InvestigationState, finding_for, findings_of, next_index
from agent.steps.survey import target_of
from reports import plots
from reports.render import render_report


def make_plots(state: InvestigationState, session: Session) -> dict[str, str]:
    """Render the plots the findings support; each is journaled as an artifact."""
    made = {}
    levers = finding_for(state, "levers")
    if levers:
        settings = [(r["name"], r.get("tok_s")) for r in levers.data["levers"]]
        png = plots.lever_sweep(levers.number("baseline_tok_s"), levers.number("noise_threshold"), settings)
        made["lever_sweep"] = session.store_artifact_bytes(png, "lever_sweep.png")["path"]
    profile = finding_for(state, "profile")
    if profile and profile.data.get("complete"):
        title = "Host-range time share (CPU interpreter)" if profile.data["kind"] == "cpu-host" else "Kernel time share"
        png = plots.kernel_shares(profile.data["summary"]["merged"]["kernels"], title=title)
        made["kernel_shares"] = session.store_artifact_bytes(png, "kernel_shares.png")["path"]
    ceiling = finding_for(state, "ceiling")
    if ceiling:
        png = plots.ceiling(ceiling.number("baseline_tok_s"), ceiling.number("ceiling_tok_s"), ceiling.number("goal_tok_s"))
        made["ceiling"] = session.store_artifact_bytes(png, "ceiling.png")["path"]
    return made


def write_report(state: InvestigationState, session: Session) -> Finding:
    """Render PROFILE_FINDINGS.md (Jinja, numbers formatted explicitly) and its plots from the
    findings and the decision. No tool calls."""
    target = target_of(state)
    plot_paths = make_plots(state, session)
    run = {"run_id": state["run_id"], "target": target.name, "description": target.description.strip(),
           "started": state["started"]}
    text = render_report(findings_of(state), state.get("decision"), run, plot_paths)
    session.run.write_file(REPORT, text.encode())
    return Finding(
        index=next_index(state), step="report",
        headline=f"{REPORT} written from {len(findings_of(state))} findings",
        verdict="written", artifacts={"report": REPORT, **plot_paths},
        data={"plots": plot_paths},
    )
