"""Capture the two-rank CPU traces kept in this folder (run once; the output is committed).

Two real processes joined by torch.distributed (gloo), each profiling a few decode-like steps that
end in an all-reduce, exported as SGLang names per-rank traces: ``<id>-TP-<rank>.trace.json.gz``.
torch writes ``distributedInfo`` (backend, rank, world size) into each trace.

    /tmp/venv/bin/python tests/data/trace-cpu-tp2/make_fixture.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent
PROFILE_ID = "tp2-cpu"
WORLD = 2


def _rank_main(rank: int, init_file: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    torch.manual_seed(rank)
    # Rank 1 does more work a step, so the two ranks' tables differ in a way a test can see.
    width = 64 if rank == 0 else 128
    x = torch.randn(8, width)
    w = torch.randn(width, width)

    def save(prof) -> None:
        prof.export_chrome_trace(str(OUT_DIR / f"{PROFILE_ID}-TP-{rank}.trace.json.gz"))

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
        on_trace_ready=save,
    ) as prof:
        for _ in range(4):
            with record_function("decode_layer"):
                y = torch.relu(x @ w)
                partial = y.sum(dim=1)
            dist.all_reduce(partial)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank_main, args=(str(Path(tmp) / "init"),), nprocs=WORLD, join=True)
    for rank in range(WORLD):
        print(OUT_DIR / f"{PROFILE_ID}-TP-{rank}.trace.json.gz", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
