"""CPU-only traces (captured here with torch.profiler, Triton under TRITON_INTERPRET=1): host ranges as kernels."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from tools.trace import CPU_HOST, dominant, summarize

DATA = Path(__file__).parent / "data"
CPU_TRACE = DATA / "trace-cpu/reference-cpu.trace.json.gz"
TP2 = [DATA / "trace-cpu-tp2/tp2-cpu-TP-0.trace.json.gz", DATA / "trace-cpu-tp2/tp2-cpu-TP-1.trace.json.gz"]


def _outermost_by_hand(path: Path) -> dict[str, list]:
    """Independent reference: per thread, a range is outermost when no other work range encloses it."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    ranges = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and not e["name"].startswith("ProfilerStep#"):
            ranges[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["dur"], e["name"]))
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for items in ranges.values():
        for start, end, dur, name in items:
            enclosed = any(
                (s < start and end <= e + 1e-3) or (s == start and e > end) for s, e, _, _ in items if (s, e) != (start, end)
            )
            if not enclosed:
                totals[name][0] += 1
                totals[name][1] += dur
    return dict(totals)


def test_cpu_trace_is_labelled_cpu_host_and_ranks_outermost_ranges():
    summary = summarize([CPU_TRACE])
    assert summary.kind == CPU_HOST
    assert any("interpreter" in note for note in summary.notes)
    expected = _outermost_by_hand(CPU_TRACE)
    got = {row.name: [row.calls, row.total_us] for row in summary.merged.kernels}
    assert set(got) == set(expected)
    for name, (calls, total) in expected.items():
        assert got[name][0] == calls, name
        assert got[name][1] == pytest.approx(total, rel=1e-12), name
    # The record_function ranges named after the Triton kernels are kernels of their own, and the
    # aten ops the interpreter runs inside them are not counted twice.
    assert {"_rms_norm_kernel", "_scale_add_kernel"} <= set(got)
    assert not any(name in got for name in ("aten::set_", "aten::new_empty"))
    assert summary.merged.steps == 4
    kernel_time = sum(total for _, total in expected.values())
    for row in summary.merged.kernels:
        assert row.share == pytest.approx(expected[row.name][1] / kernel_time, abs=1e-12)
    # One thread: the ranges do not overlap, so busy time is the kernel time and idle is the rest.
    assert summary.merged.busy_us == pytest.approx(summary.merged.kernel_time_us, abs=1e-6)
    assert summary.merged.idle_us == pytest.approx(summary.merged.window_us - summary.merged.busy_us)
    assert summary.cuda_graph.launches == 0 and not summary.cuda_graph.hidden
    top = dominant(summary, 0.0)
    assert top is not None and top.name == summary.merged.kernels[0].name


def test_two_rank_cpu_traces_rank_from_file_names_and_distributed_info(tmp_path):
    by_name = summarize(TP2, by_rank=True)
    assert [f.ranks for f in by_name.files] == [("0",), ("1",)]
    assert set(by_name.ranks) == {"0", "1"}
    # Renamed without SGLang's TP label, the rank comes from torch.distributed's distributedInfo.
    renamed = [tmp_path / "b.trace.json.gz", tmp_path / "a.trace.json.gz"]
    shutil.copy(TP2[0], renamed[0])
    shutil.copy(TP2[1], renamed[1])
    by_info = summarize(renamed, by_rank=True)
    assert [f.ranks for f in by_info.files] == [("0",), ("1",)]
    assert by_info.ranks == by_name.ranks
    for key, path in zip(("0", "1"), TP2):
        expected = _outermost_by_hand(path)
        # one unit a gloo collective: the caller's c10d:: enqueue folds into gloo's worker range (host.py)
        assert expected.pop("c10d::allreduce_")[0] == expected["gloo:all_reduce"][0]
        assert {row.name: row.calls for row in by_name.ranks[key].kernels} == {n: c for n, (c, _) in expected.items()}
    merged = by_name.merged
    assert merged.kernel_time_us == pytest.approx(sum(r.kernel_time_us for r in by_name.ranks.values()))
    assert merged.window_us == pytest.approx(sum(r.window_us for r in by_name.ranks.values()))
    assert merged.devices == 2
    assert merged.categories["communication"] > 0


def test_the_same_rank_twice_is_refused(tmp_path):
    copy = tmp_path / "again-TP-0.trace.json.gz"
    shutil.copy(TP2[0], copy)
    with pytest.raises(ValueError, match="both hold rank 0"):
        summarize([TP2[0], copy])


def test_gpu_and_cpu_only_traces_are_not_merged():
    gpu = DATA / "h200-traces/dsv4-like-B1-topk512.trace.json.gz"
    with pytest.raises(ValueError, match="CPU-only"):
        summarize([gpu, TP2[1]])
