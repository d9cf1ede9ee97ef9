"""perf-investigator's Python API, beside the CLI: the public facades return pandas DataFrames.

    from perf_investigator import Run, TraceAnalysis

    traces = TraceAnalysis(["trace-TP-0.json.gz", "trace-TP-1.json.gz"])
    traces.kernels()            # kernel table per rank (``python -m agent trace FILE... --by-rank``)
    traces.kernels_merged()     # all ranks together
    traces.rank_times()         # window, busy and idle time per rank
    traces.time_by_operation()  # kernel time by launching operation (``trace --by-op``)

    run = Run("runs/examples/dsv4-flash-h200-20261202b")
    run.levers()                # the lever sweep: tok/s, ratio to the baseline and its interval, verdict
    run.findings()              # one row per step's finding; run.numbers(): every number they state

Each method's docstring gives its columns with their meaning and unit. This package sits at the top
of the layers (it may use agent, reports, tools and schema; nothing imports it).
"""

from __future__ import annotations

from .run import Run
from .trace_analysis import TraceAnalysis

__all__ = ["Run", "TraceAnalysis"]
