"""One module per investigation step. A step reads the state, gathers evidence through the session's
recorded tool calls, decides with plain functions, and returns one Finding; ``as_node`` turns it into
a LangGraph node that journals the finding and returns it as a state update."""

from __future__ import annotations

import math
from typing import Callable

from langgraph.runtime import Runtime

from agent.evidence import validate
from agent.session import Session
from agent.state import Finding, InvestigationState

StepFn = Callable[[InvestigationState, Session], Finding]


class StepFailed(RuntimeError):
    """A step could not establish its finding (the evidence it needs failed); the run stops, resumable."""


DIGITS = 12


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_rounded(v) for v in value)
    return value


def portable(finding: Finding) -> Finding:
    """The finding with every float to 12 significant digits. A replay on another machine recomputes
    each finding from the journal: Python versions (3.12's compensated ``sum``), libm and numpy builds
    differ in the last bits, which no measurement resolves; rounded, the findings compare byte for byte."""
    return Finding.model_validate(_rounded(finding.model_dump(mode="json")))


def as_node(step: str, fn: StepFn):
    """Wrap a step function as a node: begin the step, record its finding, return it as an update."""

    def node(state: InvestigationState, runtime: Runtime) -> dict:
        session: Session = runtime.context.session
        session.begin_step(step)
        finding = portable(fn(state, session))
        validate(finding)  # the step's data must fit the model the steps after it read (agent.evidence)
        session.record_finding(finding)
        session.end_step(finding)
        return {"findings": [finding.model_dump(mode="json")]}

    # Not functools.wraps: LangGraph reads the signature to inject ``runtime``, and wraps would show fn's.
    node.__name__ = node.__qualname__ = fn.__name__
    node.__doc__ = fn.__doc__
    return node
