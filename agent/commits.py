"""A run's git history: one commit per finding, each with the finding's files, the artifacts journaled
up to it and, from journal format 2 on, the whole journal in the last one (agent/rundir.py makes the
commits)."""

from __future__ import annotations

import json
from pathlib import Path

from agent.rundir import GATES_APPENDIX, HTML_REPORT, REPORT, CommitSpec, RunDir
from agent.runlog import LOG_NAME, CorruptLog, journal_format, read_events
from reports.render import render_finding
from schema.finding import Finding


def finding_files(finding: Finding) -> dict[str, bytes]:
    return {
        f"findings/{finding.stem}.json": (json.dumps(finding.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode(),
        f"findings/{finding.stem}.md": render_finding(finding).encode(),
    }


def commit_specs(run: RunDir, events: list[dict], findings: list[Finding]) -> list[CommitSpec]:
    """One spec per finding: its files, the artifacts journaled up to its event, its time.

    From journal format 2 on, when the journal's last run_end comes after the last finding, the last
    commit holds the journal through that run_end, at its time: the history of an ended run holds
    its whole journal (the step_end and run_end lines too), and HEAD's log.jsonl is the file."""
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
            if journal_format(events) >= 3:  # earlier formats committed no page: their commit ids stay as recorded
                files[HTML_REPORT] = (run.root / HTML_REPORT).read_bytes()
                if (run.root / GATES_APPENDIX).exists():  # the report's appendix, where the report step wrote one
                    files[GATES_APPENDIX] = (run.root / GATES_APPENDIX).read_bytes()
        subject = f"{finding.index:02d} {finding.step}: {finding.headline}"
        specs.append(CommitSpec(subject if len(subject) <= 200 else subject[:197] + "...", files, event["seq"], event["ts"]))
    ends = [e for e in events if e["kind"] == "run_end"]
    if specs and ends and ends[-1]["seq"] > specs[-1].log_through_seq and journal_format(events) >= 2:
        last = specs[-1]
        specs[-1] = CommitSpec(last.message, last.files, ends[-1]["seq"], ends[-1]["ts"])
    return specs


def sync_commits(run: RunDir, finding_dicts: list[dict], source_log: Path | None = None) -> list[str]:
    """Write the finding files and make the run's git history one commit per finding."""
    findings = [Finding.model_validate(f) for f in finding_dicts]
    for finding in findings:
        for rel, data in finding_files(finding).items():
            run.write_file(rel, data)
    events = read_events(source_log or run.log_path)
    if events and journal_format(events) < 3:  # the page a replay writes of an older run is no part of its history
        run.exclude(HTML_REPORT)
        run.exclude(GATES_APPENDIX)
    return run.sync_commits(commit_specs(run, events, findings), log_source=source_log)
