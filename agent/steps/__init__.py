"""One module per investigation step. A step reads the state, gathers evidence through the session's
recorded tool calls, decides with plain functions, and returns one Finding; ``as_node`` turns it into
a LangGraph node that journals the finding and returns it as a state update."""

from __future__ import annotations

from typing import Callable

from langgraph.runtime import Runtime

from agent.session import Session
from agent.state import Finding, InvestigationState

StepFn = Callable[[InvestigationState, Session], Finding]


class StepFailed(RuntimeError):
    """A step could not establish its finding (the evidence it needs failed); the run stops, resumable."""


def as_node(step: str, fn: StepFn):
    """Wrap a step function as a node: begin the step, record its finding, return it as an update."""

    def node(state: InvestigationState, runtime: Runtime) -> dict:
        session: Session = runtime.context.session
        session.begin_step(step)
        finding = fn(state, session)
        session.record_finding(finding)
        session.end_step(finding)
        return {"findings": [finding.model_dump(mode="json")]}

    # Not functools.wraps: LangGraph reads the signature to inject ``runtime``, and wraps would show fn's.
    node.__name__ = node.__qualname__ = fn.__name__
    node.__doc__ = fn.__doc__
    return node
