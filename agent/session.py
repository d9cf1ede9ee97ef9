"""What a step touches while it runs: recorded tool calls, the run's artifacts, the journal.

A live session runs tools on the box and journals every call and result. A replay session serves
each tool result from an earlier run's journal instead, and stops at the first call, finding or
artifact that differs from what the earlier run recorded.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent import redact
from agent.rundir import RunDir
from agent.runlog import RunLog, encode, fault_point
from agent.state import Finding
from tools.box import Box
from tools.catalog import CATALOG, run_tool


class Divergence(RuntimeError):
    """A replay met code that no longer does what the recorded run did."""


class Progress(Protocol):
    def step_started(self, step: str) -> None: ...
    def step_finished(self, step: str, headline: str) -> None: ...
    def tool_started(self, step: str, tool: str, summary: str) -> None: ...
    def tool_finished(self, step: str, tool: str, ok: bool, duration_s: float, error: str | None) -> None: ...
    def note(self, text: str) -> None: ...


class SilentProgress:
    def step_started(self, step): pass
    def step_finished(self, step, headline): pass
    def tool_started(self, step, tool, summary): pass
    def tool_finished(self, step, tool, ok, duration_s, error): pass
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


@dataclass
class Recorded:
    """Where a finding landed in the journal: the commit uses its line and time."""

    index: int
    seq: int
    ts: str


class Session:
    """Live session: tools run on the box; calls, results, findings and artifacts go to the journal."""

    mode = "live"
    # Secret environment values (name -> value) the recorded target holds as redact.PLACEHOLDER;
    # set by the runner, never journaled: they go into the box's command only (redact.resolve).
    secrets: dict[str, str] = {}

    def __init__(self, run: RunDir, log: RunLog, box: Box, progress: Progress | None = None):
        self.run = run
        self.log = log
        self.box = box
        self.progress = progress or SilentProgress()
        self.step: str | None = None
        self.step_run: str | None = None

    # -- steps -------------------------------------------------------------------------------

    def begin_step(self, step: str) -> None:
        self.step = step
        self.step_run = f"{self.log.attempt}:{step}"
        self.log.append("step_start", step=step, step_run=self.step_run)
        fault_point(f"step_start:{step}")
        self.progress.step_started(step)

    def end_step(self, finding: Finding) -> None:
        self.log.append("step_end", step=self.step, step_run=self.step_run)
        fault_point(f"step_end:{self.step}")
        self.progress.step_finished(self.step, finding.headline)
        self.step = self.step_run = None

    # -- tools -------------------------------------------------------------------------------

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run a catalogued tool; returns its result record, with ``call_seq`` and stored ``artifacts``."""
        if tool not in CATALOG:
            raise KeyError(f"unknown tool {tool!r}")
        args = json.loads(json.dumps(args))  # the logged form is the form the step sees
        call = self.log.append("tool_call", step=self.step, step_run=self.step_run, tool=tool, args=args)
        self.progress.tool_started(self.step, tool, summarize_args(tool, args))
        record, raw = run_tool(self.box, tool, redact.resolve(args, self.secrets))
        try:
            for path in raw.files.values():
                redact.scrub_file(path)  # an artifact echoing a secret is stored without it
            artifacts = [self.run.store_artifact(path, name) for name, path in raw.files.items()]
        finally:
            raw.cleanup()
        fault_point(f"tool:{tool}")  # the tool ran and its files are stored; its result is not journaled
        result = self.log.append("tool_result", step=self.step, step_run=self.step_run, call=call["seq"],
                                 tool=tool, artifacts=artifacts, **record)
        self.progress.tool_finished(self.step, tool, record["ok"], record["duration_s"], record["error"])
        return {**result, "call_seq": call["seq"]}

    def artifact_path(self, ref: dict[str, Any]) -> Path:
        return self.run.artifact_path(ref)

    def store_artifact_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        """An artifact the agent itself made (a plot); journaled so commits and replays see it."""
        ref = self.run.store_bytes(data, name)
        self.log.append("artifact", step=self.step, step_run=self.step_run, artifact=ref)
        return ref

    # -- findings and decisions ---------------------------------------------------------------

    def record_finding(self, finding: Finding) -> Recorded:
        event = self.log.append("finding", step=self.step, step_run=self.step_run, index=finding.index,
                                finding=finding.model_dump(mode="json"))
        fault_point(f"finding:{self.step}")
        return Recorded(finding.index, event["seq"], event["ts"])

    def record_decision(self, decision: dict[str, Any]) -> None:
        self.log.append("decision", step="options", **decision)

    def served_decision(self) -> dict[str, Any] | None:
        return None


@dataclass
class Served:
    """What an earlier run recorded, arranged for serving: per step, its calls in order."""

    calls: dict[str, list[tuple[dict, dict]]] = field(default_factory=dict)
    findings: dict[str, dict] = field(default_factory=dict)
    artifacts: dict[str, list[dict]] = field(default_factory=dict)
    decision: dict | None = None

    @classmethod
    def from_events(cls, events: list[dict]) -> "Served":
        """The calls that count are those of the step run that produced each step's last finding."""
        served = cls()
        final_run = {}
        for event in events:
            if event["kind"] == "finding":
                final_run[event["step"]] = event["step_run"]
                served.findings[event["step"]] = event
            elif event["kind"] == "decision":
                served.decision = event
        results = {e["call"]: e for e in events if e["kind"] == "tool_result"}
        for event in events:
            if event["kind"] == "tool_call" and final_run.get(event["step"]) == event["step_run"]:
                served.calls.setdefault(event["step"], []).append((event, results.get(event["seq"])))
            if event["kind"] == "artifact" and final_run.get(event["step"]) == event["step_run"]:
                served.artifacts.setdefault(event["step"], []).append(event)
        return served


class ReplaySession(Session):
    """Serves tool results from an earlier run; any difference is a Divergence naming the log line."""

    mode = "replay"

    def __init__(self, run: RunDir, source: RunDir, served: Served, journal: Path,
                 progress: Progress | None = None):
        self.run = run
        self.source = source
        self.served = served
        self.progress = progress or SilentProgress()
        self.journal = journal
        self.step = None
        self.step_run = None
        self._pending: list[tuple[dict, dict]] = []
        self._pending_artifacts: list[dict] = []

    def _note(self, kind: str, **fields: Any) -> None:
        with open(self.journal, "a") as handle:
            handle.write(encode({"kind": kind, **fields}) + "\n")

    def begin_step(self, step: str) -> None:
        self.step = step
        self.step_run = f"replay:{step}"
        self._pending = list(self.served.calls.get(step, []))
        self._pending_artifacts = list(self.served.artifacts.get(step, []))
        self._note("step_start", step=step)
        self.progress.step_started(step)

    def end_step(self, finding: Finding) -> None:
        if self._pending:
            call, _ = self._pending[0]
            raise Divergence(
                f"log line {call['seq']}: the recorded run called {call['tool']} in {self.step} "
                f"with {json.dumps(call['args'], sort_keys=True)[:300]}, the code now makes no such call"
            )
        self._note("step_end", step=self.step)
        self.progress.step_finished(self.step, finding.headline)
        self.step = None

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        args = json.loads(json.dumps(args))
        if not self._pending:
            raise Divergence(
                f"{self.step}: the code now calls {tool} with {json.dumps(args, sort_keys=True)[:300]}, "
                "which the recorded run never did"
            )
        call, result = self._pending.pop(0)
        if call["tool"] != tool or call["args"] != args:
            raise Divergence(
                f"log line {call['seq']}: the recorded run called {call['tool']} with "
                f"{json.dumps(call['args'], sort_keys=True)[:300]}; the code now calls {tool} with "
                f"{json.dumps(args, sort_keys=True)[:300]}"
            )
        if result is None:
            raise Divergence(f"log line {call['seq']}: the recorded run has no result for this call")
        self.progress.tool_started(self.step, tool, summarize_args(tool, args) + " (served)")
        for ref in result.get("artifacts", []):
            self._copy_artifact(ref)
        self._note("served", step=self.step, call=call["seq"], tool=tool)
        self.progress.tool_finished(self.step, tool, result["ok"], result["duration_s"], result.get("error"))
        return {**result, "call_seq": call["seq"]}

    def _copy_artifact(self, ref: dict[str, Any]) -> None:
        source = self.source.artifact_path(ref)
        dest = self.run.artifact_path(ref)
        if not source.is_file():
            raise Divergence(f"artifact {ref['path']} of the recorded run is missing")
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)

    def store_artifact_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        ref = self.run.store_bytes(data, name)
        if not self._pending_artifacts:
            raise Divergence(f"{self.step}: the code now makes artifact {name}, which the recorded run did not")
        expected = self._pending_artifacts.pop(0)
        if expected["artifact"] != ref:
            raise Divergence(
                f"log line {expected['seq']}: artifact {expected['artifact']['name']} "
                f"(sha256 {expected['artifact']['sha256'][:12]}) now comes out as {ref['name']} "
                f"(sha256 {ref['sha256'][:12]})"
            )
        return ref

    def record_finding(self, finding: Finding) -> Recorded:
        original = self.served.findings.get(self.step)
        mine = finding.model_dump(mode="json")
        if original is None:
            raise Divergence(f"{self.step}: the code now records a finding where the recorded run had none")
        if original["finding"] != mine:
            field_name = _first_difference(original["finding"], mine)
            raise Divergence(
                f"log line {original['seq']}: finding {finding.stem} differs from the recorded one at {field_name}"
            )
        self._note("finding_matched", step=self.step, seq=original["seq"])
        return Recorded(finding.index, original["seq"], original["ts"])

    def record_decision(self, decision: dict[str, Any]) -> None:
        self._note("decision_served", **decision)

    def served_decision(self) -> dict[str, Any] | None:
        return self.served.decision


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path} (length {len(a)} vs {len(b)})"
    return f"{path} ({json.dumps(a)[:80]} vs {json.dumps(b)[:80]})"


_MISSING = object()
