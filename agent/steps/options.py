"""Options: each path forward with a bound computed from the evidence, then a decision.

Bounds are Amdahl over the profile. Owning the fallback stack is bounded twice: with each fallback
kernel's time become its floor (the engine's bytes and FLOPs over the box's measured copy bandwidth
and matmul rate), and, looser, with those kernels instant.

``propose_options`` records the options as a finding; ``await_decision`` asks for the choice (a
LangGraph interrupt, answered by a prompt or ``--decide``) and journals it.
"""

from __future__ import annotations

import math
from typing import Any

from langgraph.runtime import Runtime

from agent.config import Target
from agent.engine_runs import profiled_shapes
from agent.engines import engine_for
from agent.evidence import data_of, decision_question
from agent.session import Session
from agent.state import InvestigationState, finding_for
from agent.steps import Draft
from agent.steps.amdahl import amdahl, profile_times
from reports.format import fmt_spread
from schema.finding import Finding, Number, Table

CHOICES = ("auto", "splitk", "stop")


def _profile_times(state: InvestigationState) -> tuple[float, float, float | None] | None:
    """(W, t_k, t_op): the profiled steps' GPU window (the profiler's gaps kept out), the dominant
    kernel's time and its operation's (None when unattributed), as the ceiling uses them."""
    profile = finding_for(state, "profile")
    if profile is None or not data_of(profile).complete:
        return None
    times = profile_times(profile)
    return times["window_ms"], times["kernel_ms"], times["operation_ms"]


def expected_speedup(grid: Finding | None) -> dict[str, Any] | None:
    """The kernel speedup the rewrite is expected to give, from the causes the diagnosis found and the
    rewrite removes (re-gathered rows, CUDA-core math), else the grid's structural split-K estimate."""
    if grid is None:
        return None
    data = data_of(grid)
    diagnosed = data.diagnosis.rewrite_estimate if data.diagnosis else None
    if diagnosed and diagnosed.speedup:
        # with the call it was derived for and its kind: the consistency check holds it against that call alone
        extra = diagnosed.model_extra or {}
        basis = diagnosed.basis if "basis" in diagnosed.model_fields_set else "the diagnosis"
        return {"speedup": diagnosed.speedup, "basis": basis, "call": extra.get("call"),
                "kind": extra.get("speedup_kind") or "upper estimate"}
    return data.splitk_estimate.model_dump() if data.splitk_estimate else None


def _which(state: InvestigationState) -> str:
    """"dominant", or "largest" where the ceiling's kernel is under the profile's dominance threshold."""
    ceiling = finding_for(state, "ceiling")
    return "largest" if ceiling is not None and not data_of(ceiling).dominant else "dominant"


def splitk_option(state: InvestigationState, total: float, part: float, tok_s: float,
                  op_part: float | None = None) -> dict[str, Any]:
    grid = finding_for(state, "grid")
    survey = finding_for(state, "survey")
    candidate = bool(grid and data_of(grid).splitk_candidate)
    why = data_of(grid).splitk_reason if grid else "no dominant kernel, so no grid was read"
    estimate = expected_speedup(grid)
    # The rewrite replaces the whole call (kernel, merge, sink): its bound is the operation's, when attributed.
    upper = amdahl(total, op_part if op_part is not None else part)
    which = _which(state)
    option = {
        "name": "splitk", "title": f"Split-K rewrite of the {which} kernel", "offered": candidate, "why": why,
        "upper_x": upper, "upper_tok_s": tok_s * upper, "instant_x": upper,
        "bound_from": f"the {which} kernel's operation instant" if op_part is not None else f"the {which} kernel instant",
        "estimate_x": amdahl(total, part, estimate["speedup"]) if estimate else None,
        # the kernel-level upper estimate itself, held against the kernel speedup the profiles measure
        "estimate_kernel_x": estimate["speedup"] if estimate else None,
        "estimate_call": (estimate or {}).get("call"), "estimate_kind": (estimate or {}).get("kind", "upper estimate"),
        "estimate_tok_s": tok_s * amdahl(total, part, estimate["speedup"]) if estimate else None,
        "estimate_basis": (f"the kernel {estimate['speedup']:.3g}x faster ({estimate['basis']}), the rest of the step as measured"
                           if estimate else "no estimate"),
        "cost": "a Triton kernel (tools/kernels/sparse_mla_decode.py): build, check against the original and a "
                "float32 reference, time both, re-run the engine with it",
        "falsifier": "the rewrite's measured speedup misses the prediction, or beats the operation's bound; "
                     "or the kernel is already at its floor",
    }
    can, note = (data_of(survey).software.splitk_kernel, "the split-K kernel is on the box")
    if not can:
        note = "the split-K kernel module is not on the box"
    option.update(can_try_here=candidate and can, try_note=note if candidate else "not offered")
    return option


def live_server_note(server: str) -> str:
    """Why split-K is not tried on a live ``server`` (its name, the engine's ``live_server``)."""
    return (f"split-K cannot be dropped into a live {server} server: the server runs the kernel of its installed "
            f"{server}, and replacing it means patching that package and relaunching the deployment; the rewrite "
            "is measured in the engine only on the reference engine (--engine reference)")


LIVE_SERVER = live_server_note("SGLang")


def _on_engine(target: Target, option: dict[str, Any]) -> dict[str, Any]:
    """The split-K option as this target's engine can try it: on an SGLang server not at all (LIVE_SERVER),
    so ``--decide auto`` stops there with the report, and ``--decide splitk`` is refused with that reason."""
    server = engine_for(target).live_server
    if not server or not option["offered"]:
        return option
    kernel = option["can_try_here"]  # the kernel module on the box: it can be measured alone
    return {**option, "can_try_here": False, "try_note": live_server_note(server), "kernel_on_box": kernel}


def kernel_alone(session: Session, state: InvestigationState, target: Target) -> dict[str, Any]:
    """For a live SGLang server, what of split-K can be measured: the rewritten kernel alone at the server's
    attention shapes (the profiled batch, the kernel's heads a rank, the top-k width), checked against the
    float32 reference and the original (``kernel.splitk_check``) and, on a GPU, both timed by CUDA-graph
    replay (``kernel.splitk_bench``). Named as the kernel alone: the server never ran it."""
    survey, profile = finding_for(state, "survey"), finding_for(state, "profile")
    device = data_of(survey).box.device
    ran = profiled_shapes(target, device)
    shapes = {"batch": data_of(profile).batch, "topk": ran["topk"], "heads": ran["kernel_heads"]}
    check = session.call("kernel.splitk_check", {**shapes, "device": device})
    variants = ((check.get("data") or {}).get("variants") or {}).values()
    errors = [v["vs_reference"]["out_norm_rel"] for v in variants if "out_norm_rel" in v.get("vs_reference", {})]
    found = {"what": "the split-K kernel alone at the server's attention shapes, not in the server", "shapes": shapes,
             "check_ok": check["ok"], "check_error": check.get("error"), "out_rel_err": max(errors) if errors else None,
             "seqs": [check["seq"]], "speedup": None,
             "why_no_speedup": "the box has no GPU: the kernel is checked under the Triton CPU interpreter, not timed"}
    if device == "cuda" and check["ok"]:
        bench = session.call("kernel.splitk_bench", shapes)
        found["seqs"].append(bench["seq"])
        data = bench.get("data") or {}
        found.update(upstream_us=data.get("upstream_graph_us"), rewrite_us=data.get("rewrite_graph_us"),
                     speedup=data.get("speedup_vs_upstream") if bench["ok"] else None,
                     why_no_speedup=None if bench["ok"] else f"kernel.splitk_bench failed: {bench['error']}")
    return found


def _alone_table(found: dict[str, Any]) -> Table:
    shapes = found["shapes"]
    return Table(title="Split-K: the kernel alone at the server's shapes (not in the server)",
                 columns=["batch", "heads", "top-k", "check", "error vs float32", "original us", "split-K us", "speedup", "log"],
                 rows=[[shapes["batch"], shapes["heads"], shapes["topk"],
                        "passed" if found["check_ok"] else f"failed: {found['check_error']}", found["out_rel_err"],
                        found.get("upstream_us"), found.get("rewrite_us"), found["speedup"] or found["why_no_speedup"],
                        ", ".join(map(str, found["seqs"]))]],
                 note=f"{LIVE_SERVER}; what can be measured is the kernel on its own: one call at the profiled batch "
                      f"and the server's per-rank shapes, against the float32 reference and the original kernel, timed "
                      f"by CUDA-graph replay where the box has a GPU")


def kernel_floor_ms(work_bytes: float, flops: float, gb_s: float, tflop_s: float) -> tuple[float, str]:
    """A kernel's floor in ms and what sets it: max(bytes / bandwidth, FLOPs / matmul rate)."""
    memory_ms = work_bytes / (gb_s * 1e9) * 1e3
    compute_ms = flops / (tflop_s * 1e12) * 1e3
    return (memory_ms, "memory") if memory_ms >= compute_ms else (compute_ms, "compute")


def floor_bound(total: float, parts: list[tuple[float, float | None]]) -> float:
    """Whole-step speedup when each kernel's time t becomes its floor: ``T / (T - sum t + sum floor)``.

    ``parts`` holds (t, floor) pairs; a floor of None (no work model) counts as an instant kernel, and
    a floor above t (the box beat its measured copy bandwidth, e.g. from cache) counts as t: owning a
    kernel is never modelled as a slowdown.
    """
    measured = math.fsum(t for t, _ in parts)
    if not 0 <= measured <= total or total <= 0:
        raise ValueError(f"need 0 <= kernel time ({measured}) <= total ({total}) and total > 0")
    remaining = total - measured + math.fsum(min(f, t) for t, f in parts if f is not None)
    return math.inf if remaining == 0 else total / remaining


def box_rates(state: InvestigationState) -> tuple[dict[str, Any] | None, str]:
    """The survey's measured copy bandwidth and matmul rate (with their log lines), or None and why."""
    survey = finding_for(state, "survey")
    if survey is None or not {"copy_gb_s", "matmul_tflop_s"} <= set(survey.numbers):
        error = (data_of(survey).survey.get("rates") or {}).get("error") if survey else None
        return None, f"no measured rates ({error or 'the survey reported none'})"
    copy, matmul = survey.numbers["copy_gb_s"], survey.numbers["matmul_tflop_s"]
    return {"gb_s": copy.value, "tflop_s": matmul.value, "dtype": data_of(survey).survey["rates"]["matmul"]["dtype"],
            "seqs": sorted(set(copy.seqs) | set(matmul.seqs))}, ""


def fallback_floors(state: InvestigationState, total: float) -> dict[str, Any]:
    """Each profiled fallback kernel (the gates' ``fallback_kernels`` joined with the profile's kernel
    table) against its floor over the profiled window: the engine's bytes and FLOPs a step times the
    steps profiled, over the box's measured rates. A kernel without a work model, or whose profiled
    calls the model does not account for, or a box without measured rates, gets no floor, says why,
    and counts as instant in the bound."""
    gates = finding_for(state, "gates")
    profile = finding_for(state, "profile")
    fallbacks = data_of(gates).fallback_kernels if gates else []
    profiled = {k["name"]: k for k in data_of(profile).summary["merged"]["kernels"]}
    names = sorted({f.kernel for f in fallbacks} & set(profiled))
    steps = profile.number("steps")
    work = (data_of(profile).attention_work or {}).get("kernels", {})
    rates, no_rates = box_rates(state)
    kernels = []
    for name in names:
        t = profiled[name]["total_us"] / 1000
        row = {"kernel": name, "calls": profiled[name]["calls"], "ms": t, "bytes": None, "flops": None,
               "floor_ms": None, "floor_from": None, "headroom": None, "note": ""}
        model = work.get(name)
        if model is None:
            row["note"] = "no floor (no bytes/FLOPs model)"
        elif model["calls_per_step"] * steps != row["calls"]:
            row["note"] = (f"no floor (the model's {model['calls_per_step']} calls a step x {steps} steps "
                           f"!= {row['calls']} profiled calls)")
        else:
            row.update(bytes=model["bytes_per_step"] * steps, flops=model["flops_per_step"] * steps)
            if rates is None:
                row["note"] = f"no floor ({no_rates})"
            else:
                row["floor_ms"], row["floor_from"] = kernel_floor_ms(row["bytes"], row["flops"], rates["gb_s"], rates["tflop_s"])
                row["headroom"] = t / row["floor_ms"] if row["floor_ms"] else math.inf
                if row["floor_ms"] > t:
                    row["note"] = "measured under its floor (data held in cache between steps?): bounded as is"
        row["bound_x"] = floor_bound(total, [(t, row["floor_ms"])])
        row["instant_x"] = amdahl(total, t)
        kernels.append(row)
    rest = _operation_rest(profile, names)
    if rest:
        kernels.append({**rest, "bound_x": floor_bound(total, [(rest["ms"], None)]), "instant_x": amdahl(total, rest["ms"])})
    parts = [(k["ms"], k["floor_ms"]) for k in kernels]
    return {
        "kernels": kernels, "steps": steps, "rates": rates, "no_rates": no_rates,
        "ms": math.fsum(t for t, _ in parts),
        "floor_ms": math.fsum(min(f, t) for t, f in parts if f is not None),
        "without_floor": [k["kernel"] for k in kernels if k["floor_ms"] is None and k["calls"] is not None],
        "operation_rest_ms": rest["ms"] if rest else None,
        "bound_x": floor_bound(total, parts) if parts else 1.0,
        "instant_x": amdahl(total, math.fsum(t for t, _ in parts)) if parts else 1.0,
    }


def floors_table(floors: dict[str, Any], total: float) -> Table:
    """The fallback kernels against their floors, one row each and one for them all."""
    rows = [[k["kernel"], k["calls"], k["ms"], k["bytes"], k["flops"], k["floor_ms"], k["floor_from"] or k["note"],
             k["headroom"], k["bound_x"], k["instant_x"]] for k in floors["kernels"]]
    if len(rows) > 1:
        unfloored = sum(1 for k in floors["kernels"] if k["floor_ms"] is None)
        rows.append([f"all {len(rows)} parts", sum(k["calls"] or 0 for k in floors["kernels"]), floors["ms"],
                     None, None, floors["floor_ms"], f"{unfloored} without a floor: instant",
                     None, floors["bound_x"], floors["instant_x"]])
    rates = floors["rates"]
    note = (f"floor = max(bytes / {rates['gb_s']:.4g} GB/s copy bandwidth, FLOPs / {rates['tflop_s']:.4g} TFLOP/s "
            f"{rates['dtype']} matmul), both measured on the box by box.survey; bytes and FLOPs are the engine's "
            f"work model a step x {floors['steps']} profiled steps; headroom = measured / floor; "
            f"bound = W / (W - t + floor) with W = {total:.4g} ms (the profiled steps' window, as the ceiling), "
            f"instant = W / (W - t)"
            if rates else f"{floors['no_rates']}: every kernel bounded as instant")
    return Table(title="Fallback kernels against their floors",
                 columns=["kernel", "calls", "measured ms", "bytes", "FLOPs", "floor ms", "floor from",
                          "headroom (x)", "bound (x)", "instant (x)"], rows=rows, note=note)


def _operation_rest(profile: Finding, fallbacks: list[str]) -> dict[str, Any] | None:
    """The dominant fallback kernel's operation less the kernel itself (its merge, sink and fill
    kernels), as a part of the fallback stack: owning the stack replaces the whole call, as the
    split-K rewrite does, so it goes with the kernel; no floor of its own (counted as instant).
    None when the dominant kernel is not a fallback or its operation is not attributed."""
    dominant = data_of(profile).dominant.name if data_of(profile).dominant else None
    times = profile_times(profile)
    if dominant not in fallbacks or times["operation_ms"] is None:
        return None
    rest = times["operation_ms"] - times["kernel_ms"]
    if rest <= 0:
        return None
    operation = (data_of(profile).operation.name if data_of(profile).operation else None) or "its operation"
    return {"kernel": f"the rest of {operation} (around {dominant})", "calls": None, "ms": rest, "bytes": None,
            "flops": None, "floor_ms": None, "floor_from": None, "headroom": None,
            "note": "replaced with the kernel when the stack is owned: no floor, counted as instant"}


def fallback_option(state: InvestigationState, total: float, tok_s: float) -> dict[str, Any]:
    floors = fallback_floors(state, total)
    names = [k["kernel"] for k in floors["kernels"] if k["calls"] is not None]  # the kernels, not the operation's rest
    share = floors["ms"] / total if total else 0.0
    if not names:
        basis = "no profiled fallback kernel"
    elif floors["without_floor"]:
        basis = (f"the fallback kernels at their floors; {', '.join(floors['without_floor'])} without one, "
                 f"counted as instant")
    else:
        basis = "the fallback kernels at their floors (measured box bandwidth and matmul rate)"
    if names and floors["operation_rest_ms"] is not None:
        basis += "; the rest of the dominant kernel's operation instant (the stack's own merge, sink and fill)"
    return {
        "name": "own-fallbacks", "title": "Own the fallback kernel stack", "offered": bool(names),
        "why": (f"the gates tie {len(names)} profiled kernel(s) to gated-off fast paths: {', '.join(names)}"
                if names else "the gates tie no profiled kernel to a gated-off fast path"),
        "share": share, "upper_x": floors["bound_x"], "upper_tok_s": tok_s * floors["bound_x"],
        "instant_x": floors["instant_x"], "bound_from": basis, "floors": floors,
        "estimate_x": None, "estimate_tok_s": None,
        "estimate_basis": f"upper bound: {basis}; with those kernels instant {floors['instant_x']:.4g}x",
        "cost": "writing and maintaining kernels for every gated-off path on the declared architecture",
        "falsifier": "the fallback kernels are already near their memory/compute floors on the declared hardware",
        "can_try_here": False, "try_note": "a development project, not a run",
    }


def hardware_option(state: InvestigationState, target: Target, tok_s: float, fallback: dict[str, Any]) -> dict[str, Any]:
    gates = finding_for(state, "gates")
    passing = data_of(gates).architectures_passing if gates else []
    basis = ("the fallback kernels instant" + (" with the rest of the dominant kernel's operation"
                                               if fallback["floors"]["operation_rest_ms"] is not None else "")
             + " (the gated path's own time on that hardware is not measured here)")
    return {
        "name": "move-hardware", "title": "Move to hardware whose gates pass", "offered": bool(passing),
        "why": (f"the gated fast paths {', '.join(sorted({f.fast_path for f in data_of(gates).fallback_kernels}))} "
                f"are allowed on {len(passing)} other architectures ({_among(passing)}); "
                f"sm_{target.deployment.sm} falls back"
                if passing else "no gate names another architecture"),
        "upper_x": fallback["instant_x"], "upper_tok_s": tok_s * fallback["instant_x"], "instant_x": fallback["instant_x"],
        "bound_from": basis, "estimate_x": None, "estimate_tok_s": None,
        "estimate_basis": f"upper bound: {basis}; the instant bound is kept, the looser one, since the floors "
                          "measured on this box say nothing of the other hardware's gated path",
        "cost": "new hardware (e.g. B200, sm_100) and a redeployment",
        "falsifier": "a benchmark of the gated path on that hardware at the deployment's shapes",
        "can_try_here": False, "try_note": "needs the other hardware",
    }


def _among(passing: list[int]) -> str:
    """Which of the Hopper and Blackwell datacenter SMs (sm_90, sm_100) the architectures include, in words."""
    named = [f"sm_{sm}" for sm in (90, 100) if sm in passing]
    return " and ".join(named) + " among them" if named else "neither sm_90 nor sm_100 among them"


def accept_option(tok_s: float) -> dict[str, Any]:
    return {
        "name": "accept-ceiling", "title": "Accept the ceiling (stop here)", "offered": True,
        "why": "always available", "upper_x": 1.0, "upper_tok_s": tok_s, "instant_x": 1.0,
        "bound_from": "today's measurement", "estimate_x": 1.0, "estimate_tok_s": tok_s,
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


OPTION_COLUMNS = ["option", "offered", "bound (x)", "bound tok/s", "bound from", "instant bound (x)", "estimate (x)",
                  "cost to try", "what would prove it wrong", "try here"]


def _bound_seqs(option: dict[str, Any], profile: Finding | None) -> list[int]:
    """The journal lines an option's bound rests on: the profile's trace for the shares (the fallback floors' rates
    too), the profiled setting's measured run for 'today's measurement'."""
    if profile is None:
        return []
    if option["name"] == "accept-ceiling":
        return list(profile.numbers["setting_tok_s"].seqs)
    rates = (option.get("floors") or {}).get("rates") or {}
    return sorted(set(profile.evidence) | set(rates.get("seqs") or []))


def option_row(o: dict[str, Any], spread: float | None = None) -> list[Any]:
    """One option's row; bounds to the digits the ceiling's spread supports (see amdahl.bound_spread)."""
    q = (lambda v: fmt_spread(v, spread)) if spread is not None else (lambda v: v)
    return [o["name"], "yes" if o["offered"] else "no", q(o["upper_x"]), q(o["upper_tok_s"]), o["bound_from"],
            q(o["instant_x"]), o["estimate_x"], o["cost"], o["falsifier"], "yes" if o["can_try_here"] else f"no: {o['try_note']}"]


def propose_options(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Turn the findings into options, each with its bound (Amdahl from the measured profile), its
    cost, what would prove it wrong, and whether this box can try it. Owning the fallback stack is
    bounded by the fallback kernels at their floors (bytes and FLOPs from the engine over the box's
    measured bandwidth and matmul rate), with the looser instant bound beside it. No tool calls, but on an
    SGLang server: there split-K is not tried in the server, and its kernel is measured alone (kernel_alone)."""
    levers = finding_for(state, "levers")
    times = _profile_times(state)
    profile = finding_for(state, "profile")
    tok_s = profile.number("setting_tok_s") if profile else levers.number("baseline_tok_s")
    tables, numbers = [], {}
    if times is None:
        options = [accept_option(tok_s)]
    else:
        total, part, op_part = times
        fallback = fallback_option(state, total, tok_s)
        options = [_on_engine(target, splitk_option(state, total, part, tok_s, op_part)), fallback,
                   hardware_option(state, target, tok_s, fallback), accept_option(tok_s)]
        floors = fallback["floors"]
        if floors["kernels"]:
            tables.append(floors_table(floors, total))
            seqs = sorted(set(profile.evidence) | set(floors["rates"]["seqs"] if floors["rates"] else []))
            numbers = {
                "fallback_ms": Number(value=floors["ms"], unit="ms", label="fallback kernels' time in the profile",
                                      seqs=profile.evidence),
                "fallback_floor_ms": Number(value=floors["floor_ms"], unit="ms", seqs=seqs,
                                            label="their floors over the profiled window (kernels without one: 0)"),
                "own-fallbacks_instant_x": Number(value=fallback["instant_x"], unit="x", seqs=profile.evidence,
                                                  label="Own the fallback kernel stack: those kernels instant"),
            }
    splitk = next((o for o in options if o["name"] == "splitk"), None)
    server = engine_for(target).live_server
    if server and splitk and splitk["offered"] and splitk.get("kernel_on_box"):
        found = kernel_alone(session, state, target)
        splitk["kernel_alone"] = found
        tables.append(_alone_table(found))
        if found["speedup"]:
            splitk.update(estimate_x=amdahl(total, part, found["speedup"]),
                          estimate_tok_s=tok_s * amdahl(total, part, found["speedup"]),
                          estimate_basis=f"the kernel {found['speedup']:.3g}x faster, measured alone at the server's "
                                         f"shapes (kernel.splitk_bench), the rest of the step as measured")
    ceiling = finding_for(state, "ceiling")
    spread = ceiling.numbers["ceiling_tok_s"].spread if ceiling and "ceiling_tok_s" in ceiling.numbers else None
    auto = auto_choice(options)
    offered = [o["name"] for o in options if o["offered"]]
    headline = f"{len(offered)} option(s) offered: {', '.join(offered)}; auto would choose {auto}"
    if server and any(o["name"] == "splitk" and o["offered"] for o in options):
        headline += f" (split-K is not tried: {live_server_note(server)})"
    if times is not None and fallback["offered"]:
        headline += (f"; the fallback kernels at their floors bound owning them at {fmt_spread(fallback['upper_x'], spread)}x "
                     f"(instant: {fmt_spread(fallback['instant_x'], spread)}x)")
    return Draft(
        headline=headline, verdict=f"auto:{auto}",
        numbers={**{f"{o['name']}_upper_x": Number(value=o["upper_x"], unit="x", seqs=_bound_seqs(o, profile),
                                                    label=f"{o['title']}: upper bound, {o['bound_from']}")
                    for o in options}, **numbers},
        tables=[Table(title="Options", columns=OPTION_COLUMNS, rows=[option_row(o, spread) for o in options]), *tables],
        evidence=sorted({s for f in ("survey", "levers", "profile", "grid", "gates") if finding_for(state, f)
                         for s in finding_for(state, f).evidence}
                        | set(((splitk or {}).get("kernel_alone") or {}).get("seqs") or [])),
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
    """Ask the session for the decision: the user's on a live run (an interrupt), the recorded one on
    replay; it is journaled."""
    session: Session = runtime.context.session
    options_finding = finding_for(state, "options")
    options, auto = decision_question(options_finding)
    decision = session.decide({"options": options, "auto": auto, "choices": list(CHOICES)})
    return {"decision": decision}
