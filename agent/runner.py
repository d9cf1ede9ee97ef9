"""Running investigations: start, resume, replay, render, list. The CLI calls these; so do tests.

Each returns an Outcome whose ``exit_code`` follows the CLI's contract: 0 done, 1 failure (or a
replay that diverged), 2 bad input.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import sys
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agent import consistency
from agent.config import Target, TargetError, load_target, parse_target, with_budget
from agent.engines import backend_for, baseline
from agent.graph import RunContext, build_graph
from agent.rundir import BUNDLE, REPORT, CommitSpec, RunDir, RunDirError, check_runs_dir, lock_holder
from agent.runlog import LOG_NAME, CorruptLog, RunLog, read_events
from agent.session import Divergence, Progress, ReplaySession, Served, Session, SilentProgress
from agent.state import Finding
from agent.steps import StepFailed
from agent.steps.options import resolve_choice
from reports.render import render_finding, render_report
from tools.box import Box
from tools.catalog import run_tool

SGLANG_HINT = "pip install --no-deps sglang==0.5.23"
Ask = Callable[[dict[str, Any]], str | None]


@dataclass
class Outcome:
    status: str  # done | awaiting-decision | failed | diverged | bad-input
    message: str
    run_dir: Path | None = None
    exit_code: int = 0
    details: dict[str, Any] = field(default_factory=dict)


class BadInput(Exception):
    """Input the user must fix; one line."""


# -- start and resume ---------------------------------------------------------------------------


def preflight(target: Target, box: Box) -> None:
    """Check, before any run exists, that the box can run this target at all."""
    record, raw = run_tool(box, "box.survey", {})
    raw.cleanup()
    if not record["ok"]:
        raise BadInput(f"the box cannot be surveyed: {record['error']}")
    software = record["data"]["software"]
    if not software.get("torch"):
        raise BadInput("torch is not installed on the box (the reference engine needs it): pip install torch")
    backend, _ = backend_for(target, baseline(target))
    if backend == "sglang-triton" and not software.get("sglang_dir"):
        raise BadInput(f"sglang is not installed on the box (the {target.engine.attention_env}=triton backend "
                       f"loads its kernel from sglang's source): {SGLANG_HINT}")


def new_run_id(target: Target) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{target.name}-{stamp}-{secrets.token_hex(2)}"


def investigate(target_ref: str, runs_dir: Path, box: Box, decide: str | None, ask: Ask | None = None,
                progress: Progress | None = None, run_id: str | None = None, argv: list[str] | None = None,
                budget: str | None = None) -> Outcome:
    progress = progress or SilentProgress()
    try:
        target, target_path = load_target(target_ref)
        target = with_budget(target, budget)  # in the recorded target, so a replay runs the same rounds
        check_runs_dir(runs_dir)
        preflight(target, box)
        run = RunDir.create(runs_dir, run_id or new_run_id(target))
    except (TargetError, RunDirError, BadInput) as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    log = RunLog.create(run.log_path)
    run.lock()
    first = log.append("run_start", target_name=target.name, target_path=str(target_path),
                       target=target.model_dump(mode="json"), box=box.describe(), decide=decide,
                       argv=argv or [], python=sys.version.split()[0])
    state0 = {"run_id": run.root.name, "started": first["ts"], "target": target.model_dump(mode="json"),
              "box": box.describe(), "findings": [], "decision": None}
    log.append("initial_state", state=state0)
    session = Session(run, log, box, progress)
    return _drive(run, session, log, state0, decide, ask, progress)


def resume(run_path: Path, box: Box, decide: str | None, ask: Ask | None = None,
           progress: Progress | None = None) -> Outcome:
    progress = progress or SilentProgress()
    try:
        run = RunDir.open(run_path)
        run.lock()
    except RunDirError as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    try:
        log = RunLog.reopen(run.log_path)
    except CorruptLog as exc:
        run.unlock()
        return Outcome("failed", str(exc), run.root, 1)
    events = log.events()
    ends = [e for e in events if e["kind"] == "run_end"]
    if ends and ends[-1]["status"] == "done":
        run.unlock()
        return Outcome("done", f"run {run.root.name} is already finished", run.root, 0)
    log.append("attempt_start", box=box.describe(), decide=decide)
    state0 = next(e["state"] for e in events if e["kind"] == "initial_state")
    session = Session(run, log, box, progress)
    return _drive(run, session, log, state0, decide, ask, progress, resuming=True)


def _graph_for(run: RunDir):
    connection = sqlite3.connect(run.checkpoints_path, check_same_thread=False)
    return build_graph(SqliteSaver(connection)), connection


def _pending_interrupt(snapshot) -> dict | None:
    for task in snapshot.tasks:
        if task.interrupts:
            return task.interrupts[0].value
    return None


def _drive(run: RunDir, session: Session, log: RunLog, state0: dict, decide: str | None, ask: Ask | None,
           progress: Progress, resuming: bool = False) -> Outcome:
    """Run the graph to its end or to a decision nobody gave; journal how it ended."""
    graph, connection = _graph_for(run)
    config = {"configurable": {"thread_id": state0["run_id"]}}
    context = RunContext(session=session)
    try:
        snapshot = graph.get_state(config)
        if resuming and snapshot.values:
            sync_commits(run, snapshot.values.get("findings", []))
            pending: Any = None
        else:
            pending = state0
        while True:
            if pending is not None or graph.get_state(config).next:
                for _ in graph.stream(pending, config, context=context, stream_mode="updates", durability="sync"):
                    sync_commits(run, graph.get_state(config).values.get("findings", []))
            snapshot = graph.get_state(config)
            question = _pending_interrupt(snapshot)
            if question is None:
                break
            answer, source = (decide, "--decide") if decide else ((ask(question), "prompt") if ask else (None, None))
            if answer is None:
                log.append("run_end", status="awaiting-decision")
                return Outcome("awaiting-decision", f"run {run.root.name} awaits a decision: python -m agent investigate "
                               f"--resume {run.root} --decide auto|splitk|stop (auto would choose {question['auto']})",
                               run.root, 0)
            choice, note = resolve_choice(answer, question["options"], question["auto"])
            if choice is None:
                log.append("decision_refused", asked=answer, reason=note)
                log.append("run_end", status="awaiting-decision")
                return Outcome("bad-input", f"{note}; the run awaits a decision (resume with --decide)", run.root, 2)
            pending = Command(resume={"choice": choice, "asked": answer, "source": source, "note": note})
            decide = None  # a flag answers one question
        findings = graph.get_state(config).values.get("findings", [])
        sync_commits(run, findings)
        log.append("run_end", status="done")
        final = Finding.model_validate(findings[-1])
        return Outcome("done", f"{run.root / REPORT}", run.root, 0,
                       {"findings": len(findings), "headline": final.headline})
    except (StepFailed, Divergence) as exc:
        log.append("error", step=session.step, message=str(exc))
        log.append("run_end", status="failed")
        return Outcome("failed", f"{session.step or 'run'}: {exc} (resume with: python -m agent investigate --resume {run.root})",
                       run.root, 1)
    except KeyboardInterrupt:
        log.append("error", step=session.step, message="interrupted by the user")
        log.append("run_end", status="interrupted")
        return Outcome("failed", f"interrupted; resume with: python -m agent investigate --resume {run.root}", run.root, 1)
    except Exception as exc:  # a bug or a broken box: journal it whole, fail the run, keep it resumable
        log.append("error", step=session.step, message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        log.append("run_end", status="failed")
        return Outcome("failed", f"{session.step or 'run'} failed: {type(exc).__name__}: {exc} (the traceback is in "
                       f"{run.log_path}; resume with: python -m agent investigate --resume {run.root})", run.root, 1)
    finally:
        connection.close()
        run.unlock()
        progress_close = getattr(progress, "close", None)
        if progress_close:
            progress_close()


# -- commits -------------------------------------------------------------------------------------


def finding_files(finding: Finding) -> dict[str, bytes]:
    return {
        f"findings/{finding.stem}.json": (json.dumps(finding.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode(),
        f"findings/{finding.stem}.md": render_finding(finding).encode(),
    }


def commit_specs(run: RunDir, events: list[dict], findings: list[Finding]) -> list[CommitSpec]:
    """One spec per finding: its files, the artifacts journaled up to its event, its time."""
    specs = []
    for finding in findings:
        payload = finding.model_dump(mode="json")
        matches = [e for e in events if e["kind"] == "finding" and e["finding"] == payload]
        if not matches:
            raise CorruptLog(f"finding {finding.stem} is in the checkpoint but not in {LOG_NAME}")
        event = matches[-1]
        files = finding_files(finding)
        for e in events:
            if e["seq"] > event["seq"]:
                break
            refs = e.get("artifacts", []) if e["kind"] == "tool_result" else [e["artifact"]] if e["kind"] == "artifact" else []
            for ref in refs:
                files[ref["path"]] = run.artifact_path(ref).read_bytes()
        if finding.step == "report":
            files[REPORT] = (run.root / REPORT).read_bytes()
        subject = f"{finding.index:02d} {finding.step}: {finding.headline}"
        specs.append(CommitSpec(subject if len(subject) <= 200 else subject[:197] + "...", files, event["seq"], event["ts"]))
    return specs


def sync_commits(run: RunDir, finding_dicts: list[dict], source_log: Path | None = None) -> list[str]:
    """Write the finding files and make the run's git history one commit per finding."""
    findings = [Finding.model_validate(f) for f in finding_dicts]
    for finding in findings:
        for rel, data in finding_files(finding).items():
            run.write_file(rel, data)
    events = read_events(source_log or run.log_path)
    return run.sync_commits(commit_specs(run, events, findings), log_source=source_log)


# -- replay --------------------------------------------------------------------------------------


def replay(source_path: Path, out_path: Path | None = None, progress: Progress | None = None) -> Outcome:
    """Re-run the recorded run's steps with every tool result served from its journal, into a new
    directory; the findings, commits and report must come out byte for byte the same."""
    progress = progress or SilentProgress()
    try:
        source = RunDir.open(source_path, recorded=True)
        events = read_events(source.log_path)
    except (RunDirError, CorruptLog) as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    served = Served.from_events(events)
    if "report" not in served.findings:
        return Outcome("bad-input", f"run {source.root.name} did not finish (no report finding): replay needs a finished run",
                       exit_code=2)
    initial = next(e for e in events if e["kind"] == "initial_state")["state"]
    try:
        parse_target(initial["target"], f"{source.root / LOG_NAME} (run_start)")
        out_path = out_path or _next_replay_dir(source.root)
        run = RunDir.create(out_path.parent, out_path.name)
    except (TargetError, RunDirError) as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    run.write_file(LOG_NAME, source.log_path.read_bytes())
    session = ReplaySession(run, source, served, run.root / "replay.jsonl", progress)
    graph, connection = _graph_for(run)
    config = {"configurable": {"thread_id": initial["run_id"]}}
    try:
        for _ in graph.stream(initial, config, context=RunContext(session=session), stream_mode="updates",
                              durability="sync"):
            pass
        findings = graph.get_state(config).values["findings"]
        ids = sync_commits(run, findings, source_log=source.log_path)
        original_ids = source.history()
        if ids != original_ids:
            first = next((i for i, (a, b) in enumerate(zip(ids, original_ids)) if a != b), min(len(ids), len(original_ids)))
            raise Divergence(f"commit {first + 1} differs: {ids[first][:12] if first < len(ids) else 'none'} vs "
                             f"{original_ids[first][:12] if first < len(original_ids) else 'none'} in the recorded run")
        if (run.root / REPORT).read_bytes() != (source.root / REPORT).read_bytes():
            raise Divergence(f"{REPORT} differs from the recorded run's")
    except Divergence as exc:
        return Outcome("diverged", f"replay diverged: {exc}", run.root, 1)
    except StepFailed as exc:
        return Outcome("diverged", f"replay diverged: {session.step}: {exc}", run.root, 1)
    finally:
        connection.close()
        getattr(progress, "close", lambda: None)()
    return Outcome("done", f"replay identical: {len(findings)} findings, {len(ids)} commits (HEAD {ids[-1][:12]}), "
                   f"{REPORT} byte for byte", run.root, 0, {"commits": ids})


def _next_replay_dir(source: Path) -> Path:
    n = 1
    while (source.parent / f"{source.name}-replay-{n}").exists():
        n += 1
    return source.parent / f"{source.name}-replay-{n}"


# -- report and listing -------------------------------------------------------------------------


def render(run_path: Path) -> str:
    """The run's report rendered anew from its findings files and journal (nothing is re-measured)."""
    run = RunDir.open(run_path)
    events = read_events(run.log_path)
    findings = [Finding.model_validate(e["finding"]) for e in events if e["kind"] == "finding"]
    latest: dict[int, Finding] = {}
    for finding in findings:
        latest[finding.index] = finding
    ordered = [latest[i] for i in sorted(latest) if latest[i].step != "report"]
    decisions = [e for e in events if e["kind"] == "decision"]
    decision = {k: decisions[-1][k] for k in ("choice", "asked", "source", "note")} if decisions else None
    initial = next(e for e in events if e["kind"] == "initial_state")["state"]
    target = parse_target(initial["target"], str(run.log_path))
    report = next((f for f in findings if f.step == "report"), None)
    plots = report.data.get("plots", {}) if report else {}
    held = consistency.check(ordered, target.model_dump(mode="json"))
    return render_report(ordered, decision, {"run_id": initial["run_id"], "target": target.name,
                                            "description": target.description.strip(), "started": initial["started"]},
                         plots, held)


def run_status(root: Path) -> dict[str, Any]:
    events = read_events(root / LOG_NAME)
    start = next((e for e in events if e["kind"] == "run_start"), {})
    ends = [e for e in events if e["kind"] == "run_end"]
    last_attempt = max((e["attempt"] for e in events), default=0)
    if lock_holder(root) is not None:
        status = "running"
    elif ends and ends[-1]["attempt"] == last_attempt:
        status = ends[-1]["status"]
    else:
        status = "interrupted"
    findings = {e["index"] for e in events if e["kind"] == "finding"}
    return {"run": root.name, "target": start.get("target_name", "?"), "started": start.get("ts", "?"),
            "status": status, "findings": len(findings), "attempts": last_attempt}


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    if not runs_dir.is_dir():
        return []
    rows = []
    for root in sorted(p for p in runs_dir.rglob(LOG_NAME) if (p.parent / ".git").exists() or (p.parent / BUNDLE).exists()):
        try:
            rows.append({**run_status(root.parent), "path": str(root.parent)})
        except (CorruptLog, OSError) as exc:
            rows.append({"run": root.parent.name, "status": f"unreadable: {exc}", "path": str(root.parent)})
    return rows
