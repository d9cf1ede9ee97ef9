"""Regenerate a run from its journal: the current code's findings over the recorded tool results.

A replay checks that the code still draws the same findings from a run's tool results; when the code
has changed how it reads them (a report section, a fixed bound) the replay diverges, and a recorded
example would have to be measured again although nothing the box measured changed. Regenerating
serves every tool call the code makes from the recorded run, in order, and refuses any call the run
did not make (then only a new measurement will do); everything the agent derives (findings, plots,
commits, the report) is the current code's. The new journal keeps the recorded times (each call, its
result, each step and finding at the time the recorded run logged it), so it tells how long the
measured investigation took, and its ``run_start`` says it was regenerated, from which run and when.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent import runner
from agent.config import TargetError, parse_target
from agent.progress import Progress, SilentProgress, summarize_args
from agent.rundir import RunDir, RunDirError
from agent.runlog import FORMAT, LOG_NAME, CorruptLog, RunLog, read_events, target_of, utc_now
from agent.session import Divergence
from agent.session.live import LiveSession
from agent.session.replay import Served
from schema.finding import Finding
from tools import exitcodes

# Result fields the journal adds to every event; the rest of a tool_result is the tool's record.
_EVENT_FIELDS = {"seq", "ts", "attempt", "kind", "step", "step_run", "call", "tool", "artifacts"}


class RecordedClock:
    """The new journal's clock: the time of the recorded event the run has reached, never going back."""

    def __init__(self, start: str):
        self.now = start

    def at(self, ts: str | None) -> None:
        if ts and ts > self.now:  # ISO 8601 UTC with a fixed width: strings order as times
            self.now = ts

    def __call__(self) -> str:
        return self.now


class RegenerateSession(LiveSession):
    """A live session whose tools are not run: each call is the recorded run's next call of the step
    (same tool, same arguments), journaled anew at its recorded times with its recorded result and
    artifacts. A call the recorded run did not make, or one it made that the code no longer makes, is
    a Divergence naming the recorded line."""

    def __init__(self, run: RunDir, log: RunLog, source: RunDir, events: list[dict], clock: RecordedClock,
                 progress: Progress | None = None):
        super().__init__(run, log, box=None, progress=progress)
        self.source = source
        self.served = Served.from_events(events)
        self.clock = clock
        final_run = {step: e["step_run"] for step, e in self.served.findings.items()}
        # a step the recorded run did not finish (it failed there) is timed by its last attempt's start
        last_run = {e["step"]: e["step_run"] for e in events if e["kind"] == "step_start"}
        counted = {**last_run, **final_run}
        self._starts = {e["step"]: e["ts"] for e in events if e["kind"] == "step_start" and counted[e["step"]] == e["step_run"]}
        self._artifact_ts = {}
        for e in events:
            if e["kind"] == "artifact" and counted.get(e["step"]) == e["step_run"]:
                self._artifact_ts.setdefault(e["step"], []).append(e["ts"])
        self._pending: list[tuple[dict, dict]] = []
        self._artifact_times: list[str] = []

    def begin_step(self, step: str, position: str = "") -> None:
        self.clock.at(self._starts.get(step))
        self._pending = list(self.served.calls.get(step, []))
        self._artifact_times = list(self._artifact_ts.get(step, []))
        super().begin_step(step, position)

    def end_step(self, finding: Finding) -> None:
        if self._pending:
            call, _ = self._pending[0]
            raise Divergence(f"log line {call['seq']}: the recorded run called {call['tool']} in {self.step}, the code "
                             f"now makes no such call")
        super().end_step(finding)

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        args = json.loads(json.dumps(args))
        if not self._pending:
            raise Divergence(f"{self.step}: the code now calls {tool} with {json.dumps(args, sort_keys=True)[:300]}, "
                             "which the recorded run never did: only a new measurement can answer it")
        recorded, result = self._pending.pop(0)
        if recorded["tool"] != tool or recorded["args"] != args:
            raise Divergence(f"log line {recorded['seq']}: the recorded run called {recorded['tool']} with "
                             f"{json.dumps(recorded['args'], sort_keys=True)[:300]}; the code now calls {tool} with "
                             f"{json.dumps(args, sort_keys=True)[:300]}")
        if result is None:
            raise Divergence(f"log line {recorded['seq']}: the recorded run has no result for this call")
        self.clock.at(recorded["ts"])
        call = self.log.append("tool_call", step=self.step, step_run=self.step_run, tool=tool, args=args)
        self.progress.tool_started(self.step, tool, summarize_args(tool, args) + " (recorded)")
        artifacts = []
        for ref in result.get("artifacts", []):
            path = self.source.artifact_path(ref)
            if not path.is_file():
                raise Divergence(f"log line {result['seq']}: artifact {ref['path']} of the recorded run is missing")
            stored = self.run.store_artifact(path, ref["name"])
            if stored["sha256"] != ref["sha256"]:
                raise Divergence(f"log line {result['seq']}: artifact {ref['path']} does not match its recorded sha256")
            artifacts.append(stored)
        self.clock.at(result["ts"])
        record = {k: v for k, v in result.items() if k not in _EVENT_FIELDS}
        logged = self.log.append("tool_result", step=self.step, step_run=self.step_run, call=call["seq"], tool=tool,
                                 artifacts=artifacts, **record)
        self.progress.tool_finished(self.step, tool, record["ok"], record["duration_s"], record.get("error"))
        return {**logged, "call_seq": call["seq"]}

    def store_artifact_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        if self._artifact_times:
            self.clock.at(self._artifact_times.pop(0))
        return super().store_artifact_bytes(data, name)

    def record_finding(self, finding: Finding):
        recorded = self.served.findings.get(self.step)
        self.clock.at(recorded["ts"] if recorded else None)
        return super().record_finding(finding)


def regenerate(source_path: Path, out_path: Path, progress: Progress | None = None) -> runner.Outcome:
    """A new run at ``out_path`` with the recorded run's target, box and decision flag, every tool
    result served from its journal and everything else computed by the current code."""
    try:
        source = RunDir.open(source_path, recorded=True)
        events = read_events(source.log_path)
        start = next((e for e in events if e["kind"] == "run_start"), None)
        initial = next((e for e in events if e["kind"] == "initial_state"), None)
        if start is None or initial is None:
            raise CorruptLog(f"{source.log_path}: no run_start or initial_state event")
        target = parse_target(target_of(start, events), f"{source.log_path} (run_start)")
        run = RunDir.create(out_path.parent, out_path.name)
    except (RunDirError, CorruptLog, TargetError) as exc:
        return runner.Outcome("bad-input", str(exc), exit_code=exitcodes.BAD_INPUT)
    initial = initial["state"]
    clock = RecordedClock(start["ts"])
    log = RunLog.create(run.root / LOG_NAME, clock=clock)
    run.lock()
    keep = {k: start[k] for k in ("target_name", "target_path", "box", "decide", "argv", "python") if k in start}
    log.append("run_start", format=FORMAT, **{**keep, "target": target.model_dump(mode="json")},
               regenerated_from={"run": source.root.name, "at": utc_now(),
                                 "note": "tool results served from the recorded run's journal at their recorded times; "
                                         "findings, plots, commits and report by the current code"})
    state0 = {**initial, "target": target.model_dump(mode="json"), "findings": [], "decision": None}
    log.append("initial_state", state=state0)
    session = RegenerateSession(run, log, source, events, clock, progress or SilentProgress())
    return runner.drive(run, session, log, state0, start.get("decide") or "auto", None)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agent.regenerate", description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="the recorded run (a run directory, e.g. runs/examples/ID)")
    parser.add_argument("out", type=Path, help="the new run's directory (must not exist)")
    args = parser.parse_args(argv)
    outcome = regenerate(args.source, args.out)
    print(outcome.message)
    return outcome.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
