"""Profile: a trace of decode steps at the goal's concurrency, ranked kernel by kernel."""

from __future__ import annotations

from agent.engines import bench_args, execution_levers, measured_batch, shapes_for, with_levers
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps import StepFailed
from agent.steps.levers import interpretation_labels, throughput
from agent.steps.survey import target_of
from tools import trace

TOP_KERNELS = 12
NAME_WIDTH = 100


def short_name(name: str) -> str:
    """Kernel names in tables: demangled C++ templates run to thousands of characters."""
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 3] + "..."


def work_at(result_data: dict, batch: int) -> dict | None:
    """The engine's bytes/FLOPs model of the attention calls at ``batch`` (None if it reported none)."""
    return next((w for w in result_data.get("attention_work") or [] if w["batch"] == batch), None)


def profile_decode(state: InvestigationState, session: Session) -> Finding:
    """Trace ``profile.steps`` decode steps of the deployment's setting (with the execution levers
    that moved throughput up, e.g. CUDA graphs), timing the same setting, then rank the kernels:
    table, categories, GPU idle inside the window, and the dominant kernel when one holds at least
    the target's dominant share. The engine's bytes/FLOPs per step of each attention kernel at the
    profiled batch ride along (``data.attention_work``) for the kernels' floors. A trace whose
    kernels are hidden (CUDA-graph launches without kernel events) is reported as incomplete and
    nothing is ranked from it."""
    target = target_of(state)
    device = finding_for(state, "survey").data["box"]["device"]
    batch = target.profile.batch or measured_batch(target, device)
    applied = execution_levers(target, finding_for(state, "levers").data["levers"])
    setting = with_levers(target, applied)
    args = bench_args(target, device, setting, [batch], profile={"batch": batch, "steps": target.profile.steps})
    result = session.call("engine.bench", args)
    seq = [result["call_seq"]]
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
    summary = trace.summarize([session.artifact_path(ref)])
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
    if top:
        headline = (f"{top.name} is {100 * top.share:.1f}% of {unit} time ({top.total_us / 1000:.3g} of "
                    f"{kernel_ms:.4g} ms over {steps} decode steps at batch {batch}, {setting.label}); "
                    f"GPU idle {100 * merged.idle_share:.1f}% of the window")
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
    if top:
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
        ],
        artifacts={"trace": ref["path"]},
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
        },
    )
