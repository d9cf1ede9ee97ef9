"""Report: the consistency check over all findings, then PROFILE_FINDINGS.md with its plots, and the same
report as one self-contained page, PROFILE_FINDINGS.html."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from agent import consistency
from agent.config import Target
from agent.evidence import data_of
from agent.rundir import GATES_APPENDIX, HTML_REPORT, REPORT
from agent.runlog import read_events
from agent.session import Session
from agent.state import InvestigationState, finding_for, findings_of
from agent.steps import Draft
from agent.steps.measurements import ratio_text
from agent.steps.next_steps import next_steps
from reports import plots
from reports.html import render_html
from reports.render import render_gates_appendix, render_report
from schema.finding import Finding, Number


def make_plots(state: InvestigationState, session: Session) -> dict[str, str]:
    """Render the plots the findings support; each is journaled as an artifact."""
    made = {}
    levers = finding_for(state, "levers")
    if levers:
        detectable, floor = levers.numbers.get("smallest_detectable_effect"), levers.numbers.get("min_effect")
        png = plots.lever_sweep(lever_rows(levers), detectable.value if detectable else None,
                                floor.value if floor else None)
        made["lever_sweep"] = session.store_artifact_bytes(png, "lever_sweep.png")["path"]
    profile = finding_for(state, "profile")
    if profile and data_of(profile).complete:
        title = "Host-range time share (CPU interpreter)" if data_of(profile).kind == "cpu-host" else "Kernel time share"
        png = plots.kernel_shares(data_of(profile).summary["merged"]["kernels"], title=title)
        made["kernel_shares"] = session.store_artifact_bytes(png, "kernel_shares.png")["path"]
    ceiling = finding_for(state, "ceiling")
    if ceiling:
        tok_s = ceiling.number("baseline_tok_s")
        bounds = [("kernel instant", tok_s * ceiling.number("kernel_instant_x"))]
        if "operation_instant_x" in ceiling.numbers:
            bounds.append(("operation instant", tok_s * ceiling.number("operation_instant_x")))
        png = plots.ceiling(tok_s, bounds, ceiling.number("goal_tok_s"))
        made["ceiling"] = session.store_artifact_bytes(png, "ceiling.png")["path"]
    return made


# Levers drawn on the plot: those whose ratio measures the lever. A "not comparable" lever's ratio
# measures different execution (interpreted against compiled), so it is named, not drawn.
_DRAWN = {"moves up", "moves down", "no change detected", "changes the output"}


def lever_rows(levers: Finding) -> list[dict]:
    """The lever plot's rows from the levers finding: each lever's ratio and interval as the finding
    holds them, and the text its row of the report's table gives (the same ``ratio_text``), so the
    plot never shows a number the table does not."""
    rows = []
    for r in data_of(levers).levers:
        drawn = r.status in _DRAWN and r.ratio is not None
        low, high = r.interval or (None, None)
        if drawn:
            text = f"{ratio_text(r.ratio, low, high)} {r.status}"
        elif r.status in ("not tried", "failed"):
            text = f"not run ({r.status})"
        else:
            text = f"{r.status}: not drawn (see the table)"
        rows.append({"name": r.name, "status": r.status, "text": text, "ratio": r.ratio if drawn else None,
                     "low": low if drawn else None, "high": high if drawn else None})
    return rows


def journal_timing(events: list[dict]) -> dict | None:
    """How long the investigation took by its journal: from its first line to the start of the report
    step (the last one, should the report have been redone), with the attempts it took. The same in a
    replay or a regeneration, whose journals keep the recorded times."""
    starts = [e for e in events if e.get("kind") == "step_start" and e.get("step") == "report"]
    if not events or not starts:
        return None
    first, last = events[0], starts[-1]
    elapsed = (datetime.fromisoformat(last["ts"]) - datetime.fromisoformat(first["ts"])).total_seconds()
    return {"first_ts": first["ts"], "report_ts": last["ts"], "report_seq": last["seq"], "elapsed_s": elapsed,
            "attempts": max(e.get("attempt", 1) for e in events[: last["seq"]]),
            "regenerated_from": first.get("regenerated_from")}


# The declared GPU's cited rates (issue 29's sm_120 projection): the one place the project holds a cited
# bandwidth for it. The report quotes it beside the box's measured one, with its citation, only for that GPU.
DECLARED_RATES = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "sm120-20261206" / "projection_sm120.json"


def declared_rates(target: Target) -> dict | None:
    """The cited memory bandwidth of the target's declared GPU, or None where the project holds none for it."""
    try:
        projection = json.loads(DECLARED_RATES.read_text())
    except (OSError, ValueError):
        return None
    if projection.get("device", {}).get("name") != target.deployment.gpu or "memory_GBps" not in projection.get("rates", {}):
        return None
    rate = projection["rates"]["memory_GBps"]
    return {"memory_GBps": {"value": rate["value"], "what": rate["what"], "citations": rate["citations"][:1],
                            "source": DECLARED_RATES.relative_to(DECLARED_RATES.parents[3]).as_posix()}}


def report_run(run_id: str, started: str, target: Target, before: int, timing: dict | None, rates: dict | None,
               steps: dict | None = None) -> dict:
    """What the report reads of the run besides its findings: the target's name and description, the
    journal's timing, the declared GPU's cited rates (held by the report finding, the ``before + 1``-th)
    and the engine environment the target pinned (the first screen names a default it pinned away from); the
    next steps as the report finding holds them (agent.steps.next_steps; never computed anew from a render)."""
    return {"run_id": run_id, "target": target.name, "description": target.description.strip(), "started": started,
            "timing": timing, "declared_rates": rates, "engine_env": dict(target.engine.env),
            "declared_gpu": f"{target.deployment.gpus}x {target.deployment.gpu}",
            "report_stem": f"[{before + 1:02d}-report](findings/{before + 1:02d}-report.md)", "next_steps": steps}


def write_report(state: InvestigationState, session: Session, target: Target) -> Draft:
    """First hold every measurement against every bound the run stated for the same setting, and
    every prediction against its measurement (``agent.consistency``); then render PROFILE_FINDINGS.md
    (Jinja, numbers formatted explicitly) and its plots from the findings, the decision and that
    check, whose failures get their own section. No tool calls."""
    plot_paths = make_plots(state, session)
    timing = journal_timing(read_events(session.run.log_path))
    findings = findings_of(state)
    rates = declared_rates(target)
    # from the run's own traces (artifacts already stored): no tool call, no new measurement
    steps = next_steps(findings, lambda path: session.artifact_path({"path": path}))
    run = report_run(state["run_id"], state["started"], target, len(findings), timing, rates, steps)
    held = consistency.check(findings, target.model_dump(mode="json"))
    text = render_report(findings, state.get("decision"), run, plot_paths, held)
    session.run.write_file(REPORT, text.encode())
    appendix = render_gates_appendix(findings)
    if appendix is not None:  # committed with the report (agent.commits), compared by a replay
        session.run.write_file(GATES_APPENDIX, appendix.encode())
    # From the Markdown as written, so the page cannot say what the Markdown does not.
    session.run.write_file(HTML_REPORT, render_html(text, session.run.root).encode())
    failures = held.failures
    return Draft(
        # "before it": the report is a finding too, and the result block and `runs` count it (issue 31)
        headline=(f"{REPORT} written from the {len(findings)} findings before it; the consistency check held "
                  f"{len(held.checks)} bound/prediction against measurement pair(s): "
                  + (f"{len(failures)} where the model failed" if failures else "none failed")),
        verdict="model-failed" if failures else "written",
        artifacts={"report": REPORT, **({"gates_appendix": GATES_APPENDIX} if appendix is not None else {}), **plot_paths},
        numbers=({"declared_memory_GBps": Number(value=rates["memory_GBps"]["value"], unit="GB/s",
                                                 label=f"declared GPU: {rates['memory_GBps']['what']}, cited "
                                                       f"({rates['memory_GBps']['citations'][0]['url']}; {rates['memory_GBps']['source']})",
                                                 cited=rates["memory_GBps"]["citations"][0]["url"])}
                 if rates else {}),
        data={"plots": plot_paths, "consistency": held.model_dump(mode="json"), "timing": timing,
              **({"declared_rates": rates} if rates else {}),
              **({"next_steps": run["next_steps"]} if run["next_steps"] else {})},
    )
