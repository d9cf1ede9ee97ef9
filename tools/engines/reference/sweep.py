"""A sweep: many bench runs in one process, on weights built once.

A lever sweep is a warm-up run and rounds of runs of several settings; as separate processes each
run pays the imports, the weight build and the kernels' autotune and compile again (most of a GPU
run's wall time). Here the weights are built once and every run, in the order given, gets its own
setting (attention backend, CUDA graph, engine options, environment), a fresh step and state, its own
graph capture, warm-up, timed steps and output sketch (bench.measure).

What runs share, and so what the run-to-run spread does not include: the process, the weights (one
allocation), compiled and autotuned kernels (after a setting's first run), the CUDA caching allocator,
and the clocks' state. A run that fails (out of memory, non-finite output, a missing backend, a
crash) is that run's result; the sweep goes on with the next one. A later run of a setting that
failed other than by running out of memory is not run again: it fails at once, naming the first.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from . import bench
from .attention import BackendUnavailable, load_backend
from .spec import TRITON_BACKENDS, SweepSpec


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    """``env`` set in os.environ for the run, the previous values back afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _NotRetried(RuntimeError):
    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def failure_of(exc: BaseException) -> tuple[str, str]:
    first = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, bench.NonFinite):
        kind = "non_finite"
    elif isinstance(exc, BackendUnavailable):
        kind = "missing_dependency"
    elif isinstance(exc, MemoryError) or "out of memory" in str(exc).lower():
        kind = "oom"
    else:
        kind = "error"
    return kind, f"{type(exc).__name__}: {first}"


# The file in the output folder where each run's record is written as soon as the run ends: a sweep
# process that dies (a segfault, the OOM killer) leaves the runs it finished, and the agent goes on
# from the next run in a new process (agent.engine_runs.run_sweep).
PROGRESS_FILE = "sweep_runs.jsonl"
# Fault injection for tests: a run whose environment sets this to 1 kills its own process, as a lever
# that crashes the engine would.
CRASH_ENV = "PERF_INVESTIGATOR_CRASH"


def _progress(out_dir: Path | None, record: dict) -> None:
    if out_dir is None:
        return
    with open(out_dir / PROGRESS_FILE, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


class OneProcess:
    """The sweep's weights built once in this process, measured as engine.bench measures them."""

    def __init__(self, spec: SweepSpec, device: torch.device):
        self.device = device
        self.shapes, self.weights = bench.build_weights(spec.base, device)

    def setting(self, run_spec) -> dict:
        return bench.setting_of(run_spec)

    def rows(self, run_spec, env: dict[str, str], attend) -> list[dict]:
        return [bench.measure(run_spec, self.shapes, self.weights, batch, self.device, attend)
                for batch in run_spec.batch_sizes]


def run(spec: SweepSpec, out_dir: Path | None = None, engine_of: Callable = OneProcess) -> dict:
    """Every run of ``spec`` in order; returns the result object (``ok`` true, ``runs`` one entry a
    run: label, ok, the run's setting and env, results (one row a batch size, as engine.bench's),
    wall_s; or error and kind). Weight building failures propagate (the CLI reports them). With
    ``out_dir``, the sweep's shared facts and then each run's record are appended to PROGRESS_FILE
    there as they are known, and the file is removed when the sweep ends (the result holds it all).
    ``engine_of(spec, device)`` builds the weights and measures a run (OneProcess, or a rank's)."""
    base = spec.base
    device = bench.resolve_device(base.device)
    interpreter = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    started = time.perf_counter()
    runs = []
    broken: dict[str, tuple[int, str, str]] = {}  # setting -> (run index, error, kind) of its first failure
    with torch.inference_mode():
        engine = engine_of(spec, device)
        shapes, device = engine.shapes, engine.device
        weights_s = time.perf_counter() - started
        _progress(out_dir, {"meta": _meta(base, shapes, device, interpreter, weights_s, len(spec.runs))})
        for i, entry in enumerate(spec.runs):
            run_spec = spec.spec_of(i)
            t0 = time.perf_counter()
            record = {"label": entry.label, "env": dict(entry.env), **engine.setting(run_spec),
                      "interpreter": interpreter and run_spec.attention in TRITON_BACKENDS}
            key = json.dumps([engine.setting(run_spec), entry.env], sort_keys=True)
            try:
                if key in broken:
                    # a compile or backend that broke once breaks again: not paid for again in every round
                    raise _NotRetried(f"not run: the same setting failed in run {broken[key][0] + 1} of this sweep "
                                      f"({broken[key][1]})", broken[key][2])
                with _environment(entry.env):
                    if os.environ.get(CRASH_ENV) == "1":
                        os.kill(os.getpid(), signal.SIGKILL)
                    attend = load_backend(run_spec.attention)
                    rows = engine.rows(run_spec, entry.env, attend)
                record.update(ok=True, results=rows)
                summary = ", ".join(f"b{r['batch']} {r['step_ms']:.4g} ms" for r in rows)
            except Exception as exc:  # one run's failure is its result; the next run still runs
                if isinstance(exc, _NotRetried):
                    kind, error = exc.kind, str(exc)
                else:
                    traceback.print_exc(file=sys.stderr)
                    kind, error = failure_of(exc)
                    if kind != "oom":  # out of memory may pass once the allocator is emptied; the rest repeat
                        broken[key] = (i, error, kind)
                record.update(ok=False, error=error, kind=kind)
                summary = f"failed ({kind}): {error}"
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            record["wall_s"] = time.perf_counter() - t0
            runs.append(record)
            _progress(out_dir, {"run": record})
            bench._log(f"run {i + 1}/{len(spec.runs)} {entry.label}: {summary} ({record['wall_s']:.2f} s)")
            gc.collect()
    if out_dir is not None:  # the result holds every record: the progress file is only for a process that dies
        (out_dir / PROGRESS_FILE).unlink(missing_ok=True)
    return {"ok": True, **_meta(base, shapes, device, interpreter, weights_s, len(spec.runs)), "runs": runs,
            "wall_s": time.perf_counter() - started}


def _meta(base, shapes, device, interpreter: bool, weights_s: float, n_runs: int) -> dict:
    """What every run of the sweep shares: the engine, device, versions, shapes, extrapolation, notes."""
    return {
        "engine": "reference",
        "sweep": True,
        "device": bench.device_info(device),
        "versions": bench.versions(),
        "interpreter": interpreter,  # TRITON_INTERPRET in the process; each run says whether it ran interpreted
        "shapes": shapes.model_dump(),
        "extrapolation": bench.extrapolation(shapes, base),
        "weights_s": weights_s,
        "notes": bench.notes(base, shapes, device, interpreter) + [
            f"{n_runs} runs in one process on weights built once ({weights_s:.3g} s): each run has its own "
            f"setting, state, graph capture, warm-up and timed steps; the process, weights, compiled and autotuned "
            f"kernels and the allocator are shared, so the run-to-run spread leaves out process-to-process variation"],
    }
