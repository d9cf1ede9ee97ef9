"""Routers: where the investigation goes next, decided on the evidence in the findings."""

from __future__ import annotations

from typing import Literal

from agent.evidence import evidence
from agent.state import InvestigationState, finding_for


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
    ceiling = finding_for(state, "ceiling")
    return "profile_decode" if ceiling.data.get("beaten_by") and ceiling.data.get("round", 1) == 1 else "scan_gates"


def after_decision(state: InvestigationState) -> Literal["build_splitk", "write_report"]:
    return "build_splitk" if (state.get("decision") or {}).get("choice") == "splitk" else "write_report"
