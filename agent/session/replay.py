"""The replay session: every tool result and the decision are served from an earlier run's journal;
any call, artifact or finding that differs from what that run recorded is a Divergence naming the
journal line. The replay writes its own notes (what it served, how it ended) beside its copy of the journal."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.progress import Progress, SilentProgress, summarize_args
from agent.rundir import RunDir
from agent.runlog import encode
from agent.session import Divergence
from schema.finding import Finding

DECISION_KEYS = ("choice", "asked", "source", "note")


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


class ReplaySession:
    """A replay of ``source`` into ``run`` (agent.session.Session); its notes go to ``journal``."""

    def __init__(self, run: RunDir, source: RunDir, served: Served, journal: Path,
                 progress: Progress | None = None):
        self.run = run
        self.source = source
        self.served = served
        self.progress = progress or SilentProgress()
        self.journal = journal
        self.step: str | None = None
        self.step_run: str | None = None
        self._pending: list[tuple[dict, dict]] = []
        self._pending_artifacts: list[dict] = []

    def record_note(self, kind: str, **fields: Any) -> None:
        """One line of the replay's own journal (replay_start, served, finding_matched, replay_end, ...)."""
        with open(self.journal, "a") as handle:
            handle.write(encode({"kind": kind, **fields}) + "\n")

    def begin_step(self, step: str, position: str = "") -> None:
        self.step = step
        self.step_run = f"replay:{step}"
        self._pending = list(self.served.calls.get(step, []))
        self._pending_artifacts = list(self.served.artifacts.get(step, []))
        self.record_note("step_start", step=step)
        self.progress.step_started(step, position)

    def end_step(self, finding: Finding) -> None:
        if self._pending:
            call, _ = self._pending[0]
            raise Divergence(
                f"log line {call['seq']}: the recorded run called {call['tool']} in {self.step} "
                f"with {json.dumps(call['args'], sort_keys=True)[:300]}, the code now makes no such call"
            )
        self.record_note("step_end", step=self.step)
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
        self.record_note("served", step=self.step, call=call["seq"], tool=tool)
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

    def artifact_path(self, ref: dict[str, Any]) -> Path:
        return self.run.artifact_path(ref)

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

    def record_finding(self, finding: Finding) -> None:
        original = self.served.findings.get(self.step)
        mine = finding.model_dump(mode="json")
        if original is None:
            raise Divergence(f"{self.step}: the code now records a finding where the recorded run had none")
        if original["finding"] != mine:
            field_name = _first_difference(original["finding"], mine)
            raise Divergence(
                f"log line {original['seq']}: finding {finding.stem} differs from the recorded one at {field_name}"
            )
        self.record_note("finding_matched", step=self.step, seq=original["seq"])

    def decide(self, question: dict[str, Any]) -> dict[str, Any]:
        """The recorded run's decision, whatever the question: a replay asks nobody."""
        if self.served.decision is None:
            raise Divergence("options: the code now asks for a decision, which the recorded run never took")
        decision = {k: self.served.decision[k] for k in DECISION_KEYS}
        self.record_note("decision_served", **decision)
        return decision


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
