"""The live session: tools run on the box; every call, result, artifact, finding and decision goes to
the run's journal, and the box's artifacts into the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langgraph.types import interrupt

from agent import redact
from agent.box.catalog import CATALOG, run_tool
from agent.box.interface import Box
from agent.engine_runs import sweep_watch
from agent.progress import Progress, SilentProgress, summarize_args
from agent.rundir import RunDir
from agent.runlog import RunLog, fault_point
from schema.finding import Finding


class LiveSession:
    """A run measuring on its box (agent.session.Session)."""

    def __init__(self, run: RunDir, log: RunLog, box: Box | None, progress: Progress | None = None,
                 secrets: dict[str, str] | None = None):
        self.run = run
        self.log = log
        self.box = box
        self.progress = progress or SilentProgress()
        # Secret environment values (name -> value) the recorded target holds as redact.PLACEHOLDER;
        # never journaled: they go into the box's command only (redact.resolve).
        self.secrets = secrets or {}
        self.step: str | None = None
        self.step_run: str | None = None

    # -- steps -------------------------------------------------------------------------------

    def begin_step(self, step: str, position: str = "") -> None:
        self.step = step
        self.step_run = f"{self.log.attempt}:{step}"
        self.log.append("step_start", step=step, step_run=self.step_run)
        self.progress.step_started(step, position)  # shown as begun, as journaled: a Ctrl-C from here on names this step
        fault_point(f"step_start:{step}")

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
        step = self.step
        watch = sweep_watch(tool, args, lambda done, total, unit: self.progress.tool_progress(step, tool, done, total, unit)) \
            if getattr(self.box, "watches_output", False) else None
        record, raw = run_tool(self.box, tool, redact.resolve(args, self.secrets), watch)
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

    def record_finding(self, finding: Finding) -> None:
        self.log.append("finding", step=self.step, step_run=self.step_run, index=finding.index,
                        finding=finding.model_dump(mode="json"))
        fault_point(f"finding:{self.step}")

    def decide(self, question: dict[str, Any]) -> dict[str, Any]:
        """Asked of whoever drives the run: a LangGraph interrupt pauses the graph with ``question`` until
        the runner resumes it with the answer (agent.runner), which is journaled."""
        decision = dict(interrupt(question))
        self.log.append("decision", step="options", **decision)
        return decision
