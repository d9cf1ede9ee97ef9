"""Nsight Compute ``--csv`` exports: throughputs, occupancy, warp stalls, and what bounds the kernel.

Reads both page layouts ncu writes: ``--page details`` (one row per metric: ID, Kernel Name, Section
Name, Metric Name, Metric Unit, Metric Value, with rule rows whose Metric Name is empty) and ``--page
raw`` (one row per launch, one column per metric, a second row of units). Lines ncu prints around the
CSV (``==PROF==``, ``==WARNING==``) are skipped.

The verdict (``bound``), from the SpeedOfLight section, with the thresholds of Nsight Compute's own
SOLBottleneck rule: a unit at or above ``HIGH_PCT`` (60%) of its peak is the bottleneck candidate;
below it on every unit the kernel is latency-bound.

* ``memory-bound``: DRAM throughput >= HIGH_PCT (and not below the SM's);
* ``compute-bound``: SM (or a pipe: FMA, tensor) throughput >= HIGH_PCT and above DRAM's;
* ``L1/TEX-bound`` (``L2-bound``): DRAM and SM below HIGH_PCT, L1/TEX (L2) the busiest unit and at or
  above HIGH_PCT: memory-bound in Nsight's sense, on the cache the data come from (DRAM <
  ``DRAM_LOW_PCT`` is stated when it holds);
* ``L1/latency-bound``: every unit below HIGH_PCT, L1/TEX the busiest memory unit: the data come from L1
  at a rate no unit is limiting; ``L2/latency-bound`` the same with L2 the busiest; ``latency-bound``:
  DRAM the busiest, below HIGH_PCT.

No data, no verdict: ``summarize(None)`` says "not measured".
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

HIGH_PCT = 60.0  # Nsight Compute's SOLBottleneck: below 60% of peak on every unit "typically indicates latency issues"
DRAM_LOW_PCT = 10.0  # DRAM at most this share of its peak: the kernel's traffic is served by the caches

# display name (details page) or raw metric name -> our key
THROUGHPUT = {
    "dram": ("DRAM Throughput", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
             "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "l1tex": ("L1/TEX Cache Throughput", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
    "l2": ("L2 Cache Throughput", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    "sm": ("Compute (SM) Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory": ("Memory Throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
}
PIPES = {  # optional pipe utilizations (ComputeWorkloadAnalysis / raw), for the compute-bound verdict
    "fma": ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"),
    "tensor": ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active"),
}
OCCUPANCY = {
    "achieved_occupancy": ("Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    "theoretical_occupancy": ("Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct"),
    "achieved_active_warps": ("Achieved Active Warps Per SM", "sm__warps_active.avg.per_cycle_active"),
}
LAUNCH = {
    "registers": ("Registers Per Thread", "launch__registers_per_thread"),
    "sms": ("# SMs", "device__attribute_multiprocessor_count"),
    "waves": ("Waves Per SM", "launch__waves_per_multiprocessor"),
    "grid_size": ("Grid Size", "launch__grid_size"),
    "block_size": ("Block Size", "launch__block_size"),
}
SCHEDULER = {  # SchedulerStats
    "issued_warp_per_scheduler": ("Issued Warp Per Scheduler", "smsp__issue_active.avg.per_cycle_active"),
    "no_eligible_pct": ("No Eligible", "smsp__issue_inst0.avg.pct_of_peak_sustained_active"),
    "active_warps_per_scheduler": ("Active Warps Per Scheduler", "smsp__warps_active.avg.per_cycle_active"),
    "eligible_warps_per_scheduler": ("Eligible Warps Per Scheduler", "smsp__warps_eligible.avg.per_cycle_active"),
}
WARP_STATE = {  # WarpStateStats
    "warp_cycles_per_issued_instruction": ("Warp Cycles Per Issued Instruction", "smsp__average_warp_latency_per_inst_issued.ratio"),
    "warp_cycles_per_executed_instruction": ("Warp Cycles Per Executed Instruction", "smsp__average_warps_active_per_inst_executed.ratio"),
}
# per-reason stall metrics: raw names smsp__average_warp(s)_latency_issue_stalled_<reason>[...]
# (cycles per issued instruction) and smsp__pcsamp_warps_issue_stalled_<reason> (samples)
_STALL_RAW = re.compile(r"^smsp__(?:average_warps?_(?:latency_)?issue_stalled|average_warp_latency_issue_stalled|pcsamp_warps_issue_stalled)_([a-z_]+?)(?:_per_issue_active|_per_warp_active)?(?:\.ratio|\.pct|\.sum|\.avg)?(?:\.not_issued)?$")
_STALL_DISPLAY = re.compile(r"^Stall ([A-Z][A-Za-z /]+)$")
NOT_STALLS = {"selected"}


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def _csv_lines(text: str) -> list[list[str]]:
    body = "\n".join(line for line in text.splitlines() if line.startswith('"'))
    return list(csv.reader(io.StringIO(body)))


def read_launches(path: Path) -> list[dict[str, Any]]:
    """Each profiled launch in an ncu --csv export: kernel, id, grid, block, and its metrics by name
    ({name: {"value", "unit", "section"}}), plus the rule results of a details page."""
    rows = _csv_lines(Path(path).read_text(errors="replace"))
    if not rows:
        raise ValueError(f"{path}: no CSV rows (not an ncu --csv export)")
    header = rows[0]
    if "Metric Name" in header:
        return _details(header, rows[1:])
    return _raw(header, rows[1:])


def _details(header: list[str], body: list[list[str]]) -> list[dict]:
    launches: dict[str, dict] = {}
    for row in body:
        record = dict(zip(header, row))
        key = record.get("ID", "0")
        launch = launches.setdefault(key, {
            "id": key, "kernel": record.get("Kernel Name"), "grid": record.get("Grid Size"), "block": record.get("Block Size"),
            "cc": record.get("CC"), "metrics": {}, "rules": [], "sections": [],
        })
        section = record.get("Section Name", "")
        if section and section not in launch["sections"]:
            launch["sections"].append(section)
        if record.get("Metric Name"):
            launch["metrics"][record["Metric Name"]] = {"value": record.get("Metric Value", ""), "unit": record.get("Metric Unit", ""), "section": section}
        elif record.get("Rule Name"):
            launch["rules"].append({"section": section, "rule": record["Rule Name"], "type": record.get("Rule Type"),
                                    "description": record.get("Rule Description", ""),
                                    "estimated_speedup": _number(record.get("Estimated Speedup", "")),
                                    "speedup_type": record.get("Estimated Speedup Type") or None})
    return list(launches.values())


def _raw(header: list[str], body: list[list[str]]) -> list[dict]:
    units = body[0] if body and not _number((body[0] + [""])[0] or "x") and body[0][:1] == [""] else None
    data = body[1:] if units is not None else body
    launches = []
    for row in data:
        record = dict(zip(header, row))
        metrics = {name: {"value": value, "unit": (dict(zip(header, units)).get(name, "") if units else ""), "section": ""}
                   for name, value in record.items()}
        launches.append({"id": record.get("ID", str(len(launches))), "kernel": record.get("Kernel Name"),
                         "grid": record.get("Grid Size") or record.get("launch__grid_size"),
                         "block": record.get("Block Size") or record.get("launch__block_size"),
                         "cc": record.get("CC"), "metrics": metrics, "rules": [], "sections": []})
    return launches


def _pick(metrics: dict, names: tuple) -> float | None:
    for name in names:
        if name in metrics:
            value = _number(metrics[name]["value"])
            if value is not None:
                return value
    return None


# ncu prints a duration in the unit it finds readable (ns on one page, us on another): all in microseconds
_TIME_UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
DURATION = ("Duration", "gpu__time_duration.sum")


def _duration_us(metrics: dict) -> float | None:
    for name in DURATION:
        if name in metrics:
            value, scale = _number(metrics[name]["value"]), _TIME_UNITS_US.get(metrics[name].get("unit", "").strip())
            if value is not None and scale is not None:
                return value * scale
    return None


def _dims(text: str | None) -> list[int] | None:
    if not text:
        return None
    numbers = re.findall(r"\d+", text)
    return [int(n) for n in numbers] if numbers else None


def stall_reasons(launch: dict) -> list[dict] | None:
    """Warp stall reasons, largest first ({reason, value, unit, metric}), or None when the export has
    no per-reason stall metric (WarpStateStats' breakdown is in the raw metrics)."""
    found = []
    for name, entry in launch["metrics"].items():
        match = _STALL_RAW.match(name)
        reason = match.group(1) if match else None
        if reason is None:
            display = _STALL_DISPLAY.match(name)
            reason = display.group(1).strip().lower().replace(" ", "_").replace("/", "_") if display else None
        value = _number(entry["value"]) if reason else None
        if reason and value is not None:
            found.append({"reason": reason, "value": value, "unit": entry.get("unit") or "", "metric": name})
    if not found:
        return None
    # one figure per reason: the first metric family seen for it
    by_reason: dict[str, dict] = {}
    for item in found:
        by_reason.setdefault(item["reason"], item)
    # "selected" is the cycle a warp issues (always 1 per issued instruction), not a wait: not ranked
    # among the stalls, though it is part of the cycles between issues
    return sorted((i for r, i in by_reason.items() if r not in NOT_STALLS), key=lambda i: -i["value"])


def stall_shares(stalls: list[dict] | None, cycles_per_issue: float | None) -> list[dict] | None:
    """Each stall with its share of the warp cycles between two issued instructions (WarpStateStats'
    "Warp Cycles Per Issued Instruction"), as ncu's own rules state it ("this stall type represents
    about X% of the total average of N cycles between issuing two instructions"), for the
    per-issue ratios (``..._per_issue_active.ratio``); other families get no share."""
    if stalls is None:
        return None
    out = []
    for item in stalls:
        share = (item["value"] / cycles_per_issue if cycles_per_issue and item["metric"].endswith("_per_issue_active.ratio")
                 else None)
        out.append({**item, "share": share})
    return out


def _pct(value: float | None) -> str:
    """A percentage of peak as a reader needs it: three significant digits ("?" when not exported)."""
    return "?" if value is None else f"{value:.3g}"


def verdict(throughput: dict[str, float | None], pipes: dict[str, float | None] | None = None) -> dict[str, Any]:
    """What bounds the kernel by SpeedOfLight percentages: {"bound", "basis"} (see the module doc)."""
    dram, l1, l2, sm = (throughput.get(k) for k in ("dram", "l1tex", "l2", "sm"))
    if dram is None or sm is None or (l1 is None and l2 is None):
        return {"bound": "not measured", "basis": "the export lacks the SpeedOfLight throughputs (DRAM, L1/TEX or L2, SM)"}
    compute = max([sm] + [v for v in (pipes or {}).values() if v is not None])
    if dram >= HIGH_PCT and dram >= compute:
        return {"bound": "memory-bound", "basis": f"DRAM at {_pct(dram)}% of peak (>= {HIGH_PCT:g}%)"}
    if compute >= HIGH_PCT:
        return {"bound": "compute-bound", "basis": f"SM/pipe at {_pct(compute)}% of peak (>= {HIGH_PCT:g}%), DRAM {_pct(dram)}%"}
    units = {"L1/TEX": l1 if l1 is not None else -1.0, "L2": l2 if l2 is not None else -1.0, "DRAM": dram}
    busiest = max(units, key=lambda k: units[k])
    low = f"; DRAM at {_pct(dram)}% (< {DRAM_LOW_PCT:g}%): the traffic is served by the caches" if dram < DRAM_LOW_PCT else ""
    if units[busiest] >= HIGH_PCT:  # a cache at its peak: memory-bound in Nsight's sense, on that cache
        basis = (f"{busiest} at {_pct(units[busiest])}% of peak (>= {HIGH_PCT:g}%), the busiest unit; DRAM {_pct(dram)}%, "
                 f"L1/TEX {_pct(l1)}%, L2 {_pct(l2)}%, SM {_pct(sm)}%{low}")
        bound = {"L1/TEX": "L1/TEX-bound", "L2": "L2-bound"}[busiest]
    else:
        basis = (f"DRAM {_pct(dram)}%, L1/TEX {_pct(l1)}%, L2 {_pct(l2)}%, SM {_pct(sm)}% of peak: "
                 f"no unit at {HIGH_PCT:g}%, {busiest} the busiest{low}")
        bound = {"L1/TEX": "L1/latency-bound", "L2": "L2/latency-bound", "DRAM": "latency-bound"}[busiest]
    return {"bound": bound, "basis": basis}


def summarize_launch(launch: dict, source: str) -> dict[str, Any]:
    """One launch's figures: throughputs (% of peak), occupancy, launch facts, scheduler and warp-state
    statistics where the export has those sections, stall reasons, and the verdict."""
    metrics = launch["metrics"]
    throughput = {key: _pick(metrics, names) for key, names in THROUGHPUT.items()}
    pipes = {key: _pick(metrics, names) for key, names in PIPES.items()}
    scheduler = {key: _pick(metrics, names) for key, names in SCHEDULER.items()}
    warp_state = {key: _pick(metrics, names) for key, names in WARP_STATE.items()}
    stalls = stall_shares(stall_reasons(launch), warp_state["warp_cycles_per_issued_instruction"])
    out = {
        "measured": True,
        "source": source,
        "kernel": launch["kernel"],
        "launch_id": launch["id"],
        "grid": _dims(launch["grid"]),
        "block": _dims(launch["block"]),
        "cc": launch.get("cc"),
        "sections": launch["sections"],
        "throughput_pct": throughput,
        "pipes_pct": {k: v for k, v in pipes.items() if v is not None} or None,
        **{key: _pick(metrics, names) for key, names in OCCUPANCY.items()},
        **{key: _pick(metrics, names) for key, names in LAUNCH.items()},
        "duration_us": _duration_us(metrics),
        "scheduler": scheduler if any(v is not None for v in scheduler.values()) else None,
        "warp_state": warp_state if any(v is not None for v in warp_state.values()) else None,
        "stalls": stalls[:5] if stalls else None,
        "stalls_measured": stalls is not None,
        "rules": [{k: r[k] for k in ("rule", "type", "estimated_speedup")} for r in launch["rules"]],
        "thresholds": {"high_pct": HIGH_PCT, "dram_low_pct": DRAM_LOW_PCT},
    }
    out.update(verdict(throughput, pipes))
    return out


def summarize(path: Path | str | None, kernel: str | None = None) -> dict[str, Any]:
    """The ncu figures for ``kernel``'s launch in the export at ``path`` (the first launch whose name
    contains ``kernel``; with no kernel named, the export's only launch). ``{"measured": False, "bound": "not measured", "why"}``
    when there is no export; a file that cannot be read or holds no such launch is an error entry
    (``"error"``), never a verdict."""
    if path is None:
        return {"measured": False, "bound": "not measured", "why": "no Nsight Compute export was given"}
    try:
        launches = read_launches(Path(path))
    except (OSError, ValueError) as exc:
        return {"measured": False, "bound": "not measured", "error": f"{type(exc).__name__}: {exc}", "source": str(path)}
    # a named kernel must be found by name (ncu prints Triton kernels as named, CUDA ones with their signature)
    chosen = [l for l in launches if kernel in (l["kernel"] or "")] if kernel else (launches if len(launches) == 1 else [])
    if not chosen:
        return {"measured": False, "bound": "not measured", "source": str(path),
                "error": f"no launch of {kernel} among {sorted({l['kernel'] for l in launches})}"}
    summary = summarize_launch(chosen[0], str(path))
    summary["launches_of_kernel"] = len(chosen)
    return summary


__all__ = ["DRAM_LOW_PCT", "HIGH_PCT", "read_launches", "stall_reasons", "stall_shares", "summarize", "summarize_launch", "verdict"]
