"""Capture the H200 traces with Python stacks kept in tests/data/h200-traces-stacks/.

One run of the reference engine as the dsv4-flash investigation profiles it on a GPU (its GPU shapes,
batch 16, the sglang-triton backend: SGLang 0.5.23's ``flash_mla_sparse_decode_triton`` with its
Triton kernel, partial merge and sink), with CUDA graphs on, 3 profiled steps. The engine writes the
graph-replay trace and, beside it, the eager trace of the same step that attribution needs; both
are recorded with ``with_stack=True`` and the ``op:sparse_decode`` range around the attention call.

    python3 -m scripts.h200.capture_stack_traces OUTDIR     (scripts/h200/capture_stack_traces.sh sets it up)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BATCH, STEPS = 16, 3
NAMES = {"file": "reference-B16-cudagraph.trace.json.gz", "eager_file": "reference-B16-eager.trace.json.gz"}


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "tests/data/h200-traces-stacks")
    out.mkdir(parents=True, exist_ok=True)
    import torch

    from agent.config import load_target
    from agent.engine_runs import baseline, bench_spec
    from tools.engines.reference import bench
    from tools.engines.reference.spec import parse_spec

    if not torch.cuda.is_available():
        print("no CUDA device: these traces are the GPU's", file=sys.stderr)
        return 2
    target, _ = load_target("dsv4-flash")
    setting = baseline(target, "cuda")
    os.environ.update(setting.env)
    spec = bench_spec(target, "cuda", setting, [BATCH], {"batch": BATCH, "steps": STEPS})
    spec.update(attention="sglang-triton", cuda_graph=True)
    with tempfile.TemporaryDirectory() as tmp:
        result = bench.run(parse_spec(json.dumps(spec)), Path(tmp))
        for key, name in NAMES.items():
            if not result["trace"].get(key):
                print(f"the engine wrote no {key} trace: {result['trace']}", file=sys.stderr)
                return 1
            shutil.copyfile(Path(tmp) / result["trace"][key], out / name)
    keep = ("attention", "cuda_graph", "device", "versions", "shapes", "trace", "kernel_config", "results")
    summary = {key: result[key] for key in keep}
    summary["spec"] = spec
    summary["files"] = NAMES
    for row in summary["results"]:
        row.pop("output_sketch", None)
    (out / "bench-result.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    for name in NAMES.values():
        print(f"{out / name}: {(out / name).stat().st_size:,} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
