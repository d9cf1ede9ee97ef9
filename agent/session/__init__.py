"""What a step touches while it runs: the Session protocol, which a live run (agent.session.live) and a
replay (agent.session.replay) implement as siblings.

A live session runs tools on the box and journals every call, result, artifact, finding and decision.
A replay session serves each tool result and the decision from an earlier run's journal instead, and
stops with a Divergence at the first call, finding or artifact that differs from what that run recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from agent.rundir import RunDir
from schema.finding import Finding


class Divergence(RuntimeError):
    """A replay met code that no longer does what the recorded run did."""


class Session(Protocol):
    """What a step and its node may do while the step runs (agent.steps.as_node drives the step calls)."""

    run: RunDir  # the run's directory: the step may read its journal and write its report
    step: str | None  # the step now running, None between steps

    def begin_step(self, step: str, position: str = "") -> None: ...

    def end_step(self, finding: Finding) -> None: ...

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call a catalogued box tool (agent.box.catalog); its result record, with ``seq``, ``call_seq`` and
        the stored ``artifacts``. A failed tool is a record with ``ok`` false, not an exception."""
        ...

    def artifact_path(self, ref: dict[str, Any]) -> Path: ...

    def store_artifact_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        """Store an artifact the agent itself made (a plot); its reference."""
        ...

    def record_finding(self, finding: Finding) -> None: ...

    def decide(self, question: dict[str, Any]) -> dict[str, Any]:
        """The decision on the options step's ``question`` (options, auto, choices): choice, asked, source
        and note, journaled."""
        ...
