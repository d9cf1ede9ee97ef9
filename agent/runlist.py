"""``runs``: what each run found, how long it took and what was decided, in one line a run; and the
removal of runs (``runs rm``, ``runs --prune-interrupted``), so that interrupted ones do not pile up.

The row keys of ``runner.list_runs`` stay as they are (``runs --json`` is read by scripts); this adds
``headline``, ``decision`` and ``duration_s``.
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.rundir import BUNDLE
from agent.runlog import LOG_NAME, CorruptLog, read_events


class RunsError(ValueError):
    """A run named that cannot be removed (not a run, running): bad input."""


def _seconds(events: list[dict[str, Any]]) -> float | None:
    """Wall time of the attempts, each from its first event to its last: the hours between an
    interrupted attempt and its resume are not the run's."""
    spans: dict[int, list[datetime]] = {}
    for event in events:
        try:
            spans.setdefault(event.get("attempt", 0), []).append(datetime.fromisoformat(event["ts"]))
        except (KeyError, TypeError, ValueError):
            continue
    return sum((max(t) - min(t)).total_seconds() for t in spans.values()) if spans else None


def describe(row: dict[str, Any]) -> dict[str, Any]:
    """A ``list_runs`` row with the last finding's headline (the report step's own says only that it
    was written), the decision taken and the duration; None where the journal holds none."""
    extra: dict[str, Any] = {"headline": None, "decision": None, "duration_s": None}
    try:
        events = read_events(Path(row["path"]) / LOG_NAME)
    except (CorruptLog, OSError):
        return {**row, **extra}
    found = [e["finding"] for e in events if e.get("kind") == "finding" and isinstance(e.get("finding"), dict)]
    told = [f for f in found if f.get("step") != "report"] or found
    decisions = [e for e in events if e.get("kind") == "decision"]
    extra["headline"] = told[-1].get("headline") if told else None
    extra["decision"] = decisions[-1].get("choice") if decisions else None
    duration = _seconds(events)
    extra["duration_s"] = round(duration, 1) if duration is not None else None
    return {**row, **extra}


def _took(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _started(text: str | None) -> str:
    """The start to the minute, UTC (the journal's full time is in --json)."""
    try:
        return datetime.fromisoformat(str(text)).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return str(text or "-")


def table(rows: list[dict[str, Any]], width: int) -> str:
    """One line a run, the headline cut to what is left of ``width``."""
    header = ["status", "found", "started (UTC)", "took", "target", "decision", "run"]
    cells = [header] + [[str(r.get("status", "-")), str(r.get("findings", "-")), _started(r.get("started")),
                         _took(r.get("duration_s")), str(r.get("target") or "-"), str(r.get("decision") or "-"),
                         str(r["path"]) + (f" (replay of {r['replay_of']})" if r.get("replay_of") else "")]
                        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    right = {1}  # counts line up on the right
    lines = []
    for i, line in enumerate(cells):
        text = "  ".join(c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in enumerate(zip(line, widths)))
        headline = "headline" if i == 0 else (rows[i - 1].get("headline") or "")
        room = max(width - len(text) - 2, 24)
        if len(headline) > room:
            headline = headline[:room - 1] + "…"
        lines.append(f"{text}  {headline}".rstrip())
    return "\n".join(lines)


def find_run(ref: str, runs_dir: Path) -> Path:
    """A run's directory from its path or its id under ``runs_dir``; RunsError if it is not a run."""
    path = Path(ref)
    if not path.is_dir() and (runs_dir / ref).is_dir():
        path = runs_dir / ref
    if not (path / LOG_NAME).is_file() or not ((path / ".git").exists() or (path / BUNDLE).exists()):
        raise RunsError(f"{ref}: not a run (no {LOG_NAME} and history); nothing removed")
    return path


def remove(row: dict[str, Any]) -> None:
    """Delete a run's directory; a running one is refused (its process is still writing there)."""
    if row.get("status") == "running":
        raise RunsError(f"{row['path']}: running; nothing removed")
    shutil.rmtree(row["path"])
