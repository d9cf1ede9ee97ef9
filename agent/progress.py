"""Progress while a run works: what a session reports (Progress), shown as a live line on a terminal,
plain timestamped lines otherwise, or not at all. Whoever makes a progress view closes it (the CLI)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator, Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text


class Progress(Protocol):
    # position: where the step stands among the run's steps, e.g. "3/8+" (agent.routes.position)
    def step_started(self, step: str, position: str = "") -> None: ...
    def step_finished(self, step: str, headline: str) -> None: ...
    def tool_started(self, step: str, tool: str, summary: str) -> None: ...
    def tool_finished(self, step: str, tool: str, ok: bool, duration_s: float, error: str | None) -> None: ...
    # how far a tool in progress is, where it says (a sweep: runs done of its runs)
    def tool_progress(self, step: str, tool: str, done: int, total: int, unit: str) -> None: ...
    def note(self, text: str) -> None: ...


class SilentProgress:
    def step_started(self, step, position=""): pass
    def step_finished(self, step, headline): pass
    def tool_started(self, step, tool, summary): pass
    def tool_finished(self, step, tool, ok, duration_s, error): pass
    def tool_progress(self, step, tool, done, total, unit): pass
    def note(self, text): pass


def summarize_args(tool: str, args: dict[str, Any]) -> str:
    """A short human line for a tool call (progress view only; never parsed)."""
    if tool == "engine.bench":
        spec = args.get("spec", {})
        return f"attention={spec.get('attention')} batches={spec.get('batch_sizes')}" + (
            " +trace" if spec.get("profile") else "") + (f" [{args['label']}]" if args.get("label") else "")
    if tool == "engine.sweep":
        runs = args.get("spec", {}).get("runs", [])
        return f"{len(runs)} runs in one process" + (f" [{args['label']}]" if args.get("label") else "")
    keys = [k for k in ("kernel", "sm", "arch") if k in args]
    return " ".join(f"{k}={args[k]}" for k in keys)


class PlainProgress:
    """One line per event on a stream, each with the seconds since the run started."""

    def __init__(self, stream: TextIO = sys.stderr):
        self.stream = stream
        self.started = time.monotonic()
        self.step: str | None = None  # the step in progress, for the line a run cut short ends with
        self.position = ""

    def _step(self, step: str) -> str:
        return f"[{self.position}] {step}" if self.position else step

    def _line(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {text}", file=self.stream, flush=True)

    def step_started(self, step, position=""):
        self.step, self.position = step, position
        self._line(f"{self._step(step)}: started")

    def step_finished(self, step, headline):
        self.step = None
        self._line(f"{self._step(step)}: {headline}")

    def tool_started(self, step, tool, summary):
        self._line(f"{step}: {tool} {summary}".rstrip())

    def tool_finished(self, step, tool, ok, duration_s, error):
        self._line(f"{step}: {tool} {'ok' if ok else 'FAILED'} in {duration_s:.1f}s" + (f": {error}" if error else ""))

    def tool_progress(self, step, tool, done, total, unit):
        self._line(f"{step}: {tool} {done}/{total} {unit}")

    def note(self, text):
        self._line(text)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """While the run asks the user something: plain lines never redraw, nothing to stop."""
        yield

    def close(self, ended: str | None = None):
        """Stop showing progress; ``ended`` (e.g. "interrupted"): the run was cut short, and a last
        line says in which step."""
        if ended:
            self._line(f"{self.step or 'run'}: {ended}")


class _Status:
    """What the live line shows; rendered anew at each refresh so the elapsed times tick."""

    def __init__(self):
        self.started = time.monotonic()
        self.step = "starting"
        self.position = ""
        self.tool = ""
        self.tool_started = None
        self.tool_done = ""

    def __rich__(self) -> Text:
        now = time.monotonic()
        text = Text(f"{now - self.started:7.1f}s ", style="dim")
        if self.position:
            text.append(f"[{self.position}] ")
        text.append(self.step, style="bold")
        if self.tool:
            text.append(f"  {self.tool}")
            if self.tool_done:
                text.append(f"  {self.tool_done}")
            if self.tool_started is not None:
                text.append(f"  ({now - self.tool_started:.1f}s)", style="dim")
        return text


class LiveProgress(PlainProgress):
    """A live status line (step, tool call, elapsed) above the permanent per-step lines."""

    def __init__(self, console: Console | None = None):
        super().__init__()
        self.console = console or Console(stderr=True)
        self.status = _Status()
        self.live = Live(self.status, console=self.console, refresh_per_second=4, transient=True)
        self.live.start()

    def _line(self, text: str) -> None:
        self.console.print(Text.assemble((f"{time.monotonic() - self.started:7.1f}s ", "dim"), text), highlight=False)

    def step_started(self, step, position=""):
        self.position = position
        self.status.step, self.status.position, self.status.tool = step, position, ""

    def tool_started(self, step, tool, summary):
        self.status.tool = f"{tool} {summary}".rstrip()
        self.status.tool_started, self.status.tool_done = time.monotonic(), ""

    def tool_progress(self, step, tool, done, total, unit):
        self.status.tool_done = f"{done}/{total} {unit}"

    def tool_finished(self, step, tool, ok, duration_s, error):
        self.status.tool, self.status.tool_started, self.status.tool_done = "", None, ""
        if not ok:
            super().tool_finished(step, tool, ok, duration_s, error)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop redrawing while the user types (a redraw erases the line being typed); the live
        line comes back afterwards."""
        self.live.stop()
        try:
            yield
        finally:
            self.live = Live(self.status, console=self.console, refresh_per_second=4, transient=True)
            self.live.start()

    def close(self, ended: str | None = None):
        """Erase the live line; with ``ended`` (e.g. "interrupted") what it showed stays on screen,
        ending with that word, so a run cut short shows where it stopped."""
        self.live.stop()
        if ended:
            tool = f" {self.status.tool}" if self.status.tool else ""
            self._line(f"{self.status.step}:{tool} {ended}")


def make_progress(stream: TextIO = sys.stderr):
    return LiveProgress() if stream.isatty() else PlainProgress(stream)
