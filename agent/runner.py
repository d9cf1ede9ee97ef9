"""Running investigations: start, resume, replay, render, list. The CLI calls these; so do tests.

Each returns an Outcome whose ``exit_code`` follows the CLI's contract (tools/exitcodes.py): 0 done,
1 failure (or a replay that diverged), 2 bad input, 3 awaiting a decision, 130 interrupted.
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

import jinja2
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agent import consistency, redact
from agent.commits import sync_commits
from agent.evidence import data_of
from agent.box.choice import agent_end
from agent.box.interface import Box
from agent.box.ssh_client import BoxUnreachable
from agent.preflight import BadInput, preflight
from agent.config import Target, TargetError, load_target, parse_target, with_budget
from agent.engines import with_stand_in
from agent.graph import RunContext, build_graph
from agent.progress import Progress, SilentProgress
from agent.rundir import (BUNDLE, GATES_APPENDIX, HTML_REPORT, REPORT, RunDir, RunDirError, check_run_id, check_runs_dir,
                          lock_holder, resolve_run)
from agent.runlog import (FORMAT, LOG_NAME, CorruptLog, JournalWriteError, RunLog, UnknownFormat, fault_point,
                          journal_format, read_events, target_of)
from agent.session import Divergence, Session
from agent.session.live import LiveSession
from agent.session.replay import ReplaySession, Served
from agent.steps import StepFailed
from agent.steps.options import resolve_choice
from agent.steps.report import report_run
from reports.render import render_report
from schema.finding import Finding
from tools import exitcodes

REPLAY_NOTES = "replay.jsonl"  # a replay's own journal (what it served and how it ended), never committed
Ask = Callable[[dict[str, Any]], str | None]


@dataclass
class Outcome:
    status: str  # done | awaiting-decision | failed | diverged | bad-input | interrupted
    message: str
    run_dir: Path | None = None
    exit_code: int = 0  # set from the status: one code per outcome, whatever a caller passed
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.exit_code = exitcodes.for_status(self.status)


def new_run_id(target: Target) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{target.name}-{stamp}-{secrets.token_hex(2)}"


def investigate(target_ref: str, runs_dir: Path, box: Box, decide: str | None, ask: Ask | None = None,
                progress: Progress | None = None, run_id: str | None = None, argv: list[str] | None = None,
                budget: str | None = None, stand_in: bool = False, engine: str | None = None) -> Outcome:
    progress = progress or SilentProgress()
    try:
        target, target_path = load_target(target_ref)
        if engine is not None and engine != target.engine.kind:
            raise BadInput(f"--engine {engine}: target {target.name}'s engine is {target.engine.kind} (its engine.kind)")
        target = with_budget(target, budget)  # in the recorded target, so a replay runs the same rounds
        if stand_in:
            target = with_stand_in(target)  # likewise: a replay launches what the run launched
        secrets = redact.target_secrets(target)  # kept in memory only: the run records the redacted target
        redact.remember(secrets.values())
        target = redact.redact_target(target)
        if run_id is not None:
            check_run_id(run_id)  # before the box is surveyed: a bad name costs nothing
        check_runs_dir(runs_dir)
        preflight(target, box)
        run = RunDir.create(runs_dir, run_id or new_run_id(target))
        _attach(box, run)
    except (TargetError, RunDirError, BadInput) as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    log = RunLog.create(run.log_path)
    run.lock()
    try:
        first = log.append("run_start", format=FORMAT, target_name=target.name, target_path=str(target_path),
                           target=target.model_dump(mode="json"), box=box.describe(), agent=agent_end(),
                           decide=decide, argv=argv or [], python=sys.version.split()[0])
        state0 = {"run_id": run.root.name, "started": first["ts"], "target": target.model_dump(mode="json"),
                  "box": box.describe(), "agent": first["agent"], "findings": [], "decision": None}
        log.append("initial_state", state=state0)
    except JournalWriteError as exc:
        run.unlock()
        return Outcome("failed", f"the run cannot start: {exc}", run.root, 1)
    session = LiveSession(run, log, box, progress, secrets=secrets)
    return drive(run, session, log, state0, decide, ask)


def resume(run_ref: str | Path, box: Box, decide: str | None, ask: Ask | None = None,
           progress: Progress | None = None, runs_dir: Path | None = None, target_ref: str | None = None,
           argv: list[str] | None = None, budget: str | None = None, stand_in: bool = False,
           engine: str | None = None) -> Outcome:
    """Continue a run named by its path or by its id under ``runs_dir``. With ``target_ref``, the target
    must be the one the run records (it is refused otherwise: the run always continues its own); so must
    ``budget``, ``stand_in`` and ``engine`` where given, which the recorded target fixed. ``decide`` and
    ``box`` are the caller's to choose (the CLI reuses the run's own: ``command_lines``); ``argv``, the
    resuming command line, is journaled with them."""
    progress = progress or SilentProgress()
    try:
        run = RunDir.open(resolve_run(run_ref, runs_dir))
        journal_format(read_events(run.log_path), run.log_path)  # before anything is appended to it
        run.lock()
    except (RunDirError, UnknownFormat) as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    except CorruptLog as exc:  # a line before the last is not JSON: the run is damaged, not the command
        return Outcome("failed", str(exc), run.root, 1)
    try:
        log = RunLog.reopen(run.log_path)
        events = log.events()
        state0 = initial_state(events, run.log_path)
        if target_ref is not None:
            _same_target(target_ref, run, state0)
        if budget is not None or stand_in or engine is not None:
            _same_settings(run, state0, budget, stand_in, engine)
    except BadInput as exc:
        run.unlock()
        return Outcome("bad-input", str(exc), run.root, 2)
    except (CorruptLog, JournalWriteError) as exc:
        run.unlock()
        return Outcome("failed", str(exc), run.root, 1)
    ends = [e for e in events if e["kind"] == "run_end"]
    if ends and ends[-1]["status"] == "done":
        try:  # a crash between the run_end line and its commit: the final commit is made now
            findings = _sync_finished(run)
        finally:
            run.unlock()
        return Outcome("done", f"run {run.root.name} is already finished", run.root, 0,
                       {"findings": len(findings), "headline": findings[-1]["headline"]} if findings else {})
    _attach(box, run)
    try:
        log.append("attempt_start", box=box.describe(), agent=agent_end(), decide=decide, argv=argv or [])
    except JournalWriteError as exc:
        run.unlock()
        return Outcome("failed", str(exc), run.root, 1)
    session = LiveSession(run, log, box, progress, secrets=redact.secrets_for_resume(events))
    return drive(run, session, log, state0, decide, ask, resuming=True)


def _attach(box: Box, run: RunDir) -> None:
    """An SSH box keeps its directory on the host per run: named by the run's id, so a resume finds it."""
    attach = getattr(box, "attach", None)
    if attach is not None:
        attach(run.root.name)


def _same_target(target_ref: str, run: RunDir, state0: dict) -> None:
    """BadInput unless ``target_ref`` is the target the run records (its budget aside, which the run fixed)."""
    try:
        target, path = load_target(target_ref)
    except TargetError as exc:
        raise BadInput(str(exc)) from None
    recorded = parse_target(state0["target"], str(run.log_path))
    if target.name != recorded.name:
        raise BadInput(f"run {run.root.name} investigates target {recorded.name}, not {target.name} ({path}): "
                       f"resume it without a TARGET, or start a new run for {target.name}")
    target = with_budget(target, recorded.thresholds.noise.budget)
    if redact.redact_target(target).model_dump(mode="json") != recorded.model_dump(mode="json"):
        raise BadInput(f"target {target.name} ({path}) changed since run {run.root.name} started: the run continues "
                       f"with the target it recorded; resume it without a TARGET, or start a new run")


def _same_settings(run: RunDir, state0: dict, budget: str | None, stand_in: bool, engine: str | None) -> None:
    """BadInput when a resume asks for a budget, the stand-in or an engine the run was not started with:
    they are in its recorded target, and a run measured half one way and half another is not one run."""
    try:
        recorded = parse_target(state0["target"], str(run.log_path))
    except TargetError as exc:
        raise BadInput(f"run {run.root.name}'s recorded target cannot be read to compare: {exc}") from None
    started = recorded.thresholds.noise.budget
    if budget is not None and budget != started:
        raise BadInput(f"--budget {budget}: run {run.root.name} was started with the {started} budget and keeps it; "
                       f"resume it without --budget, or start a new run")
    if stand_in and not (recorded.engine.server is not None and recorded.engine.server.stand_in):
        raise BadInput(f"--stand-in: run {run.root.name} was started without the stand-in server and keeps its "
                       f"server; resume it without --stand-in, or start a new run")
    if engine is not None and engine != recorded.engine.kind:
        raise BadInput(f"--engine {engine}: run {run.root.name} runs the {recorded.engine.kind} engine")


def command_lines(run_ref: str | Path, runs_dir: Path | None = None) -> list[list[str]]:
    """The command lines that started and resumed the run (run_start's and each attempt_start's argv,
    oldest first); a run started through this API records none, and its ``--decide`` stands in for one.
    [] when the run cannot be read (resume says why)."""
    try:
        events = read_events(resolve_run(run_ref, runs_dir) / LOG_NAME)
    except (RunDirError, CorruptLog, OSError):
        return []
    lines = []
    for event in events:
        if event["kind"] in ("run_start", "attempt_start"):
            argv = list(event.get("argv") or [])
            if not argv and event["kind"] == "run_start" and event.get("decide"):
                argv = ["investigate", "--decide", event["decide"]]
            lines.append(argv)
    return lines


def resume_command(run: RunDir, decide: str | None, box: Box | None, target: dict) -> str:
    """The command that continues the run, and the options of the run's own it keeps without being told."""
    kept = [f"--decide {decide}"] if decide else []
    described = box.describe() if box is not None else {}
    if described.get("kind") == "ssh":
        kept.append(f"--box ssh://{described['target']}")
    target = target if isinstance(target, dict) else {}  # a recorded target gone bad fails in the run, not here
    budget = ((target.get("thresholds") or {}).get("noise") or {}).get("budget")
    if budget and budget != "normal":
        kept.append(f"--budget {budget}")
    if ((target.get("engine") or {}).get("server") or {}).get("stand_in"):
        kept.append("--stand-in")
    keeps = f"it keeps the run's {', '.join(kept)}" if kept else "it keeps the options the run was started with"
    return f"python -m agent investigate --resume {run.root} ({keeps})"


def _sync_finished(run: RunDir) -> list[dict]:
    """Make the finished run's commits (those a crash after its run_end left unmade); its findings."""
    graph, connection = _graph_for(run)
    try:
        values = graph.get_state({"configurable": {"thread_id": _run_thread(run)}}).values
    finally:
        connection.close()
    if values:
        sync_commits(run, values.get("findings", []))
    return (values or {}).get("findings", [])


def initial_state(events: list[dict], log_path: Path) -> dict:
    """The graph's input the journal recorded; a journal without one is corrupt (cut before the run began)."""
    state = next((e["state"] for e in events if e["kind"] == "initial_state"), None)
    if state is None:
        raise CorruptLog(f"{log_path}: no initial_state event (the journal was cut before the run began)")
    return {**state, "target": target_of(state, events)}


def _run_thread(run: RunDir) -> str:
    return initial_state(read_events(run.log_path), run.log_path)["run_id"]


def _graph_for(run: RunDir):
    connection = sqlite3.connect(run.checkpoints_path, check_same_thread=False)
    return build_graph(SqliteSaver(connection)), connection


def _pending_interrupt(snapshot) -> dict | None:
    for task in snapshot.tasks:
        if task.interrupts:
            return task.interrupts[0].value
    return None


def drive(run: RunDir, session: Session, log: RunLog, state0: dict, decide: str | None, ask: Ask | None,
          resuming: bool = False) -> Outcome:
    """Run the graph from ``state0`` (or, ``resuming``, from the last checkpoint the journal proves) to its
    end or to a decision nobody gave, through ``session``; journal how it ended. A new run, a resumed one
    and a regenerated one (agent.regenerate) all go through here."""
    graph, connection = _graph_for(run)
    config = {"configurable": {"thread_id": state0["run_id"]}}
    findings_now = lambda: graph.get_state(config).values.get("findings", [])  # noqa: E731
    again = resume_command(run, decide, getattr(session, "box", None), state0["target"])
    try:
        # inside the try: a recorded target that no longer validates fails the run as a step's error does
        context = RunContext(session=session, target=parse_target(state0["target"], f"{run.log_path} (initial_state)"))
        snapshot = graph.get_state(config)
        if resuming and snapshot.values:
            snapshot = _back_to_proven(graph, config, run, log)
            sync_commits(run, snapshot.values.get("findings", []))
            pending: Any = None
        else:
            pending = state0
        while True:
            if pending is not None or graph.get_state(config).next:
                for update in graph.stream(pending, config, context=context, stream_mode="updates", durability="sync"):
                    fault_point(f"checkpoint:{next(iter(update))}")
                    sync_commits(run, findings_now())
            snapshot = graph.get_state(config)
            question = _pending_interrupt(snapshot)
            if question is None:
                break
            answer, source = (decide, "--decide") if decide else ((ask(question), "prompt") if ask else (None, None))
            if answer is None:
                log.append("run_end", status="awaiting-decision")
                sync_commits(run, findings_now())
                return Outcome("awaiting-decision", f"run {run.root.name} awaits a decision: python -m agent investigate "
                               f"--resume {run.root} --decide auto|splitk|stop (auto would choose {question['auto']})",
                               run.root, exitcodes.AWAITING_DECISION)
            choice, note = resolve_choice(answer, question["options"], question["auto"])
            if choice is None:
                log.append("decision_refused", asked=answer, reason=note)
                log.append("run_end", status="awaiting-decision")
                sync_commits(run, findings_now())
                return Outcome("bad-input", f"{note}; the run awaits a decision (resume with --decide)", run.root, 2)
            pending = Command(resume={"choice": choice, "asked": answer, "source": source, "note": note})
            decide = None  # a flag answers one question
        findings = findings_now()
        log.append("run_end", status="done")
        fault_point("run_end")
        sync_commits(run, findings)  # the last commit holds the journal through this run_end
        final = Finding.model_validate(findings[-1])
        return Outcome("done", f"{run.root / REPORT}", run.root, 0,
                       {"findings": len(findings), "headline": final.headline})
    except JournalWriteError as exc:  # nothing more can be journaled: say so, and where the journal ends
        return Outcome("failed", f"{session.step or 'run'}: the journal cannot be written: {exc}; it holds "
                       f"{log.next_seq - 1} whole lines (free space, then resume with: {again})", run.root, 1)
    except (StepFailed, Divergence) as exc:
        note = _end_run(run, log, findings_now, "failed", step=session.step, message=str(exc))
        return Outcome("failed", f"{session.step or 'run'}: {exc}{note} (resume with: {again})", run.root, 1)
    except BoxUnreachable as exc:  # the box went (or never came back): nothing it ran is lost, the call re-runs
        note = _end_run(run, log, findings_now, "failed", step=session.step, message=str(exc))
        return Outcome("failed", f"{session.step or 'run'}: {exc}{note} (when the box is back, resume with: {again})",
                       run.root, 1)
    except KeyboardInterrupt:
        run.restart_git()
        note = _end_run(run, log, findings_now, "interrupted", step=session.step, message="interrupted by the user")
        return Outcome("interrupted", f"interrupted{note}; resume with: {again}", run.root, exitcodes.INTERRUPTED)
    except Exception as exc:  # a bug or a broken box: journal it whole, fail the run, keep it resumable
        note = _end_run(run, log, findings_now, "failed", step=session.step, message=f"{type(exc).__name__}: {exc}",
                        traceback=traceback.format_exc())
        return Outcome("failed", f"{session.step or 'run'} failed: {type(exc).__name__}: {exc}{note} (the traceback is in "
                       f"{run.log_path}; resume with: {again})", run.root, 1)
    finally:
        connection.close()
        run.unlock()


def _end_run(run: RunDir, log: RunLog, findings_now: Callable[[], list[dict]], status: str, **error: Any) -> str:
    """Journal the error and the run's end, then commit so that the last commit holds them. Returns ''
    or a note of what could not be written (the run has failed already; this must not hide why)."""
    try:
        log.append("error", **error)
        log.append("run_end", status=status)
    except JournalWriteError as exc:
        return f" (the journal could not record it: {exc})"
    try:
        sync_commits(run, findings_now())
    except Exception as exc:  # noqa: BLE001 -- reported in the outcome, not swallowed
        return f" (its final commit could not be made: {type(exc).__name__}: {exc})"
    return ""


def _back_to_proven(graph, config: dict, run: RunDir, log: RunLog):
    """The latest checkpoint whose findings (and decision) the journal proves, made the newest.

    A journal cut short (a lost disk block, a copy that stopped) can be behind the checkpoint: the
    run then goes on from the last step its journal proves, redoing the rest, and files beyond that
    step (findings, the report) are removed so nothing stale reads as evidence."""
    events = log.events()
    latest = graph.get_state(config)
    chosen = next((s for s in graph.get_state_history(config) if _proven(s.values, events)), None)
    if chosen is None:  # not even the initial state: start over from it
        chosen = latest
    if chosen.config != latest.config:
        dropped = [Finding.model_validate(f).stem for f in latest.values.get("findings", [])[len(chosen.values.get("findings", [])):]]
        graph.update_state(chosen.config, None, as_node="__copy__")
        log.append("rolled_back", findings=len(chosen.values.get("findings", [])), dropped=dropped,
                   note="the checkpoint held findings the journal does not: going on from the last step it proves")
        chosen = graph.get_state(config)
    _remove_unproven_files(run, chosen.values.get("findings", []))
    return chosen


def _proven(values: dict, events: list[dict]) -> bool:
    if not values or "run_id" not in values:
        return False
    logged = [e["finding"] for e in events if e["kind"] == "finding"]
    if any(f not in logged for f in values.get("findings", [])):
        return False
    decision = values.get("decision")
    keys = ("choice", "asked", "source", "note")
    return decision is None or any(e["kind"] == "decision" and {k: e.get(k) for k in keys} == {k: decision.get(k) for k in keys}
                                   for e in events)


def _remove_unproven_files(run: RunDir, finding_dicts: list[dict]) -> None:
    stems = {f"{f['index']:02d}-{f['step']}" for f in finding_dicts}
    for path in (run.root / "findings").glob("*"):
        if path.name.rsplit(".", 1)[0] not in stems:
            path.unlink()
    if not any(f["step"] == "report" for f in finding_dicts):
        (run.root / REPORT).unlink(missing_ok=True)
        (run.root / HTML_REPORT).unlink(missing_ok=True)
        (run.root / GATES_APPENDIX).unlink(missing_ok=True)
    referenced = {ref["path"] for e in read_events(run.log_path)
                  for ref in (e.get("artifacts") or [] if e["kind"] == "tool_result" else
                              [e["artifact"]] if e["kind"] == "artifact" else [])}
    for path in (run.root / "artifacts").glob("*/*"):
        if path.relative_to(run.root).as_posix() not in referenced:  # stored, but its journal line was lost
            path.unlink()


# -- commits -------------------------------------------------------------------------------------


# -- replay --------------------------------------------------------------------------------------


def replay(source_path: Path, out_path: Path | None = None, progress: Progress | None = None) -> Outcome:
    """Re-run the recorded run's steps with every tool result served from its journal, into a new
    directory; the findings, commits and report must come out byte for byte the same."""
    try:
        source = RunDir.open(source_path, recorded=True)
        events = read_events(source.log_path)
        journal_format(events, source.log_path)  # refused whole, before any step is replayed
    except (RunDirError, CorruptLog) as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    edited = _journal_against_history(source)
    if edited:
        return Outcome("diverged", f"replay diverged: {edited}", exit_code=1)
    served = Served.from_events(events)
    if "report" not in served.findings:
        return Outcome("bad-input", f"run {source.root.name} did not finish (no report finding): replay needs a finished run",
                       exit_code=2)
    try:
        initial = initial_state(events, source.log_path)
        target = parse_target(initial["target"], f"{source.root / LOG_NAME} (run_start)")
        out_path = out_path or _next_replay_dir(source.root)
        run = RunDir.create(out_path.parent, out_path.name)
    except (CorruptLog, TargetError, RunDirError) as exc:
        return Outcome("bad-input", str(exc), exit_code=2)
    run.write_file(LOG_NAME, source.log_path.read_bytes())
    session = ReplaySession(run, source, served, run.root / REPLAY_NOTES, progress)
    session.record_note("replay_start", of=source.root.name, source=str(source.root))
    graph, connection = _graph_for(run)
    config = {"configurable": {"thread_id": initial["run_id"]}}
    try:
        for _ in graph.stream(initial, config, context=RunContext(session=session, target=target), stream_mode="updates",
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
        recorded_html = source.root / HTML_REPORT
        if recorded_html.exists() and (run.root / HTML_REPORT).read_bytes() != recorded_html.read_bytes():
            raise Divergence(f"{HTML_REPORT} differs from the recorded run's")
        recorded_appendix = source.root / GATES_APPENDIX
        if (run.root / GATES_APPENDIX).exists() and (not recorded_appendix.exists() or
                                                     (run.root / GATES_APPENDIX).read_bytes() != recorded_appendix.read_bytes()):
            raise Divergence(f"{GATES_APPENDIX} differs from the recorded run's")
    except Divergence as exc:
        session.record_note("replay_end", status="diverged", message=str(exc))
        return Outcome("diverged", f"replay diverged: {exc}", run.root, 1)
    except StepFailed as exc:
        session.record_note("replay_end", status="diverged", message=f"{session.step}: {exc}")
        return Outcome("diverged", f"replay diverged: {session.step}: {exc}", run.root, 1)
    except Exception as exc:
        session.record_note("replay_end", status="failed", message=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        connection.close()
    session.record_note("replay_end", status="done", commits=len(ids))
    return Outcome("done", f"replay identical: {len(findings)} findings, {len(ids)} commits (HEAD {ids[-1][:12]}), "
                   f"{REPORT} byte for byte", run.root, 0, {"commits": ids})


def _journal_against_history(source: RunDir) -> str | None:
    """Where the journal departs from the one its own history committed (a hand edit, a cut), or None.

    Each commit holds the journal as it was; the last one must be a prefix of the file, line for line."""
    committed = source.committed(LOG_NAME)
    if committed is None:
        return None
    held = committed.split(b"\n")[:-1]
    lines = source.log_path.read_bytes().split(b"\n")
    whole = lines[:-1]
    for number, (a, b) in enumerate(zip(held, whole), start=1):
        if a != b:
            return (f"{source.log_path} line {number} differs from the line the run's history holds "
                    f"(its last commit): the journal was edited")
    if len(whole) < len(held):
        return (f"{source.log_path} ends at line {len(whole)}{' (and a torn line)' if lines[-1] else ''}, but the run's "
                f"history holds {len(held)} lines: the journal was cut short after line {len(whole)}")
    return None


def _next_replay_dir(source: Path) -> Path:
    n = 1
    while (source.parent / f"{source.name}-replay-{n}").exists():
        n += 1
    return source.parent / f"{source.name}-replay-{n}"


# -- report and listing -------------------------------------------------------------------------


def render(run_path: Path) -> str:
    """The run's report rendered anew from its findings files and journal (nothing is re-measured).

    Only a journal that proves a finished run renders (its report finding, and every finding before
    it); anything else is a RunDirError in one line saying what the journal proves."""
    run = RunDir.open(run_path, recorded=True)
    events = read_events(run.log_path)
    journal_format(events, run.log_path)
    findings = [Finding.model_validate(e["finding"]) for e in events if e["kind"] == "finding"]
    latest: dict[int, Finding] = {}
    for finding in findings:
        latest[finding.index] = finding
    _check_renderable(run, events, latest)
    ordered = [latest[i] for i in sorted(latest) if latest[i].step != "report"]
    decisions = [e for e in events if e["kind"] == "decision"]
    decision = {k: decisions[-1][k] for k in ("choice", "asked", "source", "note")} if decisions else None
    initial = initial_state(events, run.log_path)
    target = parse_target(initial["target"], str(run.log_path))
    report = next((f for f in findings if f.step == "report"), None)
    report_data = data_of(report)
    plots = report_data.plots if report else {}
    held = consistency.check(ordered, target.model_dump(mode="json"))
    try:
        # the run as the report step gave it, the declared rates as its finding holds them (never read anew)
        run_info = report_run(initial["run_id"], initial["started"], target, len(ordered),
                              *((report_data.timing, report_data.declared_rates, report_data.next_steps) if report
                                else (None, None)))
        return render_report(ordered, decision, run_info, plots, held)
    except (jinja2.TemplateError, KeyError, AttributeError, TypeError) as exc:
        # a journal whose findings are all there but do not hold what the report reads (edited, or
        # written by another investigator): say so, never a traceback
        raise RunDirError(f"{run.log_path}: the report cannot be rendered from these findings "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def _check_renderable(run: RunDir, events: list[dict], latest: dict[int, Finding]) -> None:
    proven = ", ".join(f.stem for _, f in sorted(latest.items())) or "no finding"
    ends_at = f"the journal ends at line {len(events)}" + (f" ({events[-1]['kind']})" if events else "")
    report = [i for i, f in latest.items() if f.step == "report"]
    if not report:
        raise RunDirError(f"run {run.root.name} has no report finding to render ({ends_at}; it proves {proven}): "
                          f"the run did not finish or its journal was cut short; resume it to finish")
    missing = [i for i in range(1, max(latest) + 1) if i not in latest]
    if missing:
        raise RunDirError(f"run {run.root.name}'s journal lacks finding {', '.join(map(str, missing))} before its report "
                          f"({ends_at}): it was edited or cut; the report is not rendered from a part of the evidence")


def _replay_status(root: Path) -> tuple[str | None, str, int]:
    """(run it replays, status, findings matched) from a replay's own notes: its log.jsonl is the
    recorded run's copy, whose run_end says how the recorded run ended, not the replay."""
    notes = []
    for line in (root / REPLAY_NOTES).read_text().splitlines():
        try:
            notes.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a torn last line of a replay that was killed
    start = next((n for n in notes if n.get("kind") == "replay_start"), {})
    ends = [n for n in notes if n.get("kind") == "replay_end"]
    status = ends[-1]["status"] if ends else "interrupted"
    return start.get("of", "?"), status, sum(1 for n in notes if n.get("kind") == "finding_matched")


def run_status(root: Path) -> dict[str, Any]:
    if (root / REPLAY_NOTES).is_file():
        of, status, matched = _replay_status(root)
        start = next((e for e in read_events(root / LOG_NAME) if e["kind"] == "run_start"), {})
        return {"run": root.name, "target": start.get("target_name", "?"), "started": start.get("ts", "?"),
                "status": status, "findings": matched, "attempts": 1, "replay_of": of}
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
            "status": status, "findings": len(findings), "attempts": last_attempt, "replay_of": None}


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
