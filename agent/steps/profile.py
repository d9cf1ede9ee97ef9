"""Profile: a trace of decode steps at the goal's concurrency, ranked kernel by kernel."""

from __future__ import annotations

import math
from typing import Any

from agent.config import Target
from agent.engine_runs import best_setting
from agent.engines import Profiled, RunFailed, engine_for
from agent.evidence import data_of, evidence
from agent.session import Session
from agent.state import InvestigationState, finding_for
from agent.steps import Draft, StepFailed
from agent.steps.attribution import NAME_WIDTH, SHOWN_KERNELS, attribute_dominant
from agent.steps.measurements import interpretation_labels
from agent.steps.rank_balance import critical_focus, rank_files, rank_part
from reports.format import fmt, kernel_label, kernel_names_of
from schema.finding import Number, Table
from tools import trace


def work_at(result_data: dict, batch: int) -> dict | None:
    """The engine's bytes/FLOPs model of the attention calls at ``batch`` (None if it reported none)."""
    return next((w for w in result_data.get("attention_work") or [] if w["batch"] == batch), None)


def in_step_idle_share(merged) -> float | None:
    """The idle share inside the profiled steps (their windows less the busy time in them): the
    workload's idle, without the profiler's own gaps between steps. None without step ranges."""
    if not merged.in_step_window_us or not merged.step_windows:
        return None
    busy = math.fsum(w.busy_us for w in merged.step_windows)
    return max(merged.in_step_window_us - busy, 0.0) / merged.in_step_window_us


def profile_decode(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Trace ``profile.steps`` decode steps of the deployment's setting (with the execution levers
    that moved throughput up, e.g. CUDA graphs), timing the same setting, then rank the kernels:
    table, categories, GPU idle inside the window, and the dominant kernel when one holds at least
    the target's dominant share. The engine's bytes/FLOPs per step of each attention kernel at the
    profiled batch ride along (``data.attention_work``) for the kernels' floors. A trace whose
    kernels are hidden (CUDA-graph launches without kernel events) is reported as incomplete and
    nothing is ranked from it.

    The dominant kernel's operation (the frame launching it: the attention wrapper with its merge and
    sink) is attributed from the trace's launches (tools.trace.ops; from the eager twin the engine
    writes beside a graph replay): ``data.operation`` and ``numbers.operation_ms``. The profiler's own
    gaps between steps are reported (``between_steps_idle_ms``) and kept out of ``in_step_window_ms``."""
    device = evidence(state, "survey").box.device
    run = _run_profiled(state, session, target, device)
    seq = run.seq
    try:
        files = rank_files(run.trace_info)
        summary = trace.summarize([session.artifact_path(run.refs[name]) for name in files], by_rank=len(files) > 1)
    except trace.TraceFormatError as exc:
        # a cut or corrupt trace ranks nothing: the finding says what is wrong with it, and nothing after
        # it reads a ranking from it
        return Draft(
            headline=f"trace unreadable: {exc}",
            verdict="incomplete-trace", evidence=seq, labels=interpretation_labels(state, target) + ["failed"],
            artifacts={"trace": run.ref["path"]}, numbers=run.numbers,
            data={"summary": None, "dominant": None, "complete": False, "kind": None,
                  "setting": run.setting_data, "error": str(exc)},
        )
    labels = interpretation_labels(state, target)
    if summary.kind == "cpu-host":
        labels.append("host-ranges")

    summary_data = summary.to_dict()
    # The run's own path for the trace, not this machine's: a replay elsewhere must see the same finding.
    summary_data["files"] = [{**f, "path": run.refs[name]["path"]} for f, name in zip(summary_data["files"], files)]
    if summary.cuda_graph.hidden:
        return Draft(
            headline=f"trace incomplete: {summary.cuda_graph.note}",
            verdict="incomplete-trace", evidence=seq, labels=labels + ["failed"],
            artifacts={"trace": run.ref["path"]},
            numbers=run.numbers,
            data={"summary": summary_data, "dominant": None, "complete": False, "setting": run.setting_data},
        )
    focus = critical_focus(summary, _timed_row(run), files)
    draft = _with_ranks(_ranked(session, target, run, summary, summary_data, labels, focus), run, summary)
    if run.server is not None:
        draft.data["server"] = run.server
        draft.headline += f" [{run.server.get('traced') or run.server['server']}]"
    return draft


def _timed_row(run: Profiled) -> dict[str, Any] | None:
    """The engine's timed result at the profiled batch (each rank's step and the critical rank, when several ran)."""
    return next((r for r in run.result["data"].get("results") or [] if r["batch"] == run.batch), None)


def _with_ranks(draft: Draft, run: Profiled, summary) -> Draft:
    """A profile of several rank processes gets each rank's table, the communication share, the critical
    rank and the imbalance (rank_balance); one rank's is returned as it is."""
    part = rank_part(summary, _timed_row(run), run.seq)
    if part is None:
        return draft
    numbers, tables, data = part
    draft.numbers.update(numbers)
    draft.tables.extend(tables)
    draft.data["parallel"] = data
    for rank, name in enumerate(rank_files(run.trace_info)[1:], start=1):
        draft.artifacts[f"trace_rank_{rank}"] = run.refs[name]["path"]
    critical = f"; rank {data['critical_rank']} critical" if data["critical_rank"] is not None else ""
    imbalance = f" (imbalance {100 * data['imbalance']:.1f}%)" if data["imbalance"] is not None else ""
    draft.headline += (f"; {len(data['ranks'])} ranks, communication {100 * data['communication_share']:.1f}% of the "
                       f"merged trace{critical}{imbalance}")
    return draft


def _run_profiled(state: InvestigationState, session: Session, target: Target, device: str) -> Profiled:
    """Profile the setting to explain through the target's engine (its ``profile``: a trace of
    ``profile.steps`` decode steps, one per rank); fails when the run fails or writes no trace."""
    # The deployment's setting is explained first; a backend lever measured above that setting's
    # ceiling (the ceiling step's ``beaten_by``) sends the investigation on from the best measured one.
    earlier = finding_for(state, "ceiling")
    applied = best_setting(target, data_of(finding_for(state, "levers"))) if earlier and data_of(earlier).beaten_by else []
    try:
        return engine_for(target).profile(session, target, device, applied, finding_for(state, "levers"))
    except RunFailed as exc:
        raise StepFailed(str(exc)) from None


def _ranked(session: Session, target: Target, run: Profiled, summary, summary_data: dict[str, Any],
            labels: list[str], focus: dict[str, Any] | None) -> Draft:
    """The profile of a readable, complete trace: the kernels ranked, the window's idle, the dominant
    kernel (when one holds the target's dominant share) with its operation attributed. With several
    ranks (``focus``, rank_balance.critical_focus) the dominant kernel, its operation, the window and
    every share are the critical rank's, from its own trace; the merged tables stay as the overview."""
    seq, batch, result = run.seq, run.batch, run.result
    # the box's kernel_names (None in a journal recorded before it: every name then shows as it did)
    names = result["data"].get("kernel_names")
    ref = run.refs[focus["file"]] if focus else run.ref
    host_ranges = summary.kind == "cpu-host"
    merged = focus["summary"] if focus else summary.merged
    steps = merged.steps or run.trace_info.get("steps") or target.profile.steps
    top = _rank_dominant(summary, merged, target.thresholds.dominant_share) if focus else trace.dominant(summary, target.thresholds.dominant_share)
    unit = "host range" if host_ranges else "kernel"
    headline = ((f"rank {focus['rank']} ({focus['why']}): " if focus else "")
                + _headline(target, merged, top, steps, batch, run.setting.label, host_ranges, names))
    numbers = {
        "kernel_ms": Number(value=merged.kernel_time_us / 1000, unit="ms", label=f"sum of {unit} durations", seqs=seq),
        "idle_ms": Number(value=merged.idle_us / 1000, unit="ms", label="GPU idle inside the profiled window", seqs=seq),
        "window_ms": Number(value=merged.window_us / 1000, unit="ms", label="first to last kernel", seqs=seq),
        "total_ms": Number(value=merged.kernel_time_us / 1000 + merged.idle_us / 1000, unit="ms",
                           label="T = kernel time + idle time", seqs=seq),
        "idle_share": Number(value=merged.idle_share, unit="fraction", label="idle share of the window", seqs=seq),
        "steps": Number(value=steps, unit="steps", label="decode steps profiled", seqs=seq),
        "batch": Number(value=batch, label="batch profiled", seqs=seq),
        **run.numbers,
        **_in_step_numbers(merged, "host" if host_ranges else "GPU", seq, engine_for(target).measured_by_client),
    }
    tables = []
    operation, eager = None, None
    if top:
        operation, eager = attribute_dominant(session, run.refs, run.trace_info, ref, top, steps)
        dominant_numbers, operation_table = _dominant_numbers(top, operation, merged, steps, unit, seq, names)
        numbers.update(dominant_numbers)
        if operation_table is not None:
            headline += (f"; its operation {operation['name']} (the call that launches it) is "
                         f"{fmt(operation['total_us'] / 1000, '.3g')} ms")
            tables.append(operation_table)
    overview = summary.merged
    categories = [[name, total / 1000, total / overview.kernel_time_us if overview.kernel_time_us else 0.0]
                  for name, total in sorted(overview.categories.items(), key=lambda item: -item[1])]
    merged_title = " (the ranks merged: the overview; the numbers above are rank " + focus["rank"] + "'s)" if focus else ""
    critical = {"critical": {"rank": focus["rank"], "why": focus["why"], "trace": ref["path"]}} if focus else {}
    return Draft(
        headline=headline,
        verdict="dominant-kernel" if top else "no-dominant-kernel",
        numbers=numbers,
        tables=[
            Table(title=f"Top {unit}s{merged_title}", columns=["name", "category", "calls", "total ms", "mean us", "share"],
                  rows=[[kernel_label(k.name, names, NAME_WIDTH), k.category, k.calls, k.total_us / 1000, k.mean_us, k.share]
                        for k in overview.kernels[:SHOWN_KERNELS]],
                  note="host ranges under the Triton CPU interpreter, not GPU kernels" if host_ranges else ""),
            Table(title="Categories" + merged_title, columns=["category", "total ms", "share"], rows=categories),
            *tables,
        ],
        artifacts={"trace": ref["path"], **({"eager_trace": eager["file"]} if eager else {})},
        evidence=seq,
        labels=labels,
        data={
            "summary": summary_data,
            "dominant": top.to_dict() if top else None,
            "leader": merged.kernels[0].to_dict() if merged.kernels else None,
            "complete": True,
            "batch": batch,
            "kernel_config": result["data"].get("kernel_config"),
            "shapes": result["data"].get("shapes"),
            "attention_work": work_at(result["data"], batch),
            "kind": summary.kind,
            "setting": run.setting_data,
            "operation": operation,
            "eager_summary": eager,
            **critical,
            **kernel_names_of(names, [k.name for k in overview.kernels[:SHOWN_KERNELS]] + [k.name for k in merged.kernels[:1]]
                              + [k["name"] for k in ((operation or {}).get("kernels") or [])[:SHOWN_KERNELS]]),
        },
    )


def _rank_dominant(summary, rank, min_share: float):
    """trace.dominant over one rank's table: its top kernel when it holds at least ``min_share`` of the rank's time."""
    if summary.cuda_graph.hidden or not rank.kernels or trace.NO_KERNELS_NOTE in summary.notes:
        return None
    top = rank.kernels[0]
    return top if top.share is not None and top.share >= min_share else None


def _headline(target: Target, merged, top, steps: int, batch: int, setting: str, host_ranges: bool,
              names: dict | None = None) -> str:
    if not top:
        leader = merged.kernels[0] if merged.kernels else None
        return (f"no dominant kernel: the largest, {kernel_label(leader.name, names, None) if leader else '-'}, is "
                f"{100 * (leader.share if leader else 0):.1f}% (< {100 * target.thresholds.dominant_share:.0f}%)")
    idle_in_steps = in_step_idle_share(merged)
    return (f"{kernel_label(top.name, names, None)} is {100 * top.share:.1f}% of {'host range' if host_ranges else 'kernel'} time "
            f"({fmt(top.total_us / 1000, '.3g')} of {fmt(merged.kernel_time_us / 1000, '.4g')} ms over {steps} decode "
            f"steps at batch {batch}, {setting}); "
            + (f"{'host' if host_ranges else 'GPU'} idle {100 * idle_in_steps:.1f}% inside the steps"
               if idle_in_steps is not None else f"GPU idle {100 * merged.idle_share:.1f}% of the window"))


def _in_step_numbers(merged, where: str, seq: list[int], server: bool = False) -> dict[str, Number]:
    """The window inside the profiled steps and the idle in it, the profiler's gaps between steps apart
    (none without step ranges). ``server``: a live server's, whose scheduler also idles the GPU between steps."""
    if merged.in_step_window_us is None:
        return {}
    numbers = {
        "in_step_window_ms": Number(value=merged.in_step_window_us / 1000, unit="ms",
                                    label=f"{where} window inside the {len(merged.step_windows)} profiled steps (between-step gaps left out)", seqs=seq),
        "between_steps_idle_ms": Number(value=merged.between_steps_idle_us / 1000, unit="ms",
                                        label=f"{where} idle between profiled steps ("
                                              + ("the scheduler forming the next batch, " if server else "")
                                              + "the profiler's sync and prof.step())", seqs=seq),
    }
    # Busy time lies inside the steps, so the idle inside them is their window less it: the share the
    # workload leaves idle, without the profiler's own gaps between steps.
    in_step_idle = merged.in_step_window_us * (in_step_idle_share(merged) or 0.0)
    numbers["in_step_idle_ms"] = Number(value=in_step_idle / 1000, unit="ms",
                                        label=f"{where} idle inside the profiled steps (their window less busy time)", seqs=seq)
    if merged.in_step_window_us > 0:
        numbers["in_step_idle_share"] = Number(value=in_step_idle / merged.in_step_window_us, unit="fraction",
                                               label="idle share of the in-step window", seqs=seq)
    if merged.step_windows:
        numbers["step_window_ms"] = Number(value=merged.in_step_window_us / 1000 / len(merged.step_windows), unit="ms",
                                           label=f"{where} window of one profiled step", seqs=seq)
    return numbers


def _dominant_numbers(top, operation: dict, merged, steps: int, unit: str, seq: list[int],
                      names: dict | None = None) -> tuple[dict[str, Number], Table | None]:
    """The dominant kernel's numbers, with its operation's where it is attributed, and the operation's table;
    kernels named by meaning where the box's ``names`` give one."""
    kernel = kernel_label(top.name, names, None)
    numbers = {"dominant_step_ms": Number(value=top.total_us / 1000 / steps, unit="ms", label=f"{kernel} a step", seqs=seq)}
    table = None
    if operation["status"] == trace.ops.ATTRIBUTED:
        name = operation["name"]
        via = " (other kernels from the eager profile)" if operation["source"] == "eager profile" else ""
        numbers["operation_ms"] = Number(value=operation["total_us"] / 1000, unit="ms",
                                         label=f"{name}: {kernel} and the rest of its operation{via}", seqs=seq)
        numbers["operation_share"] = Number(value=operation["total_us"] / merged.kernel_time_us, unit="fraction",
                                            label=f"{name} share of {unit} time", seqs=seq)
        numbers["operation_step_ms"] = Number(value=operation["total_us"] / 1000 / steps, unit="ms", label=f"{name} a step", seqs=seq)
        numbers["operation_other_ms"] = Number(value=operation["other_us"] / 1000, unit="ms",
                                               label=f"{name} less {kernel}: its merge, sink, fills{via}", seqs=seq)
        if operation["source"] == "eager profile":
            numbers["operation_eager_ms"] = Number(value=operation["attributed_total_us"] / 1000, unit="ms",
                                                   label=f"{name} in the eager profile of the same step", seqs=seq)
        frame = operation.get("frame")
        table = Table(
            title=f"Operation {name}" + (f" ({frame['function']}, {frame['file']}:{frame['line']})" if frame else ""),
            columns=["kernel", "calls", "total ms"],
            rows=[[kernel_label(k["name"], names, NAME_WIDTH), k["calls"], k["total_us"] / 1000] for k in operation["kernels"][:SHOWN_KERNELS]],
            note=f"attributed from the {operation['source']}: {operation['rule']}")
    numbers["dominant_ms"] = Number(value=top.total_us / 1000, unit="ms", label=f"{kernel} total", seqs=seq)
    numbers["dominant_share"] = Number(value=top.share, unit="fraction", label=f"{kernel} share of {unit} time", seqs=seq)
    numbers["dominant_calls"] = Number(value=top.calls, unit="calls", label=f"{kernel} launches", seqs=seq)
    numbers["dominant_mean_us"] = Number(value=top.mean_us, unit="us", label=f"{kernel} mean", seqs=seq)
    return numbers, table
