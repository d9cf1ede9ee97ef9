"""Routers: where the investigation goes next, decided on the evidence in the findings."""

from __future__ import annotations

from typing import Literal

from agent.evidence import evidence
from agent.state import InvestigationState


def after_levers(state: InvestigationState) -> Literal["profile_decode", "write_report"]:
    """A goal already met by a measured setting needs no profile."""
    return "write_report" if evidence(state, "levers").goal_met else "profile_decode"


def after_profile(state: InvestigationState) -> Literal["read_grid", "compute_ceiling", "scan_gates"]:
    """An incomplete trace supports no ranking and no ceiling; no dominant kernel, no grid to read."""
    profile = evidence(state, "profile")
    if not profile.complete:
        return "scan_gates"
    return "read_grid" if profile.dominant else "compute_ceiling"


def after_ceiling(state: InvestigationState) -> Literal["profile_decode", "scan_gates"]:
    """A backend lever measured above the ceiling of the profiled setting: the model was wrong about
    that setting, so the investigation goes on from the best measured setting (once)."""
    ceiling = evidence(state, "ceiling")
    return "profile_decode" if ceiling.beaten_by and ceiling.round == 1 else "scan_gates"


# The steps that follow each step on the graph's main line when no route branches off it (no goal met
# by a lever, a complete profile with a dominant kernel, no lever beating the ceiling, no split-K).
_AHEAD = {"survey": 7, "levers": 6, "profile": 5, "grid": 4, "ceiling": 3, "gates": 2, "options": 1,
          "splitk": 2, "round2": 1, "report": 0}


def position(state: InvestigationState, step: str) -> str:
    """Where ``step`` stands among the run's steps, for the progress view: "3/8+" is the third step of
    the eight that the evidence so far leads through, the "+" saying that steps may come on top (the
    decision may take split-K, two more; a lever beating the ceiling profiles again, three more). The
    total is the path as known, never a maximum the run rarely takes, so it shrinks where a route skips
    steps ("3/3": a goal met by a lever goes straight to the report) and loses its "+" once the
    decision is taken. A step's number is its finding's index: a resumed run counts what it did before."""
    done = len(state.get("findings", []))
    more = step in ("survey", "levers", "profile", "grid", "ceiling", "gates", "options")
    return f"{done + 1}/{done + 1 + _AHEAD.get(step, 0)}{'+' if more else ''}"


def after_decision(state: InvestigationState) -> Literal["build_splitk", "write_report"]:
    return "build_splitk" if (state.get("decision") or {}).get("choice") == "splitk" else "write_report"
