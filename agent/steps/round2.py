"""Round 2: after the split-K rewrite, the profile, grid and ceiling again on the new configuration.

The split-K step's profiled engine run is the new profile: what dominates now and its operation; the
rewrite's kernels' grid where their source is Triton-language code on the box, with the diagnosis
(bytes loaded against unique bytes, tensor-core dots or CUDA-core math); and the ceiling with
``agent.steps.amdahl``'s arithmetic on the split-K setting's measured tok/s.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from statistics import median
from typing import Any

from agent import consistency
from agent.config import Target
from agent.engine_runs import profiled_shapes
from agent.evidence import KernelRow, Operation, data_of, typed
from agent.session import Session
from agent.state import InvestigationState, finding_for, findings_of
from agent.steps import Draft
from agent.steps.amdahl import (amdahl, bound_spread, ceiling_table, profile_times, quoted, speedup_needed, step_against_goal,
                                stretch_range, stretch_text, times_of)
from agent.steps.attribution import NAME_WIDTH, SHOWN_KERNELS, attribute_dominant
from agent.steps.diagnosis import diagnosis_summary, diagnosis_table
from agent.steps.measurements import interpretation_labels, ratio_text
from reports.format import fmt, fmt_spread, kernel_label, kernel_names_of
from schema.finding import Finding, Number, Table
from tools import trace

# The rewrite's source as the box's tools read it: box-side tools run from the repository root.
REWRITE_SOURCE = "tools/kernels/sparse_mla_decode.py"
# The sm_120 kernel is defined in a file of its own and launched from REWRITE_SOURCE: its grid is read over
# the folder that holds both.
KERNEL_SOURCES = {"_split_kernel_sm120": "tools/kernels"}
REWRITE_TRITON = ("_split_kernel", "_split_dhalf_kernel", "_split_kernel_sm120", "_combine_kernel")
REWRITE_GLUON = ("_split_kernel_ws", "_split_kernel_sm90")  # @gluon.jit: not Triton-language code


def splitk_label(profile: Finding, splitk: Finding) -> str:
    """The split-K setting's label, as the split-K step names it."""
    setting = data_of(splitk).setting
    return (setting.label if setting is not None else None) or f"{data_of(profile).setting.label} + split-K"


def eager_trace(splitk: Finding) -> str | None:
    """The eager twin of the split-K run's trace (for attribution when the run was a graph replay):
    the split-K finding's ``eager_trace`` artifact, else the trace its own attribution used."""
    if splitk.artifacts.get("eager_trace"):
        return splitk.artifacts["eager_trace"]
    after = data_of(splitk).operation_after or {}
    return after.get("trace") if after.get("source") == "eager profile" else None


def new_profile(session: Session, splitk: Finding, steps_default: int) -> tuple[Any, dict[str, Any]]:
    """The split-K run's trace summarized; returns (summary, profile-like numbers and data for
    ``profile_times``: ``steps``, ``total_ms``, the in-step window and the between-step gaps)."""
    ref = {"path": splitk.artifacts["trace"]}
    summary = trace.summarize([session.artifact_path(ref)])
    merged = summary.merged
    seq = splitk.evidence[:1]
    numbers = {
        "steps": Number(value=merged.steps or steps_default, unit="steps", label="decode steps profiled with split-K", seqs=seq),
        "trace_kernel_ms": Number(value=merged.kernel_time_us / 1000, unit="ms", label="sum of kernel durations with split-K", seqs=seq),
        "total_ms": Number(value=(merged.kernel_time_us + merged.idle_us) / 1000, unit="ms", label="kernel time + idle time with split-K", seqs=seq),
        "idle_share": Number(value=merged.idle_share, unit="fraction", label="idle share of the window with split-K", seqs=seq),
    }
    if merged.in_step_window_us is not None:
        numbers["in_step_window_ms"] = Number(value=merged.in_step_window_us / 1000, unit="ms", label="window inside the profiled steps", seqs=seq)
        numbers["between_steps_idle_ms"] = Number(value=merged.between_steps_idle_us / 1000, unit="ms", label="idle between profiled steps", seqs=seq)
    return summary, numbers


def grid_subject(top: str, kernels: list[dict], before: set[str], names: dict | None = None) -> tuple[str | None, str]:
    """The kernel whose grid round 2 reads, and why: the dominant kernel when it is one of the
    rewrite's; else the largest of the rewrite's kernels in the trace (the dominant one's source is not
    the box's: a library kernel), named as not the dominant; None when the trace has none of them."""
    ours = REWRITE_TRITON + REWRITE_GLUON
    if top in ours:
        return top, f"{top} dominates, and it is the rewrite's ({REWRITE_SOURCE})"
    rewrite = next((k["name"] for k in kernels if k["name"] in ours and k["name"] not in before), None)
    why = f"the dominant kernel {kernel_label(top, names)} is not one of the rewrite's kernels: its source is not on the box to read"
    if rewrite is None:
        return None, why + "; the trace holds none of the rewrite's kernels"
    return rewrite, why + f"; the grid read is of the rewrite's largest kernel, {rewrite}"


def widest_call(calls: list[dict]) -> dict:
    """The engine's attention call with the widest top-k (its compressed cache, where it has one)."""
    return max(calls, key=lambda c: max(c.get("topk") or 0, c.get("extra_topk") or 0))


def plan_points(target, box: dict, batch: int, calls: list[dict], plan_arch: int | None = None) -> list[dict]:
    """Where the rewrite's grid is read: the engine's widest call as it ran on the box (planned as the
    wrapper plans there: for ``plan_arch``, the declared GPU's plan the split-K step ran on a stand-in, on
    the box's SMs), and the deployment's call at the goal's concurrency planned for the declared
    hardware (window cache of the sliding window's width, compressed cache of the index top-k). Rows
    run to their full top-k (``lengths`` off: the lengths only shorten a row's loop, so the bytes are
    those of full rows)."""
    call = widest_call(calls)
    deployment = target.deployment
    heads = deployment.kernel_heads(target.model.heads)
    return [
        {"label": f"profiled B={batch}", "where": "box", "batch": call["batch"], "heads": call["heads"], "topk": call["topk"],
         "extra_topk": call.get("extra_topk"), "lengths": False, "sink": bool(call.get("sink")), "device": box["device"],
         **({"arch": plan_arch} if plan_arch else {})},
        {"label": f"deployment B={target.goal.concurrency}", "where": "declared", "batch": target.goal.concurrency, "heads": heads,
         "topk": target.model.sliding_window, "extra_topk": target.model.index_topk, "lengths": False, "sink": True,
         "arch": deployment.sm, "sms": deployment.sm_count},
    ]


def launch_for(kernel: str, planned: dict) -> dict:
    """The planned launch whose grid is read for ``kernel``: the combine, or the widest cache's split launch."""
    if kernel == "_combine_kernel":
        return planned["combine"]
    return max(planned["launches"], key=lambda l: l["topk"])


def read_rewrite_grid(session: Session, target, box: dict, batch: int, kernel: str, calls: list[dict],
                      seqs: list[int], plan_arch: int | None = None) -> tuple[list[dict], list[str]]:
    """Plan the rewrite's launches at the points (``kernel.splitk_plan``), then read each
    Triton-language launch's grid and diagnosis (``kernel.grid``). Returns the points with their plan,
    report and diagnosis, and problems (a failed call; a plan that differs from what the engine ran).
    ``plan_arch``: the declared GPU whose plan the split-K step ran on this box (its kernels are compiled
    for that architecture here too)."""
    points = plan_points(target, box, batch, calls, plan_arch)
    plan = session.call("kernel.splitk_plan", {"points": [{k: v for k, v in p.items() if k != "where"} for p in points]})
    seqs.append(plan["seq"])
    if not plan["ok"]:
        return [], [f"the rewrite's launch plan failed: {plan['error']}"]
    problems = []
    call = widest_call(calls)
    out = []
    for point, planned in zip(points, plan["data"]["points"]):
        launch = launch_for(kernel, planned)
        row = {"point": point, "plan": planned, "launch": launch, "kernel": launch["kernel"], "seq": None, "report": None, "diagnosis": None}
        if point["where"] == "box":
            # a fused call is one launch (config LARGE_WS for the joined row), as its plan is
            ran = [call.get("config")] + ([call["extra_config"]] if "extra_config" in call and not call.get("fused") else [])
            plan_names = [l["config_name"] for l in planned["launches"]][:len(ran)]
            if plan_names != ran:
                problems.append(f"the plan for the box ({' + '.join(plan_names)}) is not the config the engine ran ({' + '.join(map(str, ran))})")
        if not launch["triton_language"]:
            row["note"] = (f"{launch['kernel']} is Gluon code (@gluon.jit), not Triton-language code: the grid reader parses "
                           "@triton.jit kernels, so its grid and diagnosis are not read")
            out.append(row)
            continue
        declared = point["where"] == "declared"
        args = {"kernel": launch["kernel"], "source": KERNEL_SOURCES.get(launch["kernel"], REWRITE_SOURCE), "shapes": launch["shapes"], "dtypes": launch["dtypes"],
                "sms": point["sms"] if declared else (box["sm_count"] or target.deployment.sm_count),
                "arch": f"sm_{point['arch']}" if "arch" in point else (f"sm_{box['sm']}" if box["sm"] else f"sm_{target.deployment.sm}")}
        result = session.call("kernel.grid", args)
        seqs.append(result["seq"])
        row["seq"] = result["seq"]
        if not result["ok"]:
            problems.append(f"{point['label']}: the grid of {launch['kernel']} could not be read: {result['error']}")
        else:
            row["report"] = result["data"]
            heads = point["heads"]
            # the rewrite's programs are head blocks, not heads: padding is counted in head rows (the note), not programs
            summary = diagnosis_summary({"label": point["label"], "kernel_heads": heads, "heads_per_rank": heads,
                                         "batch": point["batch"]}, result["data"], None)
            if summary is not None:
                summary.pop("rewrite_estimate", None)
                if not (summary.get("ncu") or {}).get("measured"):
                    summary["ncu"] = {"measured": False, "bound": "not measured",
                                      "why": "round 2 runs no Nsight Compute (it profiles the first round's dominant kernel only)"}
            row["diagnosis"] = summary
        out.append(row)
    return out, problems


def padding_note(target, box: dict) -> str:
    """How many of the heads the rewrite computes are TP padding, at the box's shapes and the deployment's."""
    ran = profiled_shapes(target, box["device"])
    deployment = target.deployment
    declared = (deployment.kernel_heads(target.model.heads), deployment.heads_per_rank(target.model.heads))
    return ("TP padding: " + f"{ran['kernel_heads'] - ran['heads_per_rank']} of the {ran['kernel_heads']} heads a call computes on the box, "
            f"{declared[0] - declared[1]} of {declared[0]} in the deployment (their rows are computed and discarded)")


def grid_rows(rows: list[dict]) -> list[list]:
    table = []
    for r in rows:
        report, launch = r["report"] or {}, r["launch"]
        d = r["diagnosis"] or {}
        table.append([r["point"]["label"], launch["kernel"], launch.get("config_name", "-"), launch.get("splits"),
                      report.get("grid_expr") or "-", "x".join(str(x) for x in report.get("grid") or []) or "-",
                      report.get("programs"), d.get("gather_redundancy_factor"), d.get("redundancy_factor"),
                      d.get("inner_product") or r.get("note") or "-"])
    return table


def round2(state: InvestigationState, session: Session, target: Target) -> Draft:
    """The second round on the split-K configuration: summarize the split-K step's profiled run (its
    trace, the same steps and batch as the first profile), name the kernel that dominates now and its
    share, attribute its operation (``attribute_dominant``, from the eager twin where the run was
    graph-replayed); read the grid and diagnosis of the rewrite's kernel (the dominant one when it is
    the rewrite's, else the rewrite's largest, named as not dominant) at the engine's widest call and
    at the deployment's on the declared hardware, when it is Triton-language code; and the new
    ceiling: Amdahl over the new profile's window (``profile_times``) for the dominant kernel and its
    operation instant, on the split-K setting's measured tok/s, against the goal (goal / ceiling) and
    the step budget. Numbers use the ceiling step's names (``kernel_instant_x``,
    ``operation_instant_x``, ``ceiling_tok_s``, ``baseline_tok_s`` = the split-K setting's tok/s)."""
    survey, profile, splitk = (finding_for(state, s) for s in ("survey", "profile", "splitk"))
    box = data_of(survey).box.model_dump()
    batch = typed(profile).batch
    setting = splitk_label(profile, splitk)
    labels = interpretation_labels(state)
    summary, numbers = new_profile(session, splitk, target.profile.steps)
    host = summary.kind == "cpu-host"
    if host:
        labels.append("host-ranges")
    unit = "host range" if host else "kernel"
    trace_path = splitk.artifacts["trace"]
    base_data = {"setting": setting, "trace": trace_path, "kind": summary.kind}
    if summary.cuda_graph.hidden or not summary.merged.kernels:
        why = summary.cuda_graph.note if summary.cuda_graph.hidden else "it holds no kernel"
        return Draft(verdict="incomplete-trace", labels=labels + ["failed"],
                     headline=f"round 2: the split-K trace is incomplete: {why}",
                     evidence=splitk.evidence[:1], artifacts={"trace": trace_path}, data={**base_data, "complete": False})

    merged = summary.merged
    top = trace.dominant(summary, target.thresholds.dominant_share)
    dominant = top is not None
    top = top or merged.kernels[0]
    operation, times = _new_times(session, splitk, summary, top, numbers)
    ceiling = _ceiling(state, target, splitk, {**times, "kind": summary.kind}, operation, batch)
    short = kernel_label(top.name, names := data_of(splitk).kernel_names, 60)  # by meaning where the box's names give one
    what = f"{ceiling['op_name']} (the call around {short})" if ceiling["op_name"] else short
    numbers.update(_ceiling_numbers(target, splitk, times, ceiling, top, short, what, setting, unit))
    if times["gaps_ms"] is not None:
        numbers["profiler_gaps_ms"] = numbers.pop("between_steps_idle_ms")

    before = {k["name"] for k in data_of(profile).summary["merged"]["kernels"]}
    kernels = [k.to_dict() for k in merged.kernels]
    tables = _tables(merged, kernels, before, times, ceiling, operation, short, unit, host, trace_path, names)

    # The rewrite's grid and diagnosis.
    seqs = list(splitk.evidence[:1])
    subject, subject_why = grid_subject(top.name, kernels, before, names)
    grid_points, problems = [], []
    if subject is not None:
        calls = [r["call"] for r in data_of(splitk).calls or []]
        grid_points, problems = read_rewrite_grid(session, target, box, batch, subject, calls, seqs,
                                                  getattr(data_of(splitk).plan, "arch", None))
    focus = _grid_tables(target, box, subject, subject_why, grid_points, tables, numbers)
    beyond = evidence_beyond(merged, top, finding_for(state, "levers"))
    if ceiling["reachable"] is False:  # not reachable by what the bound makes instant, not by anything at all
        ceiling["reach"] = f"not reachable by an instant {ceiling['op_name'] or short} alone"
    headline = _headline(finding_for(state, "levers"), top, dominant, unit, ceiling, what, short, focus) + beyond["text"]
    return Draft(
        headline=headline, verdict={True: "goal-reachable", False: "goal-unreachable", None: "goal-undecided"}[ceiling["reachable"]],
        numbers=numbers, tables=tables,
        artifacts={"trace": trace_path}, evidence=sorted(set(seqs) | set(ceiling["tok_seqs"])),
        labels=labels + (["failed"] if problems else []),
        data={**base_data, "complete": True, "kernel": top.name, "category": top.category, "dominant": dominant,
              "dominant_kernel": top.to_dict(), "reachable": ceiling["reachable"], "reach": ceiling["reach"],
              "uncertainty": ceiling["uncertainty"], "model_error": ceiling["model_error"], "beyond": beyond,
              "bound": "operation" if ceiling["op_name"] else "kernel",
              "operation": ({"name": ceiling["op_name"], "frame": operation.get("frame"), "source": operation.get("source")}
                            if ceiling["op_name"] else None),
              "operation_status": operation["status"], "operation_detail": operation,
              "rewrite_kernels": [{"name": k["name"], "calls": k["calls"], "total_us": k["total_us"], "share": k["share"]}
                                  for k in kernels if k["name"] not in before],
              "grid": {"kernel": subject, "why": subject_why, "problems": problems,
                       "points": [{k: r[k] for k in ("point", "kernel", "launch", "seq", "diagnosis")} | {"note": r.get("note"),
                                   "grid": (r["report"] or {}).get("grid"), "programs": (r["report"] or {}).get("programs"),
                                   "grid_expr": (r["report"] or {}).get("grid_expr")} for r in grid_points]},
              "summary": {"kernel_time_us": merged.kernel_time_us, "idle_us": merged.idle_us, "window_us": merged.window_us,
                          "in_step_window_us": merged.in_step_window_us, "steps": merged.steps},
              **_names_shown(names, top, kernels, before)},
    )


def _names_shown(names: dict | None, top, kernels: list[dict], before: set[str]) -> dict[str, Any]:
    """The box's names of the kernels round 2 shows (the dominant, the top ones, the rewrite's): the mangled names
    kept in the finding with what the box demangled them to, while the report shows their meaning."""
    return kernel_names_of(names, [top.name] + [k["name"] for k in kernels[:SHOWN_KERNELS]]
                           + [k["name"] for k in kernels if k["name"] not in before])


def evidence_beyond(merged, top, levers: Finding | None) -> dict[str, Any]:
    """What else this run measured that bears on the goal beside the bound (which makes one kernel or its
    operation instant): the split-K profile's other kernel categories by their share of its kernel time, and
    the levers the sweep measured moving throughput up (against the baseline, before the rewrite). Only what
    was measured; ``text`` is the headline's clause."""
    total = merged.kernel_time_us or 0.0
    # every category's share, the dominant kernel's own included beside the kernel (its other kernels), in the
    # category table's order: an order by share would change with the run's noise where two shares are close
    shares = [(category, us / total) for category, us in (merged.categories or {}).items() if total and us > 0]
    movers = [{"lever": r.name, "ratio": r.ratio, "interval": r.interval}
              for r in (data_of(levers).levers if levers else []) if r.status == "moves up"]
    # the dominant kernel's part of its own category, not of all kernel time (top.share)
    parts = [f"{category} {100 * share:.0f}%" + (f" (the dominant kernel {100 * top.share / share:.0f}% of it)"
                                                   if category == top.category and share else "")
             for category, share in shares]
    text = f"; its kernel time by category: {', '.join(parts)}" if parts else ""
    if movers:
        text += "; levers measured to move the baseline up: " + ", ".join(
            f"{m['lever']} {ratio_text(m['ratio'], *(m['interval'] or (None, None)))}" for m in movers)
    return {"categories": [{"category": c, "share_of_kernel_time": x} for c, x in shares], "levers_up": movers,
            "text": text}


def _new_times(session: Session, splitk: Finding, summary, top, numbers: dict[str, Number]) -> tuple[dict, dict]:
    """The dominant kernel's operation in the split-K trace (attribute_dominant) and the times the
    ceiling rests on (``profile_times`` over the new profile); adds ``operation_ms`` (when attributed
    and no less than the kernel) and ``timed_step_ms`` to ``numbers``."""
    steps = numbers["steps"].value
    seq = splitk.evidence[:1]
    trace_path = splitk.artifacts["trace"]
    refs = {"trace": {"path": trace_path}}
    eager = eager_trace(splitk)
    if eager:
        refs["eager"] = {"path": eager}
    operation, _ = attribute_dominant(session, refs, {"eager_file": "eager" if eager else None}, refs["trace"], top, steps)
    if operation["status"] == trace.ops.ATTRIBUTED:
        numbers["operation_ms"] = Number(value=operation["total_us"] / 1000, unit="ms",
                                         label=f"t_op: {operation['name']}, the call around {kernel_label(top.name, data_of(splitk).kernel_names, NAME_WIDTH)}, with split-K", seqs=seq)
    runs = (data_of(splitk).runs_ms or {})
    timed = median(runs["splitk"]) if runs.get("splitk") else runs.get("profiled_splitk_ms")
    # from the rounds' sweep (the line the split-K tok/s cites), else the profiled split-K run's
    numbers["timed_step_ms"] = Number(value=timed, unit="ms", label="T: the split-K step of the layers run, timed without the profiler (median of the paired runs)",
                                      seqs=splitk.numbers["splitk_tok_s"].seqs if runs.get("splitk") else seq)
    interim = Draft(headline="", verdict="", numbers=numbers)
    row = KernelRow.model_validate(top.to_dict())
    times = times_of(interim, SimpleNamespace(dominant=row, leader=row, operation=Operation.model_validate(operation),
                                              critical=None, summary=summary.to_dict()))
    if times["operation_ms"] is None:
        numbers.pop("operation_ms", None)  # an attribution holding less than the kernel itself attributed nothing
    return operation, times


def _ceiling(state: InvestigationState, target: Target, splitk: Finding, times: dict[str, Any], operation: dict,
             batch: int) -> dict[str, Any]:
    """The new ceiling's figures: the instant bounds over the split-K profile, their spread, and
    whether the goal is reachable within the ceiling's uncertainty."""
    window, part, op_part = times["window_ms"], times["kernel_ms"], times["operation_ms"]
    tok_s = splitk.number("splitk_tok_s")
    goal = target.goal.output_tok_s
    kernel_x = amdahl(window, part)
    operation_x = amdahl(window, op_part) if op_part is not None else None
    bound_x = operation_x or kernel_x
    kernel_spread = bound_spread(times, part)
    op_spread = bound_spread(times, op_part) if op_part is not None else None
    spread = op_spread if op_part is not None else kernel_spread
    ceiling_tok_s = tok_s * bound_x
    # The ceiling is known to its bound's spread and to the measured tok/s it scales (the split-K
    # interval's half-width): the goal is reachable, or not, only when it lies outside both.
    # and to how far this run's own bounds and predictions have already been off (its consistency
    # check's failures): an Amdahl bound the run saw beaten by x% is not trusted to better than x%.
    # Only the operation-level claims speak for this operation-level bound.
    model_error = max((abs(c.measured_x / c.claim_x - 1) for c in
                       consistency.check(findings_of(state), target.model_dump(mode="json")).failures
                       if c.claim_x and "operation" in c.claim), default=0.0)
    # the bound as far as the profiler's stretch of the split-K step leaves it known (its modelling error)
    # a GPU trace's only: a CPU host trace's ranges each carry the profiler's overhead (see the ceiling step)
    known = stretch_range(times, op_part if op_part is not None else part) if times.get("kind") != "cpu-host" else None
    stretch_error = (max(abs(end / bound_x - 1) for end in known) if known else 0.0)
    uncertainty = (spread or 0.0) + (splitk.numbers["measured_x"].spread or 0.0) + model_error + stretch_error
    parts = ("the bound's spread, the measured tok/s's interval"
             + (f", where the profiler's stretch of the step lies ({100 * stretch_error:.2g}%)" if stretch_error else "")
             + (f" and this run's operation-level model error so far ({100 * model_error:.2g}%)" if model_error else ""))
    if ceiling_tok_s / (1 + uncertainty) >= goal:
        reachable, reach = True, "reachable"
    elif ceiling_tok_s * (1 + uncertainty) < goal:
        reachable, reach = False, "not reachable"
    else:
        reachable, reach = None, f"not decided: the goal lies within the ceiling's uncertainty ({100 * uncertainty:.2g}%: {parts})"
    return {"window": window, "op_part": op_part, "tok_s": tok_s, "goal": goal, "step_ms": 1000.0 * batch / tok_s, "budget_ms": target.goal.step_budget_ms, "goal_spec": target.goal,
            "batch": batch, "kernel_x": kernel_x, "operation_x": operation_x, "bound_x": bound_x,
            "kernel_spread": kernel_spread, "op_spread": op_spread, "spread": spread, "ceiling_tok_s": ceiling_tok_s,
            "model_error": model_error, "uncertainty": uncertainty, "reachable": reachable, "reach": reach,
            "known": known, "stretch_error": stretch_error,
            "op_name": operation.get("name") if op_part is not None else None,
            "tok_seqs": splitk.numbers["splitk_tok_s"].seqs}


def _ceiling_numbers(target: Target, splitk: Finding, times: dict[str, Any], ceiling: dict[str, Any], top, short: str,
                     what: str, setting: str, unit: str) -> dict[str, Number]:
    """The new ceiling's numbers, named as the ceiling step names its own."""
    window, part, op_part, steps = times["window_ms"], times["kernel_ms"], times["operation_ms"], times["steps"]
    seq, tok_seqs, spread = splitk.evidence[:1], ceiling["tok_seqs"], ceiling["spread"]
    both = sorted(set(seq) | set(tok_seqs))
    needed = speedup_needed(window, op_part if op_part is not None else part, ceiling["goal"] / ceiling["tok_s"])
    numbers = {
        "dominant_ms": Number(value=top.total_us / 1000, unit="ms", label=f"{short} with split-K", seqs=seq),
        "dominant_share": Number(value=top.share, unit="fraction", label=f"{short} share of {unit} time with split-K", seqs=seq),
        "dominant_step_ms": Number(value=top.total_us / 1000 / steps, unit="ms", label=f"{short} a step with split-K", seqs=seq),
        "window_ms": Number(value=window, unit="ms", label=f"W: window inside the {steps} profiled steps with split-K", seqs=seq),
        "kernel_ms": Number(value=part, unit="ms", label=f"t_k: {short} in the split-K profile", seqs=seq),
        "kernel_share": Number(value=part / window, unit="fraction", label="t_k / W", seqs=seq),
        "kernel_instant_x": Number(value=ceiling["kernel_x"], unit="x", label=f"{short} instant: 1 / (1 - t_k/W), over the split-K setting", seqs=seq, spread=ceiling["kernel_spread"]),
        "baseline_tok_s": Number(value=ceiling["tok_s"], unit="tok/s", label=f"measured, {setting} (projected to {target.model.layers} layers)", seqs=tok_seqs),
        "ceiling_tok_s": Number(value=ceiling["ceiling_tok_s"], unit="tok/s", label=f"projected: the split-K setting's tok/s x the {'operation' if ceiling['op_name'] else 'kernel'} instant", seqs=both, spread=spread),
        "goal_tok_s": Number(value=ceiling["goal"], unit="tok/s", label="goal", declared=True),
        "goal_distance_x": Number(value=ceiling["goal"] / ceiling["ceiling_tok_s"], unit="x", label="goal / the new ceiling (above 1: out of reach even with the dominant part instant)", seqs=both, spread=spread),
        "goal_gap_x": Number(value=ceiling["goal"] / ceiling["tok_s"], unit="x", label="goal / the split-K setting's tok/s: the speedup still needed", seqs=tok_seqs),
        "step_budget_ms": Number(value=ceiling["budget_ms"], unit="ms",
                                 label=f"the goal's decode step budget: {target.goal.concurrency} tokens a step / goal", declared=True),
        "measured_batch": Number(value=ceiling["batch"], label="the batch the step was measured (profiled) at", seqs=tok_seqs),
        "projected_step_ms": Number(value=ceiling["step_ms"], unit="ms", label=f"decode step, {setting}, projected (batch / tok/s)", seqs=tok_seqs),
        "instant_step_ms": Number(value=ceiling["step_ms"] / ceiling["bound_x"], unit="ms", label=f"projected decode step with {what} instant", seqs=both, spread=spread),
        "speedup_needed": Number(value=needed, unit="x", seqs=both,
                                 label=f"speedup of {what} that would meet the goal" if needed is not None else
                                 f"speedup of {what} that would meet the goal: none, even instant it would not"),
    }
    for end, value in zip(("low", "high"), ceiling["known"] or ()):
        if not math.isinf(value):  # the bound's range, as the ceiling step states its own
            numbers[f"{'operation' if op_part is not None else 'kernel'}_instant_{end}_x"] = Number(
                value=value, unit="x", seqs=seq,
                label=f"the bound, {end} end, as far as the profiler's stretch of the split-K step leaves it known")
    if op_part is not None:
        numbers["operation_share"] = Number(value=op_part / window, unit="fraction", label="t_op / W", seqs=seq)
        numbers["operation_instant_x"] = Number(value=ceiling["operation_x"], unit="x", label=f"{ceiling['op_name']} instant: 1 / (1 - t_op/W), over the split-K setting", seqs=seq, spread=ceiling["op_spread"])
    return numbers


def _tables(merged, kernels: list[dict], before: set[str], times: dict[str, Any], ceiling: dict[str, Any], operation: dict,
            short: str, unit: str, host: bool, trace_path: str, names: dict | None = None) -> list[Table]:
    """Round 2's profile tables (top kernels, the rewrite's kernels) and its ceiling tables."""
    window, part, op_part = times["window_ms"], times["kernel_ms"], times["operation_ms"]
    rewrite_rows = [[kernel_label(k["name"], names, NAME_WIDTH), k["calls"], k["total_us"] / 1000, k["share"]] for k in kernels
                    if k["name"] not in before]
    tables = [
        Table(title=f"Top {unit}s with split-K", columns=["name", "category", "calls", "total ms", "mean us", "share"],
              rows=[[kernel_label(k.name, names, NAME_WIDTH), k.category, k.calls, k.total_us / 1000, k.mean_us, k.share] for k in merged.kernels[:SHOWN_KERNELS]],
              note=("host ranges under the Triton CPU interpreter, not GPU kernels; " if host else "") + f"the split-K step's profiled run ({trace_path})"),
        Table(title="Kernels the rewrite brought", columns=["name", "calls", "total ms", "share"], rows=rewrite_rows,
              note="kernels of the split-K trace that the first profile did not have"),
        Table(title=f"Amdahl ceiling for {short}, with split-K", columns=["kernel speedup", "step speedup", "tok/s (projected)"],
              rows=quoted(ceiling_table(window, part, ceiling["tok_s"]), ceiling["kernel_spread"]),
              note="step speedup = 1 / (1 - t_k/W + t_k/(W s)) over the split-K profile; tok/s = the split-K setting's measured tok/s x step speedup"),
    ]
    if op_part is not None:
        tables.append(Table(title=f"Amdahl ceiling for its operation {ceiling['op_name']}, with split-K", columns=["operation speedup", "step speedup", "tok/s (projected)"],
                            rows=quoted(ceiling_table(window, op_part, ceiling["tok_s"]), ceiling["op_spread"]),
                            note=f"t_op = {short} plus the other kernels its call launches ({operation.get('source')}: {operation.get('rule')})"))
    return tables


def _grid_tables(target: Target, box: dict, subject: str | None, subject_why: str, grid_points: list[dict],
                 tables: list[Table], numbers: dict[str, Number]) -> dict | None:
    """The rewrite's grid and diagnosis tables, appended to ``tables``, and the numbers of the point
    the headline speaks of (the box's where its diagnosis holds, else the first that does), which it returns."""
    if grid_points:
        tables.append(Table(title=f"Grid of the rewrite's {subject}", columns=["shapes", "kernel", "config", "splits", "grid", "dims",
                                                                               "programs", "gather redundancy", "all loads redundancy", "inner products"],
                            rows=grid_rows(grid_points),
                            note=f"{subject_why}; launch plans from the wrapper's own choice ({REWRITE_SOURCE}), rows at their full top-k; "
                                 + padding_note(target, box)))
        for r in grid_points:
            d = r["diagnosis"]
            if d is not None:
                t = diagnosis_table(r["kernel"], d)
                t.note = "Assumptions: " + "; ".join(d.get("assumptions") or [])
                tables.append(t)
    focus = next((r for r in grid_points if (r["diagnosis"] or {}).get("ok") and r["point"]["where"] == "box"), None) or next(
        (r for r in grid_points if (r["diagnosis"] or {}).get("ok")), None)
    if focus is not None:
        d, fseq = focus["diagnosis"], [focus["seq"]]
        numbers.update({
            "rewrite_gather_redundancy": Number(value=d["gather_redundancy_factor"], unit="x", label=f"{focus['kernel']}: gathered bytes / unique, {focus['point']['label']}", seqs=fseq),
            "rewrite_redundancy": Number(value=d["redundancy_factor"], unit="x", label=f"{focus['kernel']}: bytes loaded / unique, {focus['point']['label']}", seqs=fseq),
            "rewrite_inner_product": Number(value=d["inner_product"], label=f"{focus['kernel']}: how its inner products are formed", seqs=fseq),
        })
    return focus


def _headline(levers: Finding | None, top, dominant: bool, unit: str, ceiling: dict[str, Any], what: str, short: str,
              focus: dict | None) -> str:
    spread, reachable, goal = ceiling["spread"], ceiling["reachable"], ceiling["goal"]
    op_name = ceiling["op_name"]
    lead = (f"with split-K, {short} {'dominates' if dominant else 'is the largest'}: {100 * top.share:.1f}% of {unit} time "
            f"({top.category})")
    headline = (lead + (f", its operation {op_name} {100 * ceiling['op_part'] / ceiling['window']:.1f}% of the window" if op_name else "")
                + f"; even an instant {what} gives {fmt_spread(ceiling['bound_x'], spread)}x{stretch_text(*(ceiling.get('known') or (None, None)))}: {fmt(ceiling['tok_s'], '.3g')} -> {fmt_spread(ceiling['ceiling_tok_s'], spread)} tok/s "
                + ({True: "(projected), reaching the goal", None: "(projected), at the goal within its uncertainty"}.get(
                    reachable, f"(projected), {fmt_spread(goal / ceiling['ceiling_tok_s'], spread)}x short of the goal"))
                + f" of {goal:.0f} tok/s ({step_against_goal(fmt_spread(ceiling['step_ms'] / ceiling['bound_x'], spread), ceiling['batch'], ceiling['goal_spec'])})")
    stand_in = next((n for n in (data_of(levers).engine_notes or []) if n.startswith("weights are bf16")), None) if levers else None
    if stand_in and top.category.startswith("gemm"):
        # what now dominates is the part of the engine that stands in least faithfully: said where it is read
        headline += f"; {top.category} kernels read the engine's weights, and {stand_in.split(':')[0]}, so on the deployment this part is smaller"
    if focus is not None:
        d = focus["diagnosis"]
        headline += (f"; the rewrite's {focus['kernel']} gathers {fmt(d['gather_redundancy_factor'], '.3g')}x the unique rows "
                     f"({d['inner_product']})")
    return headline
