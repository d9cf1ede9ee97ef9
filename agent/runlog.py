"""The run's journal: ``log.jsonl``, append-only, one event a line, fsynced per event.

Every event carries ``seq`` (its 1-based line number), ``ts`` (UTC, ISO 8601), ``attempt`` (1 for
the first invocation, +1 for each resume) and ``kind``. A line torn by a crash mid-write is cut
off when the log is reopened, and the cut is itself logged.

The first event, ``run_start``, carries ``format``: the journal format its investigator wrote
(FORMAT). A journal without one is format 1 (written before formats were recorded). A format this
investigator does not know is refused in one line naming both, before anything is replayed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from agent import redact

LOG_NAME = "log.jsonl"
# 1: no ``format`` in run_start; every commit's log ends at its finding's line.
# 2: ``format`` in run_start; an ended run's last commit holds the journal through its run_end.
# 3: the report's commit holds PROFILE_FINDINGS.html beside PROFILE_FINDINGS.md.
# 4: the target's ``rewrite.plan``; the split-K step of a run written before it timed the box's own plan
#    (``target_of``).
FORMAT = 4
FORMATS = (1, 2, 3, 4)


class CorruptLog(RuntimeError):
    """A line before the last is not JSON: the log was edited or the disk lied; nothing is guessed."""


class UnknownFormat(CorruptLog):
    """The journal was written in a format this investigator does not read."""


class JournalWriteError(RuntimeError):
    """An event could not be appended (disk full, I/O error); the journal still ends at its last whole line."""


def journal_format(events: list[dict[str, Any]], where: Path | str = LOG_NAME) -> int:
    """The format the journal was written in (1 when its run_start records none); UnknownFormat if
    this investigator cannot read it."""
    start = next((e for e in events if e.get("kind") == "run_start"), None)
    if start is None:
        raise CorruptLog(f"{where}: no run_start event")
    found = start.get("format", 1)
    if found not in FORMATS:
        raise UnknownFormat(f"{where}: journal format {found!r}, but this investigator reads formats "
                            f"{FORMATS[0]}-{FORMATS[-1]} (its own is {FORMAT}); use the investigator that wrote it")
    return found


def target_of(state: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """The target a journal's initial state records, as this investigator reads it: a run written before
    format 4 built and timed the split-K rewrite with the box's own plan, which its target did not say
    (``rewrite.plan`` was added with the declared hardware's plan as its default)."""
    target = state["target"]
    if journal_format(events) < 4 and "rewrite" not in target:
        return {**target, "rewrite": {"plan": "box"}}
    return target


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
        """Append one event, fsynced. If it cannot be written whole (disk full), what was written of
        it is cut off again and JournalWriteError raised: the log ends at its last whole line."""
        event = {"seq": self._next_seq, "ts": self._clock(), "attempt": self.attempt, "kind": kind, **fields}
        event = redact.scrub_event(event)  # no secret reaches the journal (agent/redact.py)
        line = (encode(event) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(line)
                while view:  # unbuffered: nothing is left to be retried at close
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError as exc:
                os.ftruncate(fd, size)  # cutting back needs no space
                os.fsync(fd)
                raise JournalWriteError(f"cannot append line {event['seq']} ({kind}) to {self.path}: "
                                        f"{exc.strerror or exc}") from None
        finally:
            os.close(fd)
        self._next_seq += 1
        return event

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.path)


FAULT_ENV = "PERF_INVESTIGATOR_FAULT"
HELD_ENV = "PERF_INVESTIGATOR_FAULT_HELD"
HOLD_PREFIX = "hold:"
HOLD_S = 600.0


def fault_point(name: str) -> None:
    """A place a crash or a signal is tested at (tests/test_faults.py, tests/test_cli_contract.py).
    When the environment's PERF_INVESTIGATOR_FAULT names it, the process SIGKILLs itself here, as kill
    -9 would. When it names ``hold:NAME``, the process writes its pid to the file that
    PERF_INVESTIGATOR_FAULT_HELD names and waits here for a signal (a test's Ctrl-C), so that the signal
    lands at this point of the run, however fast or slow the machine; nothing signalled within
    HOLD_S seconds is a failure of the run, not a hang."""
    wanted = os.environ.get(FAULT_ENV)
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    elif wanted == HOLD_PREFIX + name:
        held = Path(os.environ[HELD_ENV])
        tmp = held.with_name(held.name + ".tmp")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, held)  # whole or absent: the test reads the pid only once it is written
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            time.sleep(0.05)  # a signal's handler (Ctrl-C: KeyboardInterrupt) runs here
        raise RuntimeError(f"fault point {name} was held {HOLD_S:.0f} s and nothing signalled the run")
