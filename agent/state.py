"""The investigation's graph state, and how a step reads the findings in it (the records: schema.finding).

The state is what the checkpointer keeps and a resume goes on from: the run's findings (as JSON) and
its decision. The validated target is not in it: it rides in the run context (agent.graph.RunContext)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from schema.finding import Finding, StepName


class InvestigationState(TypedDict, total=False):
    run_id: str
    started: str  # the run's first journal time
    box: dict[str, Any]
    agent: dict[str, Any]  # where the agent runs (host, platform, python): the survey's other end
    findings: Annotated[list[dict[str, Any]], operator.add]
    decision: dict[str, Any] | None


def findings_of(state: InvestigationState) -> list[Finding]:
    return [Finding.model_validate(f) for f in state.get("findings", [])]


def finding_for(state: InvestigationState, step: StepName) -> Finding | None:
    """The latest finding of a step, if the step ran."""
    found = [f for f in findings_of(state) if f.step == step]
    return found[-1] if found else None
