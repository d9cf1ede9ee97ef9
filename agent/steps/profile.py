"""Profile: a trace of decode steps at the goal's concurrency, ranked kernel by kernel."""

from __future__ import annotations

import math

from agent.engines import bench_args, best_setting, measured_batch, shapes_for, with_levers
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps import StepFailed
from agent.steps.levers import interpretation_labels, throughput
from agent.steps.survey import target_of
from agent.evidence import evidence
from reports.format import fmt, short
from tools import trace

TOP_KERNELS = 12
NAME_WIDTH = 100


def short_name(name: str) -> str:
    """Kernel names in tables: demangled C++ templates run to thousands of characters."""
    return short(name, NAME_WIDTH)


def work_at(result_data: dict, batch: int) -> dict | None:
    """The engine's bytes/FLOPs model of the attention calls at ``batch`` (None if it reported none)."""
    return next((w for w in result_data.get("attention_work") or [] if w["batch"] == batch), None)


def attribute_dominant(session: Session, refs: dict, trace_info: dict, ref: dict, top, steps: int) -> tuple[dict, dict | None]:
    """The dominant kernel's operation: from the setting's own trace when it has per-kernel launches,
    else from the eager profile of the same step the engine wrote beside a graph replay. Returns
    (data["operation"], the eager trace's compact summary or None)."""
    found = trace.attribute([session.artifact_path(ref)], top.name)
    op = found.dominant.to_dict()
    source, used, eager = "same trace", ref, None
    eager_name = trace_info.get("eager_file")
    if op["status"] == trace.ops.NEEDS_EAGER and eager_name in refs:
        used = refs[eager_name]
        eager_path = session.artifact_path(used)
        eager_summary = trace.summarize([eager_path]).merged
        eager_row = next((k for k in eager_summary.kernels if k.name == top.name), None)
        eager = {
            "file": used["path"], "note": "eager profile of the same step, written for attribution (the setting's trace is a graph replay)",
            "kernel_time_us": eager_summary.kernel_time_us, "steps": eager_summary.steps,
            "in_step_window_us": eager_summary.in_step_window_us, "between_steps_idle_us": eager_summary.between_steps_idle_us,
            "dominant": eager_row.to_dict() if eager_row else None,
        }
        op = trace.attribute([eager_path], top.name).dominant.to_dict()
        source = "eager profile"
        op["attributed_steps"] = eager_summary.steps or steps
    else:
        op["attributed_steps"] = steps
    op.update(source=source, trace=used["path"], attributed_total_us=op["total_us"])
    if op["status"] == trace.ops.ATTRIBUTED:
        # The operation's time in the setting's own trace: the dominant kernel as the setting ran it (all
        # of it), plus the operation's other kernels per step as attributed (a graph replays the same kernels).
        inside = next((k["total_us"] for k in op["kernels"] if k["name"] == top.name), 0.0)
        op["other_us"] = (op["attributed_total_us"] - inside) / op["attributed_steps"] * steps
        op["total_us"] = top.total_us + op["other_us"]
    return op, eager


def in_step_idle_share(merged) -> float | None:
    """The idle share inside the profiled steps (their windows less the busy time in them): the
    workload's idle, without the profiler's own gaps between steps. None without step ranges."""
    if not merged.in_step_window_us or not merged.step_windows:
        return None
    busy = math.fsum(w.busy_us for w in merged.step_windows)
    return max(merged.in_step_window_us - busy, 0.0) / merged.in_step_window_us


def profile_decode(state: InvestigationState, session: Session) -> Finding:
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
    target = target_of(state)
    device = evidence(state, "survey").box.device
    batch = target.profile.batch or measured_batch(target, device)
    # The deployment's setting is explained first; a backend lever measured above that setting's
    # ceiling (the ceiling step's ``beaten_by``) sends the investigation on from the best measured one.
    earlier = finding_for(state, "ceiling")
    applied = best_setting(target, finding_for(state, "levers").data) if earlier and earlier.data.get("beaten_by") else []
    setting = with_levers(target, applied, device)
    args = bench_args(target, device, setting, [batch], profile={"batch": batch, "steps": target.profile.steps})
    result = session.call("engine.bench", args)
    seq = [result["seq"]]
    if not result["ok"]:
        raise StepFailed(f"the profiling run failed: {result['error']}")
    trace_info = result["data"].get("trace")
    refs = {ref["name"]: ref for ref in result["artifacts"]}
    if not trace_info or trace_info["file"] not in refs:
        raise StepFailed("the profiling run wrote no trace")
    ref = refs[trace_info["file"]]
    measured = throughput(result, batch)
    layers_run = min(shapes_for(target, device).layers, target.model.layers)
    setting_numbers = {
        "setting_tok_s": Number(value=measured["tok_s"], unit="tok/s",
                                label=f"{setting.label}, projected to {target.model.layers} layers from {layers_run}", seqs=seq),
        "setting_step_ms": Number(value=measured["layer_ms"] * target.model.layers, unit="ms",
                                  label=f"decode step of {setting.label}, projected", seqs=seq),
        "timed_step_ms": Number(value=measured["layer_ms"] * layers_run, unit="ms",
                                label=f"decode step of the {layers_run} layers run, timed without the profiler", seqs=seq),
    }
    setting_data = {"label": setting.label, "env": setting.env, "options": setting.options,
                    "levers": [lever.name for lever in applied]}
    try:
        summary = trace.summarize([session.artifact_path(ref)])
    except trace.TraceFormatError as exc:
        # a cut or corrupt trace ranks nothing: the finding says what is wrong with it, and nothing after
        # it reads a ranking from it
        return Finding(
            index=next_index(state), step="profile", headline=f"trace unreadable: {exc}",
            verdict="incomplete-trace", evidence=seq, labels=interpretation_labels(state) + ["failed"],
            artifacts={"trace": ref["path"]}, numbers=setting_numbers,
            data={"summary": None, "dominant": None, "complete": False, "kind": None,
                  "setting": setting_data, "error": str(exc)},
        )
    merged = summary.merged
    labels = interpretation_labels(state)
    host_ranges = summary.kind == "cpu-host"
    if host_ranges:
        labels.append("host-ranges")

    summary_data = summary.to_dict()
    # The run's own path for the trace, not this machine's: a replay elsewhere must see the same finding.
    summary_data["files"] = [{**f, "path": ref["path"]} for f in summary_data["files"]]
    if summary.cuda_graph.hidden:
        return Finding(
            index=next_index(state), step="profile",
            headline=f"trace incomplete: {summary.cuda_graph.note}",
            verdict="incomplete-trace", evidence=seq, labels=labels + ["failed"],
            artifacts={"trace": ref["path"]},
            numbers=setting_numbers,
            data={"summary": summary_data, "dominant": None, "complete": False, "setting": setting_data},
        )

    steps = merged.steps or trace_info.get("steps") or target.profile.steps
    top = trace.dominant(summary, target.thresholds.dominant_share)
    kernel_ms = merged.kernel_time_us / 1000
    idle_ms = merged.idle_us / 1000
    rows = [[short_name(k.name), k.category, k.calls, k.total_us / 1000, k.mean_us, k.share] for k in merged.kernels[:TOP_KERNELS]]
    categories = [[name, total / 1000, total / merged.kernel_time_us if merged.kernel_time_us else 0.0]
                  for name, total in sorted(merged.categories.items(), key=lambda item: -item[1])]
    unit = "host range" if host_ranges else "kernel"
    idle_in_steps = in_step_idle_share(merged)
    if top:
        headline = (f"{top.name} is {100 * top.share:.1f}% of {unit} time ({fmt(top.total_us / 1000, '.3g')} of "
                    f"{fmt(kernel_ms, '.4g')} ms over {steps} decode steps at batch {batch}, {setting.label}); "
                    + (f"{'host' if host_ranges else 'GPU'} idle {100 * idle_in_steps:.1f}% inside the steps"
                       if idle_in_steps is not None else f"GPU idle {100 * merged.idle_share:.1f}% of the window"))
    else:
        leader = merged.kernels[0] if merged.kernels else None
        headline = (f"no dominant kernel: the largest, {leader.name if leader else '-'}, is "
                    f"{100 * (leader.share if leader else 0):.1f}% (< {100 * target.thresholds.dominant_share:.0f}%)")
    numbers = {
        "kernel_ms": Number(value=kernel_ms, unit="ms", label=f"sum of {unit} durations", seqs=seq),
        "idle_ms": Number(value=idle_ms, unit="ms", label="GPU idle inside the profiled window", seqs=seq),
        "window_ms": Number(value=merged.window_us / 1000, unit="ms", label="first to last kernel", seqs=seq),
        "total_ms": Number(value=kernel_ms + idle_ms, unit="ms", label="T = kernel time + idle time", seqs=seq),
        "idle_share": Number(value=merged.idle_share, unit="fraction", label="idle share of the window", seqs=seq),
        "steps": Number(value=steps, unit="steps", label="decode steps profiled", seqs=seq),
        "batch": Number(value=batch, label="batch profiled"),
        **setting_numbers,
    }
    tables = []
    operation, eager = None, None
    where = "host" if host_ranges else "GPU"
    if merged.in_step_window_us is not None:
        numbers["in_step_window_ms"] = Number(value=merged.in_step_window_us / 1000, unit="ms",
                                              label=f"{where} window inside the {len(merged.step_windows)} profiled steps (between-step gaps left out)", seqs=seq)
        numbers["between_steps_idle_ms"] = Number(value=merged.between_steps_idle_us / 1000, unit="ms",
                                                  label=f"{where} idle between profiled steps (the profiler's sync and prof.step())", seqs=seq)
        # Busy time lies inside the steps, so the idle inside them is their window less it: the share the
        # workload leaves idle, without the profiler's own gaps between steps.
        in_step_idle = merged.in_step_window_us * (idle_in_steps or 0.0)
        numbers["in_step_idle_ms"] = Number(value=in_step_idle / 1000, unit="ms",
                                            label=f"{where} idle inside the profiled steps (their window less busy time)", seqs=seq)
        if merged.in_step_window_us > 0:
            numbers["in_step_idle_share"] = Number(value=in_step_idle / merged.in_step_window_us, unit="fraction",
                                                   label="idle share of the in-step window", seqs=seq)
        if merged.step_windows:
            numbers["step_window_ms"] = Number(value=merged.in_step_window_us / 1000 / len(merged.step_windows), unit="ms",
                                               label=f"{where} window of one profiled step", seqs=seq)
    if top:
        numbers["dominant_step_ms"] = Number(value=top.total_us / 1000 / steps, unit="ms", label=f"{top.name} a step", seqs=seq)
        operation, eager = attribute_dominant(session, refs, trace_info, ref, top, steps)
        if operation["status"] == trace.ops.ATTRIBUTED:
            name = operation["name"]
            via = " (other kernels from the eager profile)" if operation["source"] == "eager profile" else ""
            numbers["operation_ms"] = Number(value=operation["total_us"] / 1000, unit="ms",
                                             label=f"{name}: {top.name} and the rest of its operation{via}", seqs=seq)
            numbers["operation_share"] = Number(value=operation["total_us"] / merged.kernel_time_us, unit="fraction",
                                                label=f"{name} share of {unit} time", seqs=seq)
            numbers["operation_step_ms"] = Number(value=operation["total_us"] / 1000 / steps, unit="ms", label=f"{name} a step", seqs=seq)
            numbers["operation_other_ms"] = Number(value=operation["other_us"] / 1000, unit="ms",
                                                   label=f"{name} less {top.name}: its merge, sink, fills{via}", seqs=seq)
            if operation["source"] == "eager profile":
                numbers["operation_eager_ms"] = Number(value=operation["attributed_total_us"] / 1000, unit="ms",
                                                       label=f"{name} in the eager profile of the same step", seqs=seq)
            headline += f"; its operation {name} (the call that launches it) is {fmt(operation['total_us'] / 1000, '.3g')} ms"
            frame = operation.get("frame")
            rows_op = [[short_name(k["name"]), k["calls"], k["total_us"] / 1000] for k in operation["kernels"][:TOP_KERNELS]]
            tables.append(Table(
                title=f"Operation {name}" + (f" ({frame['function']}, {frame['file']}:{frame['line']})" if frame else ""),
                columns=["kernel", "calls", "total ms"], rows=rows_op,
                note=f"attributed from the {operation['source']}: {operation['rule']}"))
        numbers["dominant_ms"] = Number(value=top.total_us / 1000, unit="ms", label=f"{top.name} total", seqs=seq)
        numbers["dominant_share"] = Number(value=top.share, unit="fraction", label=f"{top.name} share of {unit} time", seqs=seq)
        numbers["dominant_calls"] = Number(value=top.calls, unit="calls", label=f"{top.name} launches", seqs=seq)
        numbers["dominant_mean_us"] = Number(value=top.mean_us, unit="us", label=f"{top.name} mean", seqs=seq)
    return Finding(
        index=next_index(state),
        step="profile",
        headline=headline,
        verdict="dominant-kernel" if top else "no-dominant-kernel",
        numbers=numbers,
        tables=[
            Table(title=f"Top {unit}s", columns=["name", "category", "calls", "total ms", "mean us", "share"], rows=rows,
                  note="host ranges under the Triton CPU interpreter, not GPU kernels" if host_ranges else ""),
            Table(title="Categories", columns=["category", "total ms", "share"], rows=categories),
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
            "setting": setting_data,
            "operation": operation,
            "eager_summary": eager,
        },
    )
