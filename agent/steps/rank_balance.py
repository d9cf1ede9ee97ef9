"""The ranks of a profile the engine ran in several processes: each rank's time and its communication, the
critical rank and the imbalance between them.

The trace gives each rank's kernel (CPU: host range) time and its communication category (NCCL kernels, gloo
collectives); the engine's timed run, without the profiler, gives each rank's busy time (its step less the time
it waited in collectives; CPU only, where gloo's collectives block), the critical rank (the most busy: the
others wait for it) and the imbalance (its busy time over the ranks' mean, less 1).
"""

from __future__ import annotations

from typing import Any

from schema.finding import Number, Table
from tools.trace.ranks import rank_sort_key

COMMUNICATION = "communication"


def rank_files(trace_info: dict[str, Any]) -> list[str]:
    """The profile's trace files: one per rank when the engine ran several, else the one."""
    return list(trace_info.get("files") or [trace_info["file"]])


def rank_part(summary, row: dict[str, Any] | None, seq: list[int]) -> tuple[dict[str, Number], list[Table], dict] | None:
    """Numbers, tables (per rank) and data of a profile of several ranks; None for one rank."""
    if len(summary.ranks) < 2:
        return None
    merged = summary.merged
    timed = {str(r["rank"]): r for r in (row or {}).get("ranks") or []}
    rows = []
    for key in sorted(summary.ranks, key=rank_sort_key):
        rank = summary.ranks[key]
        comm = rank.categories.get(COMMUNICATION, 0.0)
        own = timed.get(key, {})
        rows.append([key, rank.kernel_time_us / 1000, comm / 1000, comm / rank.kernel_time_us if rank.kernel_time_us else 0.0,
                     own.get("step_ms"), own.get("comm_ms"), own.get("busy_ms"),
                     "critical" if row and str(row.get("critical_rank")) == key else ""])
    comm_total = merged.categories.get(COMMUNICATION, 0.0)
    share = comm_total / merged.kernel_time_us if merged.kernel_time_us else 0.0
    numbers = {"communication_ms": Number(value=comm_total / 1000, unit="ms", label="communication (collectives) in the merged trace", seqs=seq),
               "communication_share": Number(value=share, unit="fraction", label="communication share of the merged trace's time", seqs=seq),
               "ranks": Number(value=len(summary.ranks), unit="ranks", label="rank processes profiled, one trace each", seqs=seq)}
    if row and row.get("critical_rank") is not None:
        numbers["critical_rank"] = Number(value=row["critical_rank"], label="critical rank: the most busy a step, the others wait for it", seqs=seq)
    if row and row.get("imbalance") is not None:
        numbers["rank_imbalance"] = Number(value=row["imbalance"], unit="fraction",
                                           label="the critical rank's busy time over the ranks' mean, less 1 (timed without the profiler)", seqs=seq)
    table = Table(title="Ranks", columns=["rank", "traced ms", "communication ms", "communication share", "step ms",
                                          "in collectives ms", "busy ms", ""],
                  rows=rows, note="traced: each rank's trace; step, in collectives and busy: the engine's timed run "
                                  "(median a step), busy = step less the wait in collectives (blocking gloo on the CPU)")
    per_rank = [Table(title=f"Rank {key}: top kernels", columns=["name", "category", "calls", "total ms", "share"],
                      rows=[[k.name, k.category, k.calls, k.total_us / 1000, k.share] for k in summary.ranks[key].kernels[:8]])
                for key in sorted(summary.ranks, key=rank_sort_key)]
    data = {"ranks": [dict(zip(["rank", "traced_ms", "communication_ms", "communication_share", "step_ms", "comm_ms",
                                "busy_ms"], r[:7])) for r in rows],
            "critical_rank": (row or {}).get("critical_rank"), "imbalance": (row or {}).get("imbalance"),
            "communication_share": share}
    return numbers, [table, *per_rank], data


def critical_focus(summary, row: dict[str, Any] | None, files: list[str]) -> dict[str, Any] | None:
    """The rank whose trace the dominant kernel, its operation and the ceiling's shares and window come
    from, for a profile of several ranks (None for one): the critical rank of the engine's timed run
    (the most busy: the others wait for it in the collectives), else, without one, the rank whose
    trace holds the most time outside communication. A merged trace sums the ranks' windows and
    kernels, so a share of it mixes one rank's operation with two ranks' time. Returns the rank's
    key, why it was chosen, its summary and the trace file (of ``files``) that holds it."""
    if len(summary.ranks) < 2:
        return None
    timed = (row or {}).get("critical_rank")
    if timed is not None and str(timed) in summary.ranks:
        key = str(timed)
        why = "critical: the most busy a step in the timed run, the others wait for it in the collectives"
    else:
        key = max(sorted(summary.ranks, key=rank_sort_key),
                  key=lambda k: summary.ranks[k].kernel_time_us - summary.ranks[k].categories.get(COMMUNICATION, 0.0))
        why = "the most time outside communication in its trace; the timed run named no critical rank"
    file = next(name for name, traced in zip(files, summary.files) if key in traced.ranks)
    return {"rank": key, "why": why, "summary": summary.ranks[key], "file": file}
