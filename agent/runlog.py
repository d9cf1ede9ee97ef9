"""The run's journal: ``log.jsonl``, append-only, one event a line, fsynced per event.

Every event carries ``seq`` (its 1-based line number), ``ts`` (UTC, ISO 8601), ``attempt`` (1 for
the first invocation, +1 for each resume) and ``kind``. A line torn by a crash mid-write is cut
off when the log is reopened, and the cut is itself logged.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

LOG_NAME = "log.jsonl"


class CorruptLog(RuntimeError):
    """A line before the last is not JSON: the log was edited or the disk lied; nothing is guessed."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def encode(event: dict[str, Any]) -> str:
    """One event as its line (no newline). Key order is the event's own: it is part of the record."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events of a log. A torn last line (no newline) is not an event."""
    events = []
    with open(path, "rb") as handle:
        data = handle.read()
    lines = data.split(b"\n")
    complete = lines[:-1]  # whatever follows the last newline is torn or empty
    for number, raw in enumerate(complete, start=1):
        try:
            events.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise CorruptLog(f"{path}:{number}: not a JSON event ({exc.msg})") from None
    return events


def prefix_bytes(path: Path, through_seq: int) -> bytes:
    """The log's first ``through_seq`` lines, exactly as written."""
    with open(path, "rb") as handle:
        lines = handle.read().split(b"\n")
    if len(lines) - 1 < through_seq:
        raise CorruptLog(f"{path}: has {len(lines) - 1} events, asked for the first {through_seq}")
    return b"\n".join(lines[:through_seq]) + b"\n"


class RunLog:
    """Appends events to one run's log. One writer at a time (the run lock sees to that)."""

    def __init__(self, path: Path, attempt: int, next_seq: int, clock: Callable[[], str] = utc_now):
        self.path = path
        self.attempt = attempt
        self._next_seq = next_seq
        self._clock = clock

    @classmethod
    def create(cls, path: Path, clock: Callable[[], str] = utc_now) -> "RunLog":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        return cls(path, attempt=1, next_seq=1, clock=clock)

    @classmethod
    def reopen(cls, path: Path, clock: Callable[[], str] = utc_now) -> "RunLog":
        """Open an existing log for a new attempt, cutting off a torn last line first."""
        with open(path, "rb") as handle:
            data = handle.read()
        torn = b""
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            torn = data[keep:]
            with open(path, "r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())
        events = read_events(path)
        last_attempt = max((e.get("attempt", 1) for e in events), default=0)
        log = cls(path, attempt=last_attempt + 1, next_seq=len(events) + 1, clock=clock)
        if torn:
            log.append("log_repaired", dropped_bytes=len(torn), note="a torn last line from a crash was cut off")
        return log

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"seq": self._next_seq, "ts": self._clock(), "attempt": self.attempt, "kind": kind, **fields}
        line = (encode(event) + "\n").encode()
        with open(self.path, "ab") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self._next_seq += 1
        return event

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.path)
