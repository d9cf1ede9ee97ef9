"""What the run itself can say about why a measurement beat one of its bounds or missed one of its
predictions (``causes_of``), for agent.consistency's checks: kept apart from the holding of bounds and
predictions, which does not depend on it."""

from __future__ import annotations

import math

from agent.evidence import data_of
from reports.format import fmt
from schema.finding import Finding, value_of


def causes_of(by: dict[str, Finding]) -> dict[str, str]:
    """What the run itself can say about why a measurement beat a bound or missed a prediction, by
    measurement name ("*" for any): the bound's own reach (a kernel-only bound, T with the profiler's
    gaps in it), and for the rewrite what its profiles show changed outside the operation (the old
    wrapper's other kernels gone, fewer launches and their gaps, the profiler stretching the two
    settings differently)."""
    profile, ceiling, splitk = by.get("profile"), by.get("ceiling"), by.get("splitk")
    general, reasons = [], []
    if ceiling is not None and "operation_instant_x" not in ceiling.numbers:
        general.append(f"the bound counts {data_of(ceiling).kernel} alone, while a backend replaces "
                       "the whole attention call (its wrapper's own kernels sit in the bound's rest)")
    elif ceiling is not None:
        general.append("the operation's bound leaves the rest of the step as profiled, but a backend that replaces the "
                       "call can also change what lies between kernels (launch gaps, synchronizations)")
    profiled, timed = value_of(ceiling, "profiled_step_ms"), value_of(ceiling, "timed_step_ms")
    if profiled and timed and profiled > timed and "kernel_instant_x" not in (ceiling.numbers if ceiling else {}):
        general.append(f"T is the profiled window, {profiled:.3g} ms a step against {timed:.3g} ms timed without the "
                       f"profiler: {profiled - timed:.2g} ms a step are the profiler's own gaps")
    vanished = (data_of(splitk).vanished_kernels if splitk is not None else None) or []
    kernel = data_of(ceiling).kernel if ceiling is not None else None
    vanished = [k for k in vanished if k["name"] != kernel]
    # an operation-level prediction already holds the operation's own kernels: only those outside it explain its miss
    operation = data_of(profile).operation if profile is not None else None
    in_op = {k["name"] for k in (operation.kernels or [])} if operation is not None else set()
    outside = [k for k in vanished if k["name"] not in in_op]
    op_reasons = []
    if vanished and profile is not None:
        steps = value_of(profile, "steps") or 1
        total = math.fsum(k["total_us"] for k in vanished) / 1000 / steps
        reasons.append(f"{len(vanished)} other kernels of the profiled setting are gone with the rewrite "
                       f"({fmt(total, '.3g')} ms a step), outside the kernel a kernel-only bound made instant")
        if outside:
            total = math.fsum(k["total_us"] for k in outside) / 1000 / steps
            op_reasons.append(f"{len(outside)} kernels outside the operation are gone with the rewrite "
                              f"({fmt(total, '.3g')} ms a step)")
        if in_op:
            op_reasons.append(f"(the {len(vanished) - len(outside)} other kernels gone with it ran inside the "
                              "operation, already in its measured speedup)")
    stretch = data_of(splitk).profiler_stretch if splitk is not None else None
    if stretch and abs(stretch["after"] / stretch["before"] - 1) > 0.05:
        reasons.append(f"the profiler stretched the two settings' steps differently ({stretch['before']:.2f}x for the "
                       f"profiled setting, {fmt(stretch['before_window_ms'], '.4g')} ms against "
                       f"{fmt(stretch['before_timed_ms'], '.4g')} ms timed; {stretch['after']:.2f}x with split-K, "
                       f"{fmt(stretch['after_window_ms'], '.4g')} against {fmt(stretch['after_timed_ms'], '.4g')} ms), so "
                       "speedups read from the two profiles are not the speedups the timed runs see")
    launches = data_of(splitk).launches_per_step if splitk is not None else None
    if launches:
        reasons.append(f"kernel launches a step {launches['before']:g} -> {launches['after']:g} (each launch's gap "
                       "inside the step goes with it)")
        op_reasons.insert(len(op_reasons) - bool(in_op and vanished), reasons[-1])
    out = {"*": "; ".join(general), "split-K rewrite": "; ".join(general + reasons)}
    if in_op:
        out["split-K rewrite/operation"] = "; ".join(general + [r for r in reasons if "other kernels" not in r and
                                                                  "kernel launches" not in r] + op_reasons)
    return out
