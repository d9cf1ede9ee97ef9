"""``TraceAnalysis``: PyTorch-profiler traces as pandas DataFrames, the numbers ``python -m agent trace``
prints (``--by-rank``: the kernel tables; ``--by-op``: kernel time by launching operation).

Each trace is read once, on first use, by the same code as the CLI (tools.trace.summarize and
tools.trace.attribute), so a DataFrame holds exactly the numbers of the CLI's ``--json``. Times are
microseconds (the trace's unit); a share with nothing to divide by is NaN (``null`` in the JSON).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from tools.trace import Attribution, RankSummary, TraceSummary, attribute, summarize

KERNEL_COLUMNS = ["name", "category", "calls", "total_us", "mean_us", "share"]
RANK_COLUMNS = ["rank", "window_us", "kernel_time_us", "busy_us", "idle_us", "idle_share", "steps", "devices",
                "between_steps_idle_us"]
OPERATION_COLUMNS = ["operation", "source", "function", "file", "line", "calls", "total_us", "share", "kernel_names"]
OPERATION_KERNEL_COLUMNS = ["operation", "source", "kernel", "calls", "total_us"]
MERGED = "all"


class TraceAnalysis:
    """Trace files of one profile (one per rank, or merged), analysed as the CLI does.

    ``files``: PyTorch-profiler Chrome traces (``.json`` or ``.json.gz``), or one; a rank is named by the
    file's ``-TP-N`` label, else its ``distributedInfo.rank``, else the pid labels of a merged file
    ("0" for a single unlabelled file). ``categories``: a ``[(category, regex), ...]`` table replacing
    the default kernel categories (the CLI's ``--categories FILE``).

    Reading errors are the CLI's: ValueError (TraceFormatError for an unreadable or malformed file)
    on the first method that needs the traces. ``kind`` is "gpu" (device kernels) or "cpu-host" (a
    CPU-only trace: the "kernels" are the outermost host ranges, their times CPU wall times);
    ``notes`` say what limits the tables, e.g. CUDA-graph launches whose kernels are missing, in
    which case ``ranked`` is False and no kernel may be called dominant.
    """

    def __init__(self, files: str | Path | Sequence[str | Path], *, categories: Sequence[Sequence[str]] | None = None):
        self.files = (str(files),) if isinstance(files, (str, Path)) else tuple(str(f) for f in files)
        self._categories = categories
        self._summary: TraceSummary | None = None
        self._attribution: Attribution | None = None

    @property
    def summary(self) -> TraceSummary:
        """The record ``trace --json --by-rank`` prints (tools.trace.records.TraceSummary)."""
        if self._summary is None:
            self._summary = summarize(self.files, by_rank=True, categories=self._categories)
        return self._summary

    @property
    def attribution(self) -> Attribution:
        """The record ``trace --json --by-op`` prints: status, message and the dominant kernel's
        operation (tools.trace.records.Attribution)."""
        if self._attribution is None:
            self._attribution = attribute(self.files)
        return self._attribution

    @property
    def kind(self) -> str:
        return self.summary.kind

    @property
    def notes(self) -> tuple[str, ...]:
        return self.summary.notes

    @property
    def ranked(self) -> bool:
        return not self.summary.cuda_graph.hidden

    @property
    def ranks(self) -> list[str]:
        """The rank keys, in rank order ("0", "1", ...)."""
        return list(self.summary.ranks)

    def kernels(self, rank: str | int | None = None) -> pd.DataFrame:
        """The kernel table of each rank (``rank=None``: every rank, one after the other) or of one.

        One row per kernel name and rank, largest total first within a rank. Columns:
        rank (str): the rank key; name: the kernel's name as the trace gives it (a host range's on
        cpu-host traces); category: its category from the name patterns ("other" when none
        matches); calls (int): its launches; total_us (float, us): their summed duration;
        mean_us (float, us): total_us / calls; share (float, fraction 0-1): total_us over the
        rank's summed kernel time. KeyError for a rank the traces do not hold.
        """
        if rank is None:
            keys = self.ranks
        else:
            keys = [str(rank)]
            if keys[0] not in self.summary.ranks:
                raise KeyError(f"rank {rank!r} is not in the traces (ranks: {', '.join(self.ranks)})")
        table = pd.concat([_kernel_frame(self.summary.ranks[key]).assign(rank=key) for key in keys], ignore_index=True)
        return table[["rank", *KERNEL_COLUMNS]]

    def kernels_merged(self) -> pd.DataFrame:
        """The kernel table of all ranks together: one row per kernel name, largest total first.

        Columns as kernels() without ``rank``: name, category, calls (int), total_us (float, us:
        summed over every rank), mean_us (float, us), share (float, fraction 0-1 of all ranks'
        summed kernel time).
        """
        return _kernel_frame(self.summary.merged)

    def rank_times(self) -> pd.DataFrame:
        """The timeline of each rank, and of all ranks (rank "all"): one row each.

        Columns: rank (str); window_us (float, us): first kernel start to last kernel end, summed
        over the rank's GPUs (host processes on cpu-host traces); kernel_time_us (float, us): summed
        kernel durations (overlaps count twice); busy_us (float, us): the union of the kernels'
        intervals; idle_us (float, us): window_us - busy_us; idle_share (float, fraction 0-1):
        idle_us / window_us; steps (int): ProfilerStep#N ranges (the most of any rank for "all");
        devices (int): GPUs or host processes with kernels; between_steps_idle_us (float, us): device
        idle between consecutive profiler steps, the profiler's own gap (NaN without step ranges).
        """
        rows = [_rank_row(key, summary) for key, summary in self.summary.ranks.items()]
        rows.append(_rank_row(MERGED, self.summary.merged))
        return _typed(pd.DataFrame(rows, columns=RANK_COLUMNS), ints=["steps", "devices"],
                      floats=["window_us", "kernel_time_us", "busy_us", "idle_us", "idle_share", "between_steps_idle_us"])

    def time_by_operation(self) -> pd.DataFrame:
        """Kernel time by the operation that launched it, all ranks together: one row per
        operation, largest first (``attribution`` says whether the trace allowed it: a CUDA-graph
        replay gives one "(CUDA graph replay)" row and status "needs-eager-profile").

        Columns: operation: the frame's name (a ``record_function`` range without its ``op:``
        prefix, a Python function, an aten op, or a "(...)" placeholder); source: "record_function",
        "python", "aten", "graph" or "none"; function, file, line (int): the Python frame where
        known, else None; calls (int): instances of the frame that launched kernels; total_us
        (float, us): the kernels' summed duration (GPU time; host time on cpu-host traces); share
        (float, fraction 0-1): of all kernel time; kernel_names (int): distinct kernels it launched
        (their split: operation_kernels()).
        """
        rows = []
        for row in self.attribution.rows:
            frame = row.frame or {}
            rows.append([row.name, row.source, frame.get("function"), frame.get("file"), frame.get("line"), row.calls,
                         row.total_us, row.share, len(row.kernels)])
        table = pd.DataFrame(rows, columns=OPERATION_COLUMNS)
        table["line"] = table["line"].astype("Int64")
        return _typed(table, floats=["total_us", "share"], ints=["calls", "kernel_names"])

    def operation_kernels(self) -> pd.DataFrame:
        """Each operation's kernels: one row per (operation, kernel name), operations in
        time_by_operation() order, kernels largest first within one.

        Columns: operation, source (as time_by_operation()); kernel: the kernel's name; calls (int):
        its launches inside the operation; total_us (float, us): their summed duration.
        """
        rows = [[row.name, row.source, kernel.name, kernel.calls, kernel.total_us]
                for row in self.attribution.rows for kernel in row.kernels]
        return _typed(pd.DataFrame(rows, columns=OPERATION_KERNEL_COLUMNS), floats=["total_us"], ints=["calls"])


def _kernel_frame(summary: RankSummary) -> pd.DataFrame:
    rows = [[k.name, k.category, k.calls, k.total_us, k.mean_us, k.share] for k in summary.kernels]
    return _typed(pd.DataFrame(rows, columns=KERNEL_COLUMNS), floats=["total_us", "mean_us", "share"], ints=["calls"])


def _rank_row(key: str, summary: RankSummary) -> list:
    return [key, summary.window_us, summary.kernel_time_us, summary.busy_us, summary.idle_us, summary.idle_share,
            summary.steps, summary.devices, summary.between_steps_idle_us]


def _typed(table: pd.DataFrame, *, floats: list[str], ints: list[str]) -> pd.DataFrame:
    """Columns with their dtype even when empty or all None (None becomes NaN in a float column)."""
    return table.astype({**{c: "float64" for c in floats}, **{c: "int64" for c in ints}})
