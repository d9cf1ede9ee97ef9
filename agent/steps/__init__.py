"""One module per investigation step. A step reads the state and the run's target, gathers evidence
through the session's recorded tool calls, decides with plain functions, and returns a Draft (what it
established); ``as_node`` turns it into a LangGraph node that numbers the draft into the run's next
Finding, journals it and returns it as a state update.

Beside the steps, the helpers several steps share, so that no step imports another: ``amdahl``
(Amdahl's law over a profile), ``measurements`` (reading the engine's measurements), ``attribution``
(the dominant kernel's operation in a trace) and ``diagnosis`` (the grid tool's kernel diagnosis shown)."""

from __future__ import annotations

import math
from typing import Any, Callable

from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict, Field

from agent import routes
from agent.config import Target
from agent.engines import engine_for
from agent.evidence import typed, validate
from agent.session import Session
from agent.state import InvestigationState
from schema.finding import Finding, Number, StepName, Table


class Draft(BaseModel):
    """What a step established, before its node numbers it: a Finding less its ``index`` and ``step``
    (the fields mean what they mean there), which ``as_node`` fills in from the run's state."""

    model_config = ConfigDict(extra="forbid")

    headline: str
    verdict: str
    numbers: dict[str, Number] = Field(default_factory=dict)
    tables: list[Table] = Field(default_factory=list)
    artifacts: dict[str, str] = Field(default_factory=dict)
    evidence: list[int] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)

    def number(self, key: str) -> Any:
        return self.numbers[key].value

    def numbered(self, state: InvestigationState, step: StepName) -> Finding:
        """The finding this draft becomes as ``step``'s: the next after the findings in ``state``.
        A step holding its own claims against the earlier findings (consistency) asks for it too."""
        return Finding(index=len(state.get("findings", [])) + 1, step=step, **dict(self))


StepFn = Callable[[InvestigationState, Session, Target], Draft]


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


def name_servers(finding: Finding, state: InvestigationState) -> Finding:
    """Every number of a live-server run names the server it was measured on: a number resting on log
    lines that a levers or profile finding attributes to a server (``data.server``: the load's server,
    or ``traced``, the one whose traces they are) and whose label names none gets ``[that server]``."""
    served: dict[int, str] = {}
    for earlier in [*(Finding.model_validate(f) for f in state.get("findings", [])), finding]:
        if earlier.step not in ("levers", "profile"):  # the steps whose data names a server
            continue
        server = typed(earlier).server
        name = (server.get("traced") or server.get("server")) if isinstance(server, dict) else server
        if isinstance(name, str):
            for seq in earlier.evidence or []:
                served.setdefault(seq, name)
    numbers = {}
    for key, number in finding.numbers.items():
        names = sorted({served[seq] for seq in number.seqs if seq in served})
        if names and "server" not in number.label:
            number = number.model_copy(update={"label": f"{number.label} [{'; '.join(names)}]"})
        numbers[key] = number
    return finding.model_copy(update={"numbers": numbers})


def as_node(step: StepName, fn: StepFn):
    """Wrap a step function as a node: begin the step with the session and target of the run's context
    (agent.graph.RunContext), number its draft into the next finding, record it, return it as an update."""

    def node(state: InvestigationState, runtime: Runtime) -> dict:
        session: Session = runtime.context.session
        session.begin_step(step, routes.position(state, step))
        target = runtime.context.target
        finding = fn(state, session, target).numbered(state, step)
        if engine_for(target).measured_by_client:  # a live server's numbers each name the server
            finding = name_servers(finding, state)
        finding = portable(finding)
        validate(finding)  # the step's data must fit the model the steps after it read (agent.evidence)
        session.record_finding(finding)
        session.end_step(finding)
        return {"findings": [finding.model_dump(mode="json")]}

    # Not functools.wraps: LangGraph reads the signature to inject ``runtime``, and wraps would show fn's.
    node.__name__ = node.__qualname__ = fn.__name__
    node.__doc__ = fn.__doc__
    return node
