"""A profiled trace's dominant kernel as the profile, split-K and round-2 steps read it: its operation
(the frame launching it: the attention wrapper with its merge and sink) attributed from the trace's
launches, from the eager twin the engine writes beside a graph replay; and kernel names as tables show them."""

from __future__ import annotations

from agent.session import Session
from reports.format import short
from tools import trace

SHOWN_KERNELS = 12  # rows of a kernel table
NAME_WIDTH = 100  # characters of a kernel name in a table


def short_name(name: str) -> str:
    """Kernel names in tables: demangled C++ templates run to thousands of characters."""
    return short(name, NAME_WIDTH)


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
