"""A JSON summary of scripts/h200/grid_ncu.sh's raw metrics: ``python -m scripts.h200.grid_ncu_summary DIR``
reads DIR/grid_ncu_raw.csv and DIR/grid_ncu_run.txt (the order of the profiled calls) and writes
DIR/grid_ncu_summary.json: each kernel with the call it belongs to (a call's kernels end with its combine
kernel, ours or FlashMLA's), its grid, duration, registers, L2 hit rate, achieved occupancy, SM throughput,
issue activity and its top five stall reasons (each reason's share of the stalls a issued instruction sees).
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")


def summarize(folder: Path) -> dict:
    rows = list(csv.reader((folder / "grid_ncu_raw.csv").open()))
    header = rows[0]
    calls = [line.split(": ", 1)[1].strip() for line in (folder / "grid_ncu_run.txt").read_text().splitlines()
             if re.match(r"^\d+: ", line)]  # fmt: skip
    kernels, call = [], 0
    for raw in rows[2:]:
        d = dict(zip(header, raw))
        stalls = {m.group(1): float(v) for k, v in d.items() if (m := STALL.fullmatch(k)) and v}
        total = sum(stalls.values()) or 1.0
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:5]
        name = d["Kernel Name"]
        kernels.append({
            "call": calls[call] if call < len(calls) else None,
            "kernel": name.split("<")[0].replace("void ", ""),
            "grid": d["Grid Size"], "block": d["Block Size"],
            "duration_us": float(d["gpu__time_duration.sum"]),
            "regs": d["launch__registers_per_thread"],
            "l2_hit_pct": float(d["lts__t_sector_hit_rate.pct"]),
            "achieved_occupancy_pct": float(d["sm__warps_active.avg.pct_of_peak_sustained_active"]),
            "sm_throughput_pct": float(d["sm__throughput.avg.pct_of_peak_sustained_elapsed"]),
            "issue_active_pct": float(d["smsp__issue_active.avg.pct_of_peak_sustained_active"]),
            "stalls_top": ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in top),
        })  # fmt: skip
        if "combine" in name:
            call += 1
    if call != len(calls):
        raise ValueError(f"{call} calls ended with a combine kernel, {len(calls)} were profiled")
    return {"source": "grid_ncu_raw.csv (scripts/h200/grid_ncu.sh, --clock-control none; kernels one at a time under "
                      "the profiler, caches flushed between them); stalls_top: each stall reason's share of "
                      "smsp__average_warps_issue_stalled_*_per_issue_active", "kernels": kernels}  # fmt: skip


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    (folder / "grid_ncu_summary.json").write_text(json.dumps(summarize(folder), indent=1) + "\n")
