"""The investigation as a LangGraph StateGraph: wiring only."""

from __future__ import annotations

from dataclasses import dataclass

from langgraph.graph import END, START, StateGraph

from agent import routes
from agent.config import Target
from agent.session import Session
from agent.state import InvestigationState
from agent.steps import as_node
from agent.steps.ceiling import compute_ceiling
from agent.steps.gates import scan_gates
from agent.steps.grid import read_grid
from agent.steps.levers import sweep_levers
from agent.steps.options import await_decision, propose_options
from agent.steps.profile import profile_decode
from agent.steps.report import write_report
from agent.steps.round2 import round2
from agent.steps.splitk import build_splitk
from agent.steps.survey import survey_box


@dataclass
class RunContext:
    """What every node of a run reads beside the state, as LangGraph carries a run's configuration:
    the session its tool calls go through, and the validated target (not checkpointed: each attempt,
    resume or replay builds it from the target its journal recorded)."""

    session: Session
    target: Target


def build_graph(checkpointer=None):
    graph = StateGraph(InvestigationState, context_schema=RunContext)
    graph.add_node("survey_box", as_node("survey", survey_box))
    graph.add_node("sweep_levers", as_node("levers", sweep_levers))
    graph.add_node("profile_decode", as_node("profile", profile_decode))
    graph.add_node("read_grid", as_node("grid", read_grid))
    graph.add_node("compute_ceiling", as_node("ceiling", compute_ceiling))
    graph.add_node("scan_gates", as_node("gates", scan_gates))
    graph.add_node("propose_options", as_node("options", propose_options))
    graph.add_node("await_decision", await_decision)
    graph.add_node("build_splitk", as_node("splitk", build_splitk))
    graph.add_node("round2", as_node("round2", round2))
    graph.add_node("write_report", as_node("report", write_report))

    graph.add_edge(START, "survey_box")
    graph.add_edge("survey_box", "sweep_levers")
    graph.add_conditional_edges("sweep_levers", routes.after_levers)
    graph.add_conditional_edges("profile_decode", routes.after_profile)
    graph.add_edge("read_grid", "compute_ceiling")
    graph.add_conditional_edges("compute_ceiling", routes.after_ceiling)
    graph.add_edge("scan_gates", "propose_options")
    graph.add_edge("propose_options", "await_decision")
    graph.add_conditional_edges("await_decision", routes.after_decision)
    graph.add_edge("build_splitk", "round2")
    graph.add_edge("round2", "write_report")
    graph.add_edge("write_report", END)
    return graph.compile(checkpointer=checkpointer)
