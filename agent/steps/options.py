"""Options: each path forward with a bound computed from the evidence, then a decision.

``propose_options`` records the options as a finding; ``await_decision`` asks for the choice (a
LangGraph interrupt, answered by a prompt or ``--decide``) and journals it.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps.ceiling import amdahl
from agent.steps.survey import target_of

CHOICES = ("auto", "splitk", "stop")


def _profile_times(state: InvestigationState) -> tuple[float, float, dict] | None:
    profile = finding_for(state, "profile")
    if profile is None or not profile.data.get("complete"):
        return None
    kernel = profile.data["dominant"] or profile.data["leader"]
    return profile.number("total_ms"), kernel["total_us"] / 1000, kernel


def splitk_option(state: InvestigationState, total: float, part: float, tok_s: float) -> dict[str, Any]:
    grid = finding_for(state, "grid")
    survey = finding_for(state, "survey")
    candidate = bool(grid and grid.data.get("splitk_candidate"))
    why = grid.data.get("splitk_reason", "the grid step did not run") if grid else "no dominant kernel, so no grid was read"
    estimate = grid.data.get("splitk_estimate") if grid else None
    upper = amdahl(total, part)
    option = {
        "name": "splitk", "title": "Split-K rewrite of the dominant kernel", "offered": candidate, "why": why,
        "upper_x": upper, "upper_tok_s": tok_s * upper,
        "estimate_x": amdahl(total, part, estimate["speedup"]) if estimate else None,
        "estimate_tok_s": tok_s * amdahl(total, part, estimate["speedup"]) if estimate else None,
        "estimate_basis": estimate["basis"] if estimate else "no structural estimate",
        "cost": "a Triton kernel (tools/kernels/sparse_mla_decode.py): build, check against the original and a "
                "float32 reference, time both, re-run the engine with it",
        "falsifier": "the rewrite's measured kernel speedup, put through Amdahl, misses the engine's measured tok/s; "
                     "or the kernel is already at its memory floor",
    }
    can, note = (survey.data["software"].get("splitk_kernel", False), "the split-K kernel is on the box")
    if not can:
        note = "the split-K kernel module is not on the box"
    option.update(can_try_here=candidate and can, try_note=note if candidate else "not offered")
    return option


def fallback_option(state: InvestigationState, total: float, tok_s: float) -> dict[str, Any]:
    gates = finding_for(state, "gates")
    fallbacks = gates.data.get("fallback_kernels", []) if gates else []
    profile = finding_for(state, "profile")
    kernels = {k["name"]: k for k in profile.data["summary"]["merged"]["kernels"]}
    part = sum(kernels[name]["total_us"] for name in {f["kernel"] for f in fallbacks} if name in kernels) / 1000
    share = part / total if total else 0.0
    upper = amdahl(total, part) if part else 1.0
    names = sorted({f["kernel"] for f in fallbacks})
    return {
        "name": "own-fallbacks", "title": "Own the fallback kernel stack", "offered": bool(names),
        "why": (f"the gates tie {len(names)} profiled kernel(s) to gated-off fast paths: {', '.join(names)}"
                if names else "the gates tie no profiled kernel to a gated-off fast path"),
        "share": share, "upper_x": upper, "upper_tok_s": tok_s * upper, "estimate_x": None, "estimate_tok_s": None,
        "estimate_basis": "upper bound: those kernels instant; their real floor is their bytes at the declared "
                          "hardware's bandwidth",
        "cost": "writing and maintaining kernels for every gated-off path on the declared architecture",
        "falsifier": "the fallback kernels are already near their memory/compute floors on the declared hardware",
        "can_try_here": False, "try_note": "a development project, not a run",
    }


def hardware_option(state: InvestigationState, total: float, tok_s: float) -> dict[str, Any]:
    gates = finding_for(state, "gates")
    target = target_of(state)
    passing = gates.data.get("architectures_passing", []) if gates else []
    fallback = fallback_option(state, total, tok_s)
    return {
        "name": "move-hardware", "title": "Move to hardware whose gates pass", "offered": bool(passing),
        "why": (f"the gated fast paths {', '.join(sorted({f['fast_path'] for f in gates.data['fallback_kernels']}))} "
                f"are allowed on {len(passing)} other architectures (sm_90 and sm_100 among them: "
                f"{90 in passing and 100 in passing}); sm_{target.deployment.sm} falls back"
                if passing else "no gate names another architecture"),
        "upper_x": fallback["upper_x"], "upper_tok_s": fallback["upper_tok_s"], "estimate_x": None, "estimate_tok_s": None,
        "estimate_basis": "upper bound: the fallback kernels replaced by the gated path at zero cost",
        "cost": "new hardware (e.g. B200, sm_100) and a redeployment",
        "falsifier": "a benchmark of the gated path on that hardware at the deployment's shapes",
        "can_try_here": False, "try_note": "needs the other hardware",
    }


def accept_option(tok_s: float) -> dict[str, Any]:
    return {
        "name": "accept-ceiling", "title": "Accept the ceiling (stop here)", "offered": True,
        "why": "always available", "upper_x": 1.0, "upper_tok_s": tok_s, "estimate_x": 1.0, "estimate_tok_s": tok_s,
        "estimate_basis": "today's measurement", "cost": "none", "falsifier": "-",
        "can_try_here": True, "try_note": "ends the investigation with the report",
    }


def auto_choice(options: list[dict[str, Any]]) -> str:
    """The offered option with the largest bound that can be tried on this box; else stop."""
    triable = [o for o in options if o["offered"] and o["can_try_here"] and o["name"] != "accept-ceiling"]
    if not triable:
        return "stop"
    best = max(triable, key=lambda o: (o["estimate_x"] or o["upper_x"], o["upper_x"]))
    return best["name"]


def propose_options(state: InvestigationState, session: Session) -> Finding:
    """Turn the findings into options, each with its bound (Amdahl from the measured profile), its
    cost, what would prove it wrong, and whether this box can try it. No tool calls."""
    levers = finding_for(state, "levers")
    times = _profile_times(state)
    profile = finding_for(state, "profile")
    tok_s = profile.number("setting_tok_s") if profile else levers.number("baseline_tok_s")
    if times is None:
        options = [accept_option(tok_s)]
    else:
        total, part, _ = times
        options = [splitk_option(state, total, part, tok_s), fallback_option(state, total, tok_s),
                   hardware_option(state, total, tok_s), accept_option(tok_s)]
    auto = auto_choice(options)
    rows = [[o["name"], "yes" if o["offered"] else "no", o["upper_x"], o["upper_tok_s"], o["estimate_x"],
             o["cost"], o["falsifier"], "yes" if o["can_try_here"] else f"no: {o['try_note']}"] for o in options]
    offered = [o["name"] for o in options if o["offered"]]
    headline = f"{len(offered)} option(s) offered: {', '.join(offered)}; auto would choose {auto}"
    return Finding(
        index=next_index(state), step="options", headline=headline, verdict=f"auto:{auto}",
        numbers={f"{o['name']}_upper_x": Number(value=o["upper_x"], unit="x", label=f"{o['title']}: upper bound")
                 for o in options},
        tables=[Table(title="Options", columns=["option", "offered", "bound (x)", "bound tok/s", "estimate (x)",
                                                 "cost to try", "what would prove it wrong", "try here"], rows=rows)],
        evidence=sorted({s for f in ("levers", "profile", "grid", "gates") if finding_for(state, f)
                         for s in finding_for(state, f).evidence}),
        labels=list(levers.labels),
        data={"options": options, "auto": auto},
    )


def resolve_choice(asked: str, options: list[dict[str, Any]], auto: str) -> tuple[str | None, str]:
    """The option an answer selects, or None and why it cannot be taken."""
    if asked not in CHOICES:
        return None, f"unknown decision {asked!r} (choose one of {', '.join(CHOICES)})"
    if asked == "auto":
        return auto, f"auto chose {auto}"
    if asked == "stop":
        return "stop", "stop: accept the ceiling"
    option = next((o for o in options if o["name"] == asked), None)
    if option is None or not option["offered"]:
        return None, f"{asked} was not offered by the evidence ({option['why'] if option else 'no such option'})"
    if not option["can_try_here"]:
        return None, f"{asked} cannot be tried on this box: {option['try_note']}"
    return asked, f"{asked} chosen"


def await_decision(state: InvestigationState, runtime: Runtime) -> dict:
    """Wait for the decision (interrupt), or take the recorded one on replay; journal it."""
    session: Session = runtime.context.session
    options_finding = finding_for(state, "options")
    served = session.served_decision()
    if served is not None:
        decision = {k: served[k] for k in ("choice", "asked", "source", "note")}
    else:
        answer = interrupt({"options": options_finding.data["options"], "auto": options_finding.data["auto"],
                            "choices": list(CHOICES)})
        decision = dict(answer)
    session.record_decision(decision)
    return {"decision": decision}
