"""The stand-in's rank processes: each builds its rank of the reference engine and runs the scheduler's iterations.

One process per tensor-parallel rank (``--tp-size``), started by the server (multiprocessing's spawn, or fork on
a CPU: pool.start_method), as SGLang runs one scheduler process per rank. With more than one rank they join one
torch.distributed group (gloo on the CPU, NCCL on GPUs) and run the reference engine's distributed decode
step (tools/engines/reference/multirank.py RankEngine: sharded weights, the all-reduces and, with ep > 1,
the all-to-all of SGLang's layout); alone, rank 0 runs the reference engine's single-process step.

The server sends every rank the same messages over its pipe, in the same order; each rank answers each
one. ``iterate``: the planted scheduler overhead (a ``standin:scheduler_overhead`` range), then one forward
step per batch size listed (a prefill is one step at the admitted requests' batch: the reference engine
has no prefill kernels), each decode step followed by the planted eager-decode delay when asked (a
``standin:eager_launch_delay`` range); the answer has each step's milliseconds and, on rank 0,
each step's per-request token seeds (the argmax of the step's output row). ``profile_start`` /
``profile_stop``: a torch.profiler around the iterations between them, written by this rank to its own
file (the name the server gives it: SGLang's rule), so every trace comes from the process that ran it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
import traceback
from pathlib import Path

OVERHEAD_RANGE = "standin:scheduler_overhead"
EAGER_RANGE = "standin:eager_launch_delay"


def _die_with_parent() -> None:
    """SIGKILL this process when the server dies, however it dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the pipe's EOF still ends the loop


class _Engine:
    """This rank's weights and a decode step per batch size (built on first use, kept)."""

    def __init__(self, spec, device, distributed: bool):
        from tools.engines.reference import bench, model
        from tools.engines.reference.attention import load_backend

        self.spec, self.device = spec, device
        self.attend = load_backend(spec.attention)
        self.impl = model.step_impl(spec.moe, spec.compile)
        if distributed:
            from tools.engines.reference.multirank import RankEngine
            from tools.engines.reference.spec import SweepRun, SweepSpec

            self.ranks = RankEngine(SweepSpec.model_construct(base=spec, runs=[SweepRun(label="serve")]), device)
            self.shapes, self.weights = self.ranks.use(spec, {})
            self._make = self.ranks.make_step
        else:
            self.shapes, self.weights = bench.build_weights(spec, device)
            self._make = bench.build_step
        self._steps: dict = {}

    def step(self, batch: int):
        if batch not in self._steps:
            self._steps[batch] = self._make(self.spec, self.shapes, self.weights, batch, self.device, self.attend,
                                            self.impl)[0]
        return self._steps[batch]()


class _Profile:
    """A torch.profiler over the iterations between profile_start and profile_stop."""

    def __init__(self, device, msg: dict):
        import torch

        wanted = {"CPU": torch.profiler.ProfilerActivity.CPU, "GPU": torch.profiler.ProfilerActivity.CUDA}
        activities = [wanted[a] for a in msg["activities"] if a in wanted]
        if device.type != "cuda":
            activities = [a for a in activities if a != torch.profiler.ProfilerActivity.CUDA]
        # A schedule that always records makes the profiler mark steps: each forward step ends its
        # ProfilerStep#N range (step() after it), as the reference engine's traces mark theirs, so a CPU
        # trace's host ranges stay the work inside the steps (tools/trace/host.py skips ProfilerStep#N).
        self.prof = torch.profiler.profile(activities=activities or [torch.profiler.ProfilerActivity.CPU],
                                           with_stack=msg["with_stack"], record_shapes=msg["record_shapes"],
                                           schedule=lambda _step: torch.profiler.ProfilerAction.RECORD)
        self.prof.start()

    def step(self) -> None:
        self.prof.step()

    def stop(self, path: Path) -> str:
        self.prof.stop()
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole under a name no trace glob matches, then renamed: a reader never sees half a file
        # (the name ends in .gz: torch gzips the export by the suffix).
        partial = path.with_name(f".{path.name}.partial.gz")
        self.prof.export_chrome_trace(str(partial))
        os.replace(partial, path)
        return str(path)


def _sleep_in_range(name: str, ms: float) -> None:
    import torch

    if ms > 0:
        with torch.profiler.record_function(name):
            time.sleep(ms / 1e3)


def _iterate(engine: _Engine, msg: dict, rank: int, profile: _Profile | None) -> dict:
    import torch

    _sleep_in_range(OVERHEAD_RANGE, msg["overhead_ms"])
    step_ms, seeds = [], []
    for batch in msg["batches"]:
        t0 = time.perf_counter()
        out = engine.step(batch)
        if engine.device.type == "cuda":
            torch.cuda.synchronize(engine.device)
        if msg["kind"] == "decode":
            _sleep_in_range(EAGER_RANGE, msg["eager_ms"])
        step_ms.append((time.perf_counter() - t0) * 1e3)
        if profile is not None:
            profile.step()
        if rank == 0:
            if not bool(torch.isfinite(out).all()):
                raise FloatingPointError(f"{msg['kind']} step output at batch {batch} is not finite")
            seeds.append(out.float().argmax(dim=1).tolist())
    return {"ok": True, "step_ms": step_ms, "seeds": seeds}


def _serve(engine: _Engine, conn, rank: int) -> None:
    profile = None
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return  # the server is gone
        op = msg["op"]
        if op == "exit":
            return
        if op == "iterate":
            reply = _iterate(engine, msg, rank, profile)
        elif op == "profile_start":
            profile = _Profile(engine.device, msg)
            reply = {"ok": True}
        elif op == "profile_stop":
            reply = {"ok": True, "file": profile.stop(Path(msg["files"][rank]))}
            profile = None
        else:
            raise ValueError(f"unknown op {op!r}")
        conn.send(reply)


def _load_sglang_plugins() -> None:
    """SGLang's general plugins, loaded as SGLang's ``run_scheduler_process`` loads them in each rank before
    its model is built (a plugin's hooks, tools/engines/sglang/splitk_plugin.py's among them, then replace
    what this rank calls). Only where an entry point of the group is installed: importing SGLang's loader
    costs seconds a rank on a 2-core box, and without one it would load nothing."""
    from importlib.metadata import entry_points

    if entry_points(group="sglang.srt.plugins"):
        from sglang.srt.plugins import load_plugins

        load_plugins()


def rank_main(rank: int, world: int, spec_json: str, conn, init_dir: str) -> None:
    """A rank process: build the rank, say ready (or why not), then serve the server's messages."""
    _die_with_parent()
    try:
        import torch
        import torch.distributed as dist

        from tools.engines.reference import bench
        from tools.engines.reference.spec import parse_spec

        spec = parse_spec(spec_json)
        _load_sglang_plugins()
        device = bench.resolve_device(spec.device)
        if device.type == "cuda":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        if world > 1:
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{init_dir}/init",
                                    rank=rank, world_size=world)
        with torch.inference_mode():
            engine = _Engine(spec, device, world > 1)
            conn.send({"ok": True, "rank": rank, "pid": os.getpid(), "device": bench.device_info(device),
                       "shapes": engine.shapes.model_dump()})
            _serve(engine, conn, rank)
        # Asked to exit (or the server is gone): nothing is left to write, and the process group's and the
        # interpreter's teardown take seconds that every server stop would pay.
        os._exit(0)
    except Exception as exc:  # the server logs it and dies, as SGLang does when a scheduler dies
        try:
            conn.send({"ok": False, "rank": rank, "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()})
        except (BrokenPipeError, OSError):
            pass
