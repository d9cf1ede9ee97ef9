"""Nsight Compute on the box: one launch of a kernel, inside one eager decode step of the reference engine.

``python -m tools.kernel_source.ncu_run measure --kernel NAME --spec SPEC_JSON --out DIR [--launch-skip K]``
prints one JSON object. On a box with ``ncu`` on PATH and an NVIDIA GPU it runs::

    ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight
        --section WarpStateStats --nvtx --nvtx-include ncu_measure/ --kernel-name regex:^NAME$
        --launch-skip K --launch-count 1 --export REP PYTHON -m tools.kernel_source.ncu_run target ...

and exports the report as CSV, both pages (``--page raw``: every metric, the warp-stall reasons among
them; ``--page details``: the sections as the GUI shows them, with their rules) into DIR, keeps the
raw page on the box (``box_csv``: a later ``kernel.grid --ncu-csv`` reads it there), and summarizes it
(``tools.kernel_source.ncu.summarize``). Where ncu or the GPU is missing it prints ``measured: false``
with ``why`` ("not measured: ...") and exits 0: the box lacks the instrument, nothing failed. A run
that fails (ncu's error, the engine's, no launch profiled) exits 1 with ``ok: false``.

``target`` is what ncu runs: the reference engine's own ``bench`` command on the given spec, with an
NVTX range ``ncu_measure`` pushed around the timed steps only, so that the autotuner's benchmark
launches and the first step's lazy init, both before it, are never the launch profiled. A spec of one
step and one warm-up (``time_steps`` then runs no warm-up of its own) puts exactly one decode step in
the range; ``--launch-skip K`` picks the K-th launch of the kernel in it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECTIONS = ("LaunchStats", "Occupancy", "SpeedOfLight", "WarpStateStats")
RANGE = "ncu_measure"
RAW_CSV = "ncu_raw.csv"
DETAILS_CSV = "ncu_details.csv"
# Where the raw page stays on the box after the call (the call's own out dir is removed): content-named,
# so the path a later call is given is a function of what was measured.
KEEP_DIR = Path(tempfile.gettempdir()) / "perf-investigator-ncu"
NCU_TIMEOUT_S = 480
EXPORT_TIMEOUT_S = 60


def function_name(name: str) -> str:
    """A kernel's function name from its name as the PyTorch profiler gives it: a demangled C++ name
    loses its return type, namespaces, template arguments and parameters; a Triton kernel's name is
    its function name already."""
    base = re.sub(r"^void\s+", "", name.strip())
    base = re.split(r"[<(]", base, maxsplit=1)[0]
    return base.rsplit("::", 1)[-1].strip()


def kernel_name_base(name: str) -> str:
    """What ncu matches the filter against: the mangled name for a name the profiler left mangled
    (``_Z...``, as CUTLASS kernels come), else the function name."""
    return "mangled" if name.startswith("_Z") else "function"


def kernel_regex(name: str) -> str:
    """ncu's ``--kernel-name`` filter for the kernel, matched whole against ``kernel_name_base``'s name."""
    return f"regex:^{re.escape(name if kernel_name_base(name) == 'mangled' else function_name(name))}$"


def ncu_command(ncu: str, python: str, kernel: str, spec: str, out: Path, report: Path, launch_skip: int) -> list[str]:
    """The profiling command line: the four sections, unmodified clocks, one launch of ``kernel`` in
    the NVTX range, the target run under the same interpreter."""
    argv = [ncu, "--clock-control", "none"]
    for section in SECTIONS:
        argv += ["--section", section]
    argv += ["--nvtx", "--nvtx-include", f"{RANGE}/", "--kernel-name-base", kernel_name_base(kernel), "--kernel-name", kernel_regex(kernel),
             "--launch-skip", str(launch_skip), "--launch-count", "1", "--export", str(report), "--force-overwrite",
             python, "-m", "tools.kernel_source.ncu_run", "target", "--spec", spec, "--out", str(out)]
    return argv


def export_command(ncu: str, report: Path, page: str) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", page]


def unavailable() -> str | None:
    """Why this box cannot run Nsight Compute (None when it can): ncu on PATH and a GPU nvidia-smi lists."""
    reasons = []
    if shutil.which("ncu") is None:
        reasons.append("ncu is not on PATH")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        reasons.append("no NVIDIA GPU (nvidia-smi is not on PATH)")
    else:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            if listed.returncode != 0 or "GPU" not in listed.stdout:
                reasons.append("no NVIDIA GPU (nvidia-smi -L lists none)")
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"no NVIDIA GPU (nvidia-smi -L failed: {exc})")
    return "not measured: " + "; ".join(reasons) if reasons else None


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _keep(path: Path) -> Path:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    KEEP_DIR.mkdir(parents=True, exist_ok=True)
    kept = KEEP_DIR / f"{digest}-{path.name}"
    if not kept.exists():
        shutil.copyfile(path, kept)
    return kept


def _engine_summary(result: dict | None) -> dict | None:
    """What the engine reported for its step under ncu: enough to see it ran what was asked."""
    if result is None:
        return None
    rows = result.get("results") or []
    return {"ok": result.get("ok"), "error": result.get("error"), "attention": result.get("attention"),
            "cuda_graph": result.get("cuda_graph"), "device": (result.get("device") or {}).get("name"),
            "batches": [r.get("batch") for r in rows], "attention_calls": rows[0].get("attention_calls") if rows else None,
            "step_ms_under_ncu": rows[0].get("step_ms") if rows else None}


def measure(kernel: str, spec: str, out: Path, launch_skip: int = 0) -> tuple[int, dict]:
    """Profile one launch of ``kernel`` as the module doc says; returns (exit code, JSON object)."""
    base = {"kernel": kernel, "kernel_regex": kernel_regex(kernel), "launch_skip": launch_skip, "sections": list(SECTIONS),
            "nvtx_range": RANGE}
    why = unavailable()
    if why is not None:
        return 0, {"ok": True, "measured": False, "why": why, **base}
    ncu = shutil.which("ncu")
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    with tempfile.TemporaryDirectory(prefix="ncu-") as scratch:
        report = Path(scratch) / "ncu"
        argv = ncu_command(ncu, sys.executable, kernel, spec, Path(scratch) / "engine", report, launch_skip)
        started = time.perf_counter()
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=NCU_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return 1, {"ok": False, "measured": False, "error": f"ncu timed out after {NCU_TIMEOUT_S} s", "argv": argv, **base}
        profile_s = time.perf_counter() - started
        engine = _engine_summary(_last_json(run.stdout))
        info = {**base, "argv": argv, "ncu_version": version[-1] if version else None, "profile_s": round(profile_s, 3),
                "engine": engine, "ncu_log_tail": _tail("\n".join(l for l in (run.stdout + "\n" + run.stderr).splitlines()
                                                                  if l.startswith("==")))}
        if run.returncode != 0 or not (engine or {}).get("ok"):
            reason = (engine or {}).get("error") or _tail(run.stderr, 3) or f"exit {run.returncode}"
            return 1, {"ok": False, "measured": False, "error": f"the profiled engine run failed: {reason}", **info}
        rep = report.with_suffix(".ncu-rep")
        if not rep.is_file():
            return 1, {"ok": False, "measured": False, "error": f"ncu wrote no report: no launch of {kernel} in the "
                                                                 f"{RANGE} range was profiled", **info}
        for page, name in (("raw", RAW_CSV), ("details", DETAILS_CSV)):
            exported = subprocess.run(export_command(ncu, rep, page), capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S)
            if exported.returncode != 0:
                return 1, {"ok": False, "measured": False, "error": f"ncu --import --page {page} failed: {_tail(exported.stderr, 3)}", **info}
            (out / name).write_text(exported.stdout)
    from .ncu import summarize

    summary = summarize(out / RAW_CSV, kernel=kernel if kernel_name_base(kernel) == "mangled" else function_name(kernel))
    if not summary.get("measured"):
        return 1, {"ok": False, "measured": False, "error": summary.get("error") or summary.get("why"), **info}
    kept = _keep(out / RAW_CSV)
    summary["source"] = RAW_CSV  # the artifact's name; where it stays on the box is box_csv
    return 0, {"ok": True, "measured": True, **info, "csv": {"raw": RAW_CSV, "details": DETAILS_CSV}, "box_csv": str(kept),
               "summary": summary}


def target(spec: str, out: Path) -> int:
    """The engine's ``bench`` command, with the NVTX range around its timed steps (see the module doc)."""
    import torch

    from tools.engines.reference import bench
    from tools.engines.reference.__main__ import main as bench_main

    original = bench.time_steps

    def in_range(step, device, steps, warmup, *rest, **options):
        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        try:
            return original(step, device, steps, 0, *rest, **options)
        finally:
            torch.cuda.nvtx.range_pop()

    bench.time_steps = in_range
    return bench_main(["bench", "--spec", spec, "--out", str(out)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kernel_source.ncu_run", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="profile one launch of a kernel; one JSON object on stdout")
    m.add_argument("--kernel", required=True, help="the kernel's name as the profile's trace names it")
    m.add_argument("--spec", required=True, help="the reference engine's bench spec (JSON)")
    m.add_argument("--out", required=True, type=Path, help="directory for the CSV exports")
    m.add_argument("--launch-skip", type=int, default=0, help="launches of the kernel in the range to skip")
    t = sub.add_parser("target", help="(run by ncu) the engine's bench with the NVTX range")
    t.add_argument("--spec", required=True)
    t.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.command == "target":
        return target(args.spec, args.out)
    if args.launch_skip < 0:
        print(json.dumps({"ok": False, "error": "--launch-skip must be >= 0"}))
        return 2
    code, result = measure(args.kernel, args.spec, args.out, args.launch_skip)
    print(json.dumps(result, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
