"""What binds a kernel, read agent-side from the run's own Nsight Compute raw-page capture (the CSV artifact
``kernel.ncu`` returned), metric by metric.

The box-side summary (tools/kernel_source/ncu.py) is journaled: a regenerate of an old run serves it as
recorded. Reading the artifact here lets a regenerate of that run show what the capture says, with each
figure named by the metric it came from. Nothing here knows a GPU's peak: every utilization is one of
ncu's own ``pct_of_peak`` metrics; a rate in bytes a second is the source model's bytes over the launch's
measured duration, never compared with a hard-coded bandwidth.

Stall groups follow the Nsight Compute Kernel Profiling Guide's stall reasons: ``short_scoreboard`` waits
on an MIO result (shared memory, warp shuffles, special-function/MUFU math), ``mio_throttle`` on the MIO
instruction queue; ``long_scoreboard``, ``lg_throttle`` on L1TEX (global/local memory); ``wait`` is a fixed
latency dependency; ``math_pipe_throttle`` a busy math pipe; ``barrier``/``membar`` synchronization.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.kernel_source.ncu import HIGH_PCT, read_launches

DURATION = "gpu__time_duration.sum"
CYCLES_PER_ISSUE = "smsp__average_warp_latency_per_inst_issued.ratio"
L1_SOL = "l1tex__throughput.avg.pct_of_peak_sustained_active"
# the sub-units whose maximum is L1/TEX's speed-of-light figure: which one is busy says what the L1 does
L1_PARTS = {
    "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed": "its LSU data pipe's wavefronts",
    "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed": "its data-bank reads",
    "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed": "its data-bank writes",
    "l1tex__lsuin_requests.avg.pct_of_peak_sustained_elapsed": "its LSU requests",
    "l1tex__m_xbar2l1tex_read_sectors.avg.pct_of_peak_sustained_elapsed": "its fills from L2",
}
BANK_READS = "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed"
OTHER_BYTES = {"DRAM": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
               "L2": "lts__throughput.avg.pct_of_peak_sustained_elapsed"}
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALL_GROUPS = {  # group -> (its reasons, what it waits on)
    "MIO": (("short_scoreboard", "mio_throttle"), "shared memory, warp shuffles and special-function (MUFU) results"),
    "L1TEX": (("long_scoreboard", "lg_throttle", "tex_throttle"), "global/local memory through L1TEX"),
    "fixed latency": (("wait",), "fixed-latency dependencies between instructions"),
    "math pipe": (("math_pipe_throttle", "mma", "gmma"), "a busy math pipe"),
    "synchronization": (("barrier", "membar"), "barriers and memory fences"),
}
OCCUPANCY_LIMITS = {"registers": "launch__occupancy_limit_registers", "shared memory": "launch__occupancy_limit_shared_mem",
                    "warps": "launch__occupancy_limit_warps", "blocks": "launch__occupancy_limit_blocks",
                    "barriers": "launch__occupancy_limit_barriers"}
REGISTERS = "launch__registers_per_thread"
THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
MINOR_SHARE = 0.05  # stall groups below this share of the cycles between issues are left out of the text
_TIME_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


def _value(metrics: dict, name: str) -> float | None:
    entry = metrics.get(name)
    try:
        return float(entry["value"].replace(",", "")) if entry else None
    except ValueError:
        return None


def _duration_ms(metrics: dict) -> float | None:
    value, entry = _value(metrics, DURATION), metrics.get(DURATION) or {}
    scale = _TIME_MS.get((entry.get("unit") or "").strip())
    return value * scale if value is not None and scale is not None else None


def stall_groups(metrics: dict) -> tuple[float | None, list[dict[str, Any]]]:
    """Cycles between two issued instructions, and each stall group's cycles of them, largest first."""
    cycles = _value(metrics, CYCLES_PER_ISSUE)
    groups = []
    for group, (reasons, waits_on) in STALL_GROUPS.items():
        parts = [(r, _value(metrics, STALL.format(r))) for r in reasons]
        parts = [(r, v) for r, v in parts if v]
        if parts:
            total = sum(v for _, v in parts)
            groups.append({"group": group, "waits_on": waits_on, "cycles": total, "share": total / cycles if cycles else None,
                           "reasons": [{"reason": r, "cycles": v, "metric": STALL.format(r)} for r, v in parts]})
    return cycles, sorted(groups, key=lambda g: -g["cycles"])


def occupancy_limiter(metrics: dict) -> dict[str, Any] | None:
    """The launch resource that allows the fewest blocks a SM (launch__occupancy_limit_*)."""
    limits = {what: _value(metrics, name) for what, name in OCCUPANCY_LIMITS.items()}
    limits = {k: v for k, v in limits.items() if v is not None}
    if not limits:
        return None
    what = min(limits, key=lambda k: limits[k])
    return {"limiter": what, "blocks": limits[what], "metric": OCCUPANCY_LIMITS[what], "limits": limits,
            "registers_per_thread": _value(metrics, REGISTERS), "theoretical_pct": _value(metrics, THEORETICAL)}


def read_counters(path: Path, source: str, kernel: str | None = None) -> dict[str, Any]:
    """The figures of ``kernel``'s launch (the export's only one when not named) that say what binds, each with
    its metric name; ``{"error"}`` when the capture cannot be read or lacks the launch."""
    try:
        launches = read_launches(Path(path))
    except (OSError, ValueError) as exc:
        return {"source": source, "error": f"{type(exc).__name__}: {exc}"}
    chosen = [l for l in launches if not kernel or kernel in (l["kernel"] or "")]
    if not chosen:
        return {"source": source, "error": f"no launch of {kernel} in the capture"}
    metrics = chosen[0]["metrics"]
    cycles, groups = stall_groups(metrics)
    parts = {name: _value(metrics, name) for name in L1_PARTS}
    return {"source": source, "kernel": chosen[0]["kernel"], "duration_ms": _duration_ms(metrics), "duration_metric": DURATION,
            "l1_pct": _value(metrics, L1_SOL), "l1_metric": L1_SOL, "l1_parts": {k: v for k, v in parts.items() if v is not None},
            "bytes_pct": {unit: _value(metrics, name) for unit, name in OTHER_BYTES.items()},
            "cycles_per_issue": cycles, "cycles_metric": CYCLES_PER_ISSUE, "stall_groups": groups,
            "occupancy": occupancy_limiter(metrics)}


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:.3g}%"


def binding(counters: dict[str, Any], loaded_bytes: int | None = None) -> dict[str, Any]:
    """What the counters say binds: the busiest L1 sub-unit (and whether it moves bytes), the largest stall
    group, the occupancy limiter; ``bytes_bind`` False where no unit that moves data (L1 data banks, L2,
    DRAM) is at ``HIGH_PCT`` of its peak, so the kernel's time does not follow the bytes it loads."""
    parts = counters.get("l1_parts") or {}
    busiest = max(parts, key=lambda k: parts[k]) if parts else None
    bank = parts.get(BANK_READS)
    data_pcts = [v for v in [bank, *(counters.get("bytes_pct") or {}).values()] if v is not None]
    bytes_bind = None if bank is None else any(v >= HIGH_PCT for v in data_pcts)
    said = []
    if busiest is not None:
        name = busiest.split(".")[0]
        l1 = (f"L1/TEX's {_pct(counters.get('l1_pct'))} ({counters['l1_metric'].split('.')[0]}) is {L1_PARTS[busiest]}, "
              f"{_pct(parts[busiest])} ({name})")
        if busiest != BANK_READS and bank is not None:
            l1 += f", while its data banks read {_pct(bank)} of peak ({BANK_READS.split('.')[0]}): wavefronts, not data-bank bytes (the capture does not split shared-memory from global traffic)"
        said.append(l1)
    groups, cycles = counters.get("stall_groups") or [], counters.get("cycles_per_issue")
    top = groups[0] if groups else None
    if top is not None:
        reasons = " + ".join(f"{r['reason']} {r['cycles']:.3g}" for r in top["reasons"])
        said.append(f"warps wait most on {top['group']} ({top['waits_on']}): {reasons} of {cycles:.3g} cycles between issues "
                    f"({top['share']:.0%}, smsp__average_warps_issue_stalled_*_per_issue_active, {counters['cycles_metric'].split('.')[0]})"
                    + "".join(f"; {g['group']} {g['cycles']:.3g} ({g['share']:.0%}: "
                              + " + ".join(f"{r['reason']} {r['cycles']:.3g}" for r in g["reasons"]) + ")"
                              for g in groups[1:] if (g.get("share") or 0) >= MINOR_SHARE))
    occupancy = counters.get("occupancy")
    if occupancy is not None:
        regs = occupancy.get("registers_per_thread")
        said.append(f"occupancy limited by {occupancy['limiter']}" + (f" ({regs:.0f} a thread)" if occupancy["limiter"] == "registers" and regs else "")
                    + f": {occupancy['blocks']:.0f} blocks a SM ({occupancy['metric']}), theoretical occupancy "
                    f"{_pct(occupancy.get('theoretical_pct'))} ({THEORETICAL})")
    rate = None
    if loaded_bytes and counters.get("duration_ms"):
        rate = loaded_bytes / (counters["duration_ms"] * 1e-3)
    short = "; ".join(x for x in (
        busiest is not None and f"L1/TEX busy with {L1_PARTS[busiest]} ({_pct(parts[busiest])})"
        + (f", its data banks reading {_pct(bank)}" if busiest != BANK_READS and bank is not None else ""),
        top is not None and f"{top['group']} stalls {top['share']:.0%} of the cycles between issues",
        occupancy is not None and f"occupancy limited by {occupancy['limiter']} ({occupancy['blocks']:.0f} blocks a SM)") if x)
    return {"bytes_bind": bytes_bind, "short": short, "busiest_l1": L1_PARTS.get(busiest), "busiest_l1_metric": busiest,
            "top_stall_group": top["group"] if top else None, "top_stall_share": top["share"] if top else None,
            "limiter": (occupancy or {}).get("limiter"), "loaded_bytes_per_s": rate, "text": "; ".join(said),
            "source": counters.get("source")}
