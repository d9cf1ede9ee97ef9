"""Benchmark: summarize a ~1 GB (uncompressed) trace built from a real H200 trace, against HTA.

Goal (issue 3): on the 2-core CI machine, tools.trace summarizes a trace of about 1 GB uncompressed
in under 30 s and under 2 GB peak memory; HTA's kernel breakdown runs on the same file in the same
run and the ratio is reported.

The big trace is the real capture's events repeated with time offsets (and correlation / External
id / flow ids shifted so each copy stays self-consistent), written to a temporary directory and
deleted afterwards. Each measurement runs in a fresh child process that reports its own wall time
and peak RSS (resource.getrusage, including its own children). The big file's summary is checked
against the source's (every kernel's calls and time multiplied by the number of copies) before any
timing counts.

    /tmp/venv/bin/python -m benchmarks.trace_parse            # full run, writes benchmarks/results/trace_parse.json
    /tmp/venv/bin/python -m benchmarks.trace_parse --target-mb 50 --repeats 1 --out /tmp/x.json   # quick look
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO / "tests/data/h200-traces/dsv4-like-B16-topk512.trace.json.gz"
DEFAULT_OUT = REPO / "benchmarks/results/trace_parse.json"
GOAL_SECONDS = 30.0
GOAL_PEAK_BYTES = 2 * 1024**3
_ID_ARGS = ("correlation", "External id")


# ---- building the big trace -------------------------------------------------------------------


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f)


def _shifted(event: dict, copy: int, dt: float, id_step: int, step_count: int) -> dict:
    if copy == 0:
        return event
    out = dict(event)
    if "ts" in out and out.get("ph") != "M":
        out["ts"] = round(out["ts"] + copy * dt, 3)
    if out.get("ph") in ("s", "f") and isinstance(out.get("id"), int):
        out["id"] = out["id"] + copy * id_step
    args = out.get("args")
    if isinstance(args, dict) and any(k in args for k in _ID_ARGS):
        args = dict(args)
        for key in _ID_ARGS:
            if isinstance(args.get(key), int) and args[key] >= 0:
                args[key] = args[key] + copy * id_step
        out["args"] = args
    name = out.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        out["name"] = f"ProfilerStep#{int(name[13:]) + copy * step_count}"
    return out


def build_big_trace(source: Path, dest: Path, target_bytes: int) -> dict:
    """Write source's events repeated until the uncompressed text reaches target_bytes (gzip, level 1)."""
    trace = _load(source)
    events = trace["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + e["dur"] for e in timed)
    dt = math.ceil(end - start) + 1000.0
    ids = [e["args"][k] for e in events if isinstance(e.get("args"), dict) for k in _ID_ARGS if isinstance(e["args"].get(k), int)]
    ids += [e["id"] for e in events if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int)]
    id_step = max(ids) + 1
    step_count = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    meta = {k: v for k, v in trace.items() if k != "traceEvents"}
    written = 0
    copies = 0
    with gzip.open(dest, "wt", compresslevel=1, encoding="utf-8") as out:
        head = json.dumps(meta)[:-1] + ', "traceEvents": [\n'
        out.write(head)
        written += len(head)
        first = True
        while written < target_bytes:
            for event in events:
                text = ("" if first else ",\n") + json.dumps(_shifted(event, copies, dt, id_step, step_count))
                first = False
                out.write(text)
                written += len(text)
            copies += 1
        out.write("\n]}\n")
        written += 4
    return {"copies": copies, "events": copies * len(events), "uncompressed_bytes": written, "gzip_bytes": dest.stat().st_size}


# ---- child processes ---------------------------------------------------------------------------


def _usage() -> dict:
    # ru_maxrss is in KiB on Linux. Worker processes (ours for big files, HTA's parser pool) run
    # beside this one, so own + largest child is the bound reported; CPU time includes children.
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "peak_rss_bytes": (own.ru_maxrss + kids.ru_maxrss) * 1024,
        "peak_rss_self_bytes": own.ru_maxrss * 1024,
        "peak_rss_largest_child_bytes": kids.ru_maxrss * 1024,
        "cpu_seconds": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
    }


def _child(mode: str, path: str) -> None:
    t0 = time.perf_counter()
    if mode == "ours":
        from tools.trace import summarize

        summary = summarize([path])
        t1 = time.perf_counter()
        result = {
            "kernels": {row.name: [row.calls, row.total_us] for row in summary.merged.kernels},
            "kernel_time_us": summary.merged.kernel_time_us,
            "steps": summary.merged.steps,
        }
    elif mode == "ijson-items":
        import ijson

        count = 0
        with gzip.open(path, "rb") as f:
            for _ in ijson.items(f, "traceEvents.item", use_float=True):
                count += 1
        t1 = time.perf_counter()
        result = {"events": count}
    elif mode == "reader-exact":
        from tools.trace.events import iter_events

        count = sum(1 for _ in iter_events(path))
        t1 = time.perf_counter()
        result = {"events": count}
    elif mode == "reader-records":
        from tools.trace.events import iter_record_batches

        count = sum(len(batch) for batch in iter_record_batches(path))
        t1 = time.perf_counter()
        result = {"events": count}
    elif mode == "hta":
        import logging

        logging.disable(logging.WARNING)
        from hta.trace_analysis import TraceAnalysis

        analysis = TraceAnalysis(trace_files={0: path}, include_last_profiler_step=True)
        _, kernels = analysis.get_gpu_kernel_breakdown(
            visualize=False, num_kernels=10**9, duration_ratio=1.0, include_memory_kernels=True
        )
        t1 = time.perf_counter()
        result = {"kernel_names": int(kernels["name"].nunique())}
    else:
        raise SystemExit(f"unknown child mode {mode}")
    result.update({"seconds": t1 - t0, **_usage()})
    print(json.dumps(result))


def run_child(mode: str, path: Path, timeout: float) -> dict:
    """One measurement in a fresh interpreter; a failure is returned as such, not raised."""
    cmd = [sys.executable, "-m", "benchmarks.trace_parse", "--child", mode, str(path)]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return {"ok": False, "error": f"exit {proc.returncode}: {' | '.join(tail)}", "process_seconds": wall}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # The machine may be shared: the 1-minute load average around a run says how much.
    result.update({"ok": True, "process_seconds": wall, "loadavg_1min_before": load_before, "loadavg_1min_after": os.getloadavg()[0]})
    return result


# ---- the run -----------------------------------------------------------------------------------


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for package in ("msgspec", "ijson", "numpy", "pandas", "holistictraceanalysis"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    import ijson

    out["ijson_backend"] = ijson.backend
    return out


def _machine() -> dict:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_total = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(), "mem_total_bytes": mem_total}


def _git_rev() -> str | None:
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO)
    except OSError:
        return None
    rev = proc.stdout.strip()
    if proc.returncode != 0 or not rev:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    return rev + ("-dirty" if dirty else "")


def _check_against_source(source_result: dict, big_result: dict, copies: int) -> list[str]:
    """The big trace is `copies` copies of the source: every kernel's calls and time scale by that."""
    problems = []
    if set(source_result["kernels"]) != set(big_result["kernels"]):
        problems.append("kernel names differ between the source and the big trace")
    for name, (calls, total) in source_result["kernels"].items():
        big_calls, big_total = big_result["kernels"].get(name, [0, 0.0])
        if big_calls != calls * copies or not math.isclose(big_total, total * copies, rel_tol=1e-9, abs_tol=1e-6):
            problems.append(f"{name[:60]}: {big_calls} calls / {big_total} us, expected {calls * copies} / {total * copies}")
    if big_result["steps"] != source_result["steps"] * copies:
        problems.append(f"steps {big_result['steps']} != {source_result['steps']} x {copies}")
    return problems


def _measure(args: argparse.Namespace, report: dict) -> None:
    """Build the big trace in a temporary directory, check our summary of it against the source's,
    time each reader and HTA on it, and record it all in ``report`` (the directory is removed after)."""
    tmp = Path(tempfile.mkdtemp(prefix="trace_parse_"))
    try:
        big = tmp / "big-TP-0.trace.json.gz"
        t0 = time.perf_counter()
        report["trace"] = build_big_trace(args.source, big, int(args.target_mb * 1e6))
        report["trace"]["build_seconds"] = time.perf_counter() - t0
        print(f"built {report['trace']}", file=sys.stderr)

        source_result = run_child("ours", args.source, timeout=600)
        if not source_result["ok"]:
            raise SystemExit(f"summarizing the source failed: {source_result['error']}")

        ours = []
        for i in range(args.repeats):
            result = run_child("ours", big, timeout=3600)
            print(f"ours run {i}: {result.get('seconds')} s, {result.get('peak_rss_bytes')} B, ok={result['ok']}", file=sys.stderr)
            if result["ok"]:
                problems = _check_against_source(source_result, result, report["trace"]["copies"])
                if problems:
                    result["ok"] = False
                    result["error"] = "wrong summary: " + "; ".join(problems[:5])
            ours.append({k: v for k, v in result.items() if k != "kernels"})
        report["ours"] = ours
        # The reading alone, three ways: our fast records (what summarize uses), our exact per-event
        # decoder (json's C scanner, every field), and ijson's items (yajl2_c, every field).
        report["reader_records_only"] = run_child("reader-records", big, timeout=3600)
        report["reader_exact_only"] = run_child("reader-exact", big, timeout=3600)
        report["ijson_items_only"] = run_child("ijson-items", big, timeout=3600)
        print(
            f"records {report['reader_records_only'].get('seconds')} s, exact {report['reader_exact_only'].get('seconds')} s, "
            f"ijson items {report['ijson_items_only'].get('seconds')} s",
            file=sys.stderr,
        )
        hta = []
        if not args.no_hta:
            for i in range(args.hta_repeats):
                result = run_child("hta", big, timeout=args.hta_timeout)
                print(f"hta run {i}: {result}", file=sys.stderr)
                hta.append(result)
        report["hta"] = hta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _summary(report: dict) -> dict:
    """Medians of the successful runs, whether the goal is met, and HTA's times over ours."""
    ok_ours = [r for r in report["ours"] if r["ok"]]
    ok_hta = [r for r in report["hta"] if r["ok"]]
    summary: dict = {"ours_all_ok": len(ok_ours) == len(report["ours"]) and bool(ok_ours)}
    if ok_ours:
        summary["ours_median_seconds"] = statistics.median(r["seconds"] for r in ok_ours)
        summary["ours_median_process_seconds"] = statistics.median(r["process_seconds"] for r in ok_ours)
        summary["ours_max_peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in ok_ours)
        summary["ours_median_cpu_seconds"] = statistics.median(r["cpu_seconds"] for r in ok_ours)
        summary["ours_mb_per_second"] = report["trace"]["uncompressed_bytes"] / 1e6 / summary["ours_median_seconds"]
        summary["goal_met"] = (
            summary["ours_all_ok"]
            and summary["ours_median_process_seconds"] < GOAL_SECONDS
            and summary["ours_max_peak_rss_bytes"] < GOAL_PEAK_BYTES
        )
    if ok_hta and ok_ours:
        summary["hta_median_seconds"] = statistics.median(r["seconds"] for r in ok_hta)
        summary["hta_median_cpu_seconds"] = statistics.median(r["cpu_seconds"] for r in ok_hta)
        summary["hta_max_peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in ok_hta)
        summary["hta_over_ours_seconds"] = summary["hta_median_seconds"] / summary["ours_median_seconds"]
        summary["hta_over_ours_peak_rss"] = summary["hta_max_peak_rss_bytes"] / summary["ours_max_peak_rss_bytes"]
    elif report["hta"]:
        summary["hta_failed"] = [r.get("error") for r in report["hta"]]
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--target-mb", type=float, default=1000.0, help="uncompressed size of the big trace (MB, 1e6 bytes)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of our parser (median reported)")
    parser.add_argument("--hta-repeats", type=int, default=1)
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--hta-timeout", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0

    report: dict = {
        "benchmark": "trace_parse",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "versions": _versions(),
        "git_rev": _git_rev(),
        "source": str(args.source.relative_to(REPO) if args.source.is_relative_to(REPO) else args.source),
        "goal": {"seconds": GOAL_SECONDS, "peak_rss_bytes": GOAL_PEAK_BYTES},
    }
    _measure(args, report)
    summary = report["summary"] = _summary(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=2), file=sys.stderr)
    return 0 if summary.get("goal_met") else 1


if __name__ == "__main__":
    raise SystemExit(main())
