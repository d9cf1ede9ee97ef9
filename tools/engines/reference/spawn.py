"""Launch the rank processes of a distributed bench or sweep, and merge what they measured into one result.

The CLI process spawns ``world`` processes (torch.multiprocessing.spawn) with multirank.NO_NVLS in their
environment; rank r runs on cuda:r over NCCL, or on the CPU over gloo with its share of the cores as
torch threads. Each rank writes its record (or its failure) to a folder of the launch; the parent reads
them once all have exited. A failed rank makes spawn end the others; its failure is the result's.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from . import bench
from . import sweep as sweep_mod
from .attention import load_backend
from .multirank import NO_NVLS, RankEngine, RankFailed
from .spec import BenchSpec, SweepRun, SweepSpec, parse_spec, parse_sweep_spec


def _rank_device(requested: str, rank: int) -> torch.device:
    device = bench.resolve_device(requested)
    if device.type == "cuda":
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return device


def _bench_rank(spec: BenchSpec, device: torch.device, out_dir: Path) -> dict:
    attend = load_backend(spec.attention)
    started = time.perf_counter()
    with torch.inference_mode():
        engine = RankEngine(SweepSpec.model_construct(base=spec, runs=[SweepRun(label="bench")]), device)
        rows = []
        for batch in spec.batch_sizes:
            rows.append(engine.measure(spec, {}, batch, attend))
            bench._log(f"rank {engine.rank} batch {batch}: median step {rows[-1]['step_ms']:.3f} ms")
        trace = engine.profile(spec, attend, out_dir) if spec.profile is not None else None
    if engine.rank:
        return {"results": rows, "trace": trace}
    return bench.result_of(spec, engine.shapes, device, rows, trace, started)


def _rank_main(rank: int, world: int, command: str, spec_text: str, out_dir: str, folder: str) -> None:
    """One rank process: join the group, run the bench or the sweep, write ``rank-<rank>.json``."""
    is_sweep = command == "sweep"
    spec = parse_sweep_spec(spec_text) if is_sweep else parse_spec(spec_text)
    device = _rank_device((spec.base if is_sweep else spec).device, rank)
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{folder}/init",
                            rank=rank, world_size=world)
    record = Path(folder) / f"rank-{rank}.json"
    try:
        if is_sweep:
            progress = Path(out_dir) if out_dir and rank == 0 else None  # rank 0 keeps the progress file
            result = sweep_mod.run(spec, progress, RankEngine)
        else:
            result = _bench_rank(spec, device, Path(out_dir))
        result["device"] = bench.device_info(device)
        record.write_text(json.dumps({"ok": True, "pid": os.getpid(), "result": result}, allow_nan=True))
    except Exception as exc:
        kind, error = sweep_mod.failure_of(exc)
        traceback.print_exc()
        record.write_text(json.dumps({"ok": False, "pid": os.getpid(), "error": f"rank {rank}: {error}", "kind": kind}))
        raise
    finally:
        dist.destroy_process_group()


def _launch(command: str, spec_text: str, out_dir: Path | None, world: int) -> list[dict]:
    """Every rank's record, in rank order; raises RankFailed with the first failed rank's error."""
    os.environ.update(NO_NVLS)
    with tempfile.TemporaryDirectory(prefix="reference-ranks-") as folder:
        try:
            mp.spawn(_rank_main, args=(world, command, spec_text, str(out_dir or ""), folder), nprocs=world, join=True)
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            for rank in range(world):
                path = Path(folder) / f"rank-{rank}.json"
                record = json.loads(path.read_text()) if path.exists() else None
                if record is not None and not record["ok"]:
                    raise RankFailed(record["error"], record["kind"]) from None
            first = (str(exc).strip().splitlines() or [""])[0]
            raise RankFailed(f"a rank process failed: {first}", "error") from None
        return [json.loads((Path(folder) / f"rank-{rank}.json").read_text()) for rank in range(world)]


def merge_rows(rows: list[dict], layers_run: int, layers_model: int) -> dict:
    """One batch's row from each rank that ran it -> rank 0's row with the step time of the slowest rank
    step by step, each rank's record, the critical rank and the imbalance (see multirank)."""
    merged = {k: v for k, v in rows[0].items() if k != "rank"}
    samples = [max(step) for step in zip(*(row["rank"]["step_ms_samples"] for row in rows))]
    step_ms = statistics.median(samples)
    layer_ms = step_ms / layers_run
    merged.update(step_ms=step_ms, step_ms_samples=samples, layer_ms=layer_ms, tok_s=merged["batch"] * 1e3 / step_ms,
                  projected_step_ms=layer_ms * layers_model, tok_s_projected=merged["batch"] * 1e3 / (layer_ms * layers_model))
    ranks = []
    for row in rows:
        own = row["rank"]
        step = statistics.median(own["step_ms_samples"])
        comm = own["comm_ms_samples"]
        busy = step if comm is None else statistics.median(s - c for s, c in zip(own["step_ms_samples"], comm))
        ranks.append({"rank": own["rank"], "pid": own["pid"], "step_ms": step, "step_ms_samples": own["step_ms_samples"],
                      "comm_ms": None if comm is None else statistics.median(comm), "comm_ms_samples": comm,
                      "busy_ms": busy, "comm_share": None if comm is None else statistics.median(comm) / step})
    critical = max(ranks, key=lambda r: r["busy_ms"])
    mean_busy = statistics.fmean(r["busy_ms"] for r in ranks)
    merged.update(ranks=ranks, critical_rank=critical["rank"],
                  imbalance=critical["busy_ms"] / mean_busy - 1 if mean_busy > 0 else None)
    return merged


def _parallel(spec: BenchSpec, records: list[dict], world: int) -> dict:
    return {"tp": spec.tp, "ep": spec.ep, "world": world,
            "backend": "nccl" if records[0]["result"]["device"]["type"] == "cuda" else "gloo", "env": dict(NO_NVLS),
            "ranks": [{"rank": r, "pid": rec["pid"], "device": rec["result"]["device"]} for r, rec in enumerate(records)]}


def run_bench(spec: BenchSpec, spec_text: str, out_dir: Path) -> dict:
    """The bench at TP ``spec.tp`` in ``spec.tp`` processes: rank 0's result with rows merged over the
    ranks, ``trace`` with every rank's file (``files``, ``ranks``), and ``parallel``."""
    records = _launch("bench", spec_text, out_dir, spec.tp)
    result = records[0]["result"]
    shapes = result["shapes"]
    per_rank = [rec["result"]["results"] for rec in records]
    result["results"] = [merge_rows(list(rows), shapes["layers_run"], shapes["layers_model"]) for rows in zip(*per_rank)]
    if result["trace"] is not None:
        traces = [rec["result"]["trace"] for rec in records]
        result["trace"] = {**{k: v for k, v in traces[0].items() if k not in ("rank", "pid")},
                           "files": [t["file"] for t in traces], "eager_files": [t["eager_file"] for t in traces],
                           "ranks": [{"rank": t["rank"], "pid": t["pid"], "file": t["file"]} for t in traces]}
    result["parallel"] = _parallel(spec, records, spec.tp)
    return result


def run_sweep(spec: SweepSpec, spec_text: str, out_dir: Path | None) -> dict:
    """The sweep in ``spec.world()`` processes; each run's rows merged over the ranks that ran it."""
    world = spec.world()
    records = _launch("sweep", spec_text, out_dir, world)
    result = records[0]["result"]
    shapes = result["shapes"]
    for i, run in enumerate(result["runs"]):
        if not run["ok"]:
            continue
        per_rank = [rec["result"]["runs"][i].get("results") or [] for rec in records]
        ran = [rows for rows in per_rank if rows]
        run["results"] = [merge_rows(list(rows), shapes["layers_run"], shapes["layers_model"]) for rows in zip(*ran)]
    result["parallel"] = _parallel(spec.base, records, world)
    return result
