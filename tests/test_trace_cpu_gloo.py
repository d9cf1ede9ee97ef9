"""gloo collectives in the reference engine's CPU traces (tests/data/trace-cpu-tp2-gloo, a real TP2 capture):
each all-reduce is one unit of work, and the trace's communication is held against the engine's own
wall time in its collectives.

Each all-reduce appears twice in a trace: ``c10d::allreduce_`` on the calling thread (the enqueue, tens
of µs) and ``gloo:all_reduce`` on a ``pt_gloo_runloop`` thread (the collective, the wait for the peer
included). The engine times each call with perf_counter in ``Comm._timed``; with_stack=True puts that
bracket in the trace as a Python frame, so the engine's in-collectives time of the very steps traced is
in the trace itself. The bench JSON's ``ranks`` (the Ranks table) are of other steps, timed without the
profiler: on this loaded box the waits between ranks differ from run to run by several times (the
capture: 7.9 and 8.8 ms a step timed, 12 and 25 ms a step profiled), so no tolerance could hold the
trace against those; the test reads them only to check they are the Ranks table's.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import pytest

from agent.steps.rank_balance import rank_part
from tools.trace import summarize

DATA = Path(__file__).parent / "data" / "trace-cpu-tp2-gloo"
BENCH = json.loads((DATA / "bench-result.json").read_text())
FILES = [DATA / name for name in BENCH["trace"]["files"]]
_BRACKET = re.compile(r"tools/engines/reference/collective\.py\(\d+\): _timed$")
# The trace's communication of a rank against the engine's bracket around the same calls: never above it
# (the ranges lie inside the bracket), below it by the Python around the c10d call (~100 µs a call under
# with_stack) and by the calling thread's wake-up after gloo's worker ends (no range covers it: up to 4 ms
# once in this capture, on rank 0; measured 16.6% and 1.6% below on ranks 0 and 1).
BELOW_BRACKET = 0.20
ABOVE_BRACKET_US = 1.0


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _brackets(events: list[dict]) -> list[float]:
    """The engine's in-collectives wall time of each call (µs), from its Comm._timed frames."""
    return [e["dur"] for e in events if e.get("cat") == "python_function" and _BRACKET.search(e["name"])]


@pytest.fixture(scope="module")
def summary():
    return summarize(FILES, by_rank=True)


def test_each_collective_is_one_unit_named_after_the_collective(summary):
    steps, layers = BENCH["trace"]["steps"], len(BENCH["shapes"]["layer_ids"])
    for key, path in zip(("0", "1"), FILES):
        rank = summary.ranks[key]
        comm = [row for row in rank.kernels if row.category == "communication"]
        assert [row.name for row in comm] == ["gloo:all_reduce"]
        # two all-reduces a layer, one unit each: as many as the engine's calls, no c10d:: enqueue row
        assert comm[0].calls == 2 * layers * steps == len(_brackets(_events(path)))
        assert rank.categories["communication"] == pytest.approx(comm[0].total_us, rel=1e-12)


def test_communication_is_the_engines_in_collectives_time_of_the_traced_steps(summary):
    for key, path in zip(("0", "1"), FILES):
        events = _events(path)
        engine_us = math.fsum(_brackets(events))
        comm = summary.ranks[key].categories["communication"]
        assert (1 - BELOW_BRACKET) * engine_us <= comm <= engine_us + ABOVE_BRACKET_US, (key, comm, engine_us)
    # the two copies summed, as before the fold, exceed the engine's own wall time on rank 1: counted twice
    events = _events(FILES[1])
    both = math.fsum(e["dur"] for e in events if e["name"] in ("c10d::allreduce_", "gloo:all_reduce"))
    assert both > math.fsum(_brackets(events)) + ABOVE_BRACKET_US


def test_busy_time_counts_the_collectives_once_and_the_share_follows(summary):
    for key, path in zip(("0", "1"), FILES):
        rank = summary.ranks[key]
        events = _events(path)
        steps_us = math.fsum(e["dur"] for e in events if e["name"].startswith("ProfilerStep#"))
        brackets = math.fsum(_brackets(events))
        # no two units of a rank overlap any more: its busy time (union over threads) is its kernel time
        assert rank.busy_us == pytest.approx(rank.kernel_time_us, rel=1e-9)
        # outside the collectives the host ranges cover part of the engine's compute time (step less its
        # bracket): the rest is Python between the ops, which with_stack slows
        compute_us = rank.busy_us - rank.categories["communication"]
        assert 0 < compute_us <= steps_us - brackets
    merged = summary.merged
    assert merged.categories["communication"] == pytest.approx(
        math.fsum(r.categories["communication"] for r in summary.ranks.values()), rel=1e-12)
    assert merged.kernel_time_us == pytest.approx(math.fsum(r.kernel_time_us for r in summary.ranks.values()), rel=1e-12)


def test_ranks_table_puts_the_trace_beside_the_timed_run(summary):
    numbers, tables, data = rank_part(summary, BENCH["results"][0], [1])
    share = summary.merged.categories["communication"] / summary.merged.kernel_time_us
    assert numbers["communication_share"].value == pytest.approx(share)
    by_rank = defaultdict(dict)
    for row in data["ranks"]:
        by_rank[row["rank"]] = row
    for timed in BENCH["results"][0]["ranks"]:
        row = by_rank[str(timed["rank"])]
        assert row["communication_ms"] == pytest.approx(summary.ranks[str(timed["rank"])].categories["communication"] / 1000)
        assert row["comm_ms"] == timed["comm_ms"] and row["busy_ms"] == timed["busy_ms"]
    assert tables[0].title == "Ranks"
