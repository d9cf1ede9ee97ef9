"""CUDA-graph replays of a few grid cells on a timeline (scripts/h200/grid_timeline.sh, under PyTorch's profiler).

Nsight Compute runs kernels one at a time with caches flushed; this shows them as the grid times them:
each (cell, implementation) is captured as one CUDA graph of 8 calls, as ``timing.graph_replay_us`` does,
and replayed 5 times inside a profiler range named after it (the GPU machine has no Nsight Systems;
PyTorch's profiler records graph-replayed kernels through CUPTI too). ``--summarize TRACE`` reads the
exported trace and writes, per range, each call's span (first kernel start to last kernel end), the sum of its
kernels' durations, the time inside the span no kernel runs, the gap to the next call, and each kernel's
median duration, as JSON on stdout.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CALLS_A_GRAPH, REPLAYS = 8, 5


def run() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from scripts.h200.grid_ncu import cell_calls

    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    prof.start()
    for label, fn in cell_calls():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(CALLS_A_GRAPH):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        with record_function(f"timeline {label}"):
            for _ in range(REPLAYS):
                graph.replay()
            torch.cuda.synchronize()
        del graph
    prof.stop()
    prof.export_chrome_trace(sys.argv[1])
    return 0


def summarize(path: Path) -> dict:
    events = json.loads(path.read_text())["traceEvents"]
    gpu_ranges = [e for e in events if e.get("cat") == "gpu_user_annotation" and e.get("name", "").startswith("timeline ")]
    ranges = gpu_ranges or [e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith("timeline ")]
    kernels = sorted(((e["ts"], e["ts"] + e["dur"], e["name"], e.get("tid")) for e in events if e.get("cat") == "kernel"))
    out = []
    for rng in sorted(ranges, key=lambda e: e["ts"]):
        r_start, r_end, text = rng["ts"], rng["ts"] + rng["dur"], rng["name"]
        ks = [k for k in kernels if r_start - 0.5 <= k[0] and k[1] <= r_end + 0.5]
        calls, cur = [], []
        for k in ks:
            cur.append(k)
            if "combine" in k[2]:
                calls.append(cur)
                cur = []
        rows = []
        for i, c in enumerate(calls):
            span = max(e for _, e, _, _ in c) - c[0][0]
            busy, last = 0, c[0][0]
            for s, e, _, _ in sorted(c):
                busy += max(0, e - max(s, last))
                last = max(last, e)
            gap_next = calls[i + 1][0][0] - max(e for _, e, _, _ in c) if i + 1 < len(calls) else None
            rows.append({"span_us": span, "kernels_sum_us": sum(e - s for s, e, _, _ in c),
                         "idle_in_span_us": span - busy, "gap_to_next_us": gap_next})  # fmt: skip
        by_kernel: dict[str, list[float]] = {}
        for s, e, n, _ in ks:
            by_kernel.setdefault(n, []).append(e - s)
        med = lambda key: statistics.median(r[key] for r in rows if r[key] is not None) if rows else None  # noqa: E731
        out.append({"range": text[len("timeline "):], "calls": len(calls), "kernels": len(ks),
                    "streams": len({st for *_, st in ks}), "median_span_us": med("span_us"),
                    "median_kernels_sum_us": med("kernels_sum_us"), "median_idle_in_span_us": med("idle_in_span_us"),
                    "median_gap_to_next_us": med("gap_to_next_us"),
                    "range_source": rng["cat"], "per_call_us": (r_end - r_start) / max(1, len(calls)),
                    "kernel_median_us": {n: statistics.median(v) for n, v in by_kernel.items()}})  # fmt: skip
    return {"source": f"{path.name}: torch.profiler (CUPTI) over CUDA-graph replays; {CALLS_A_GRAPH} calls a graph, "
                      f"{REPLAYS} replays a range (the range's own first replay included)",
            "ranges": out}  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summarize"]:
        print(json.dumps(summarize(Path(sys.argv[2])), indent=1))
        sys.exit(0)
    sys.exit(run())
