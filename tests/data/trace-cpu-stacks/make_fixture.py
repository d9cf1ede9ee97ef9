"""Capture the CPU trace with Python stacks kept in this folder (run once; the output is committed).

The reference engine as the CPU investigation runs it (dsv4-flash's CPU shapes, the sglang-triton
backend: SGLang 0.5.23's ``flash_mla_sparse_decode_triton`` with its kernel under the Triton
interpreter), profiled by the engine's own ``bench.run`` with ``with_stack=True`` and the
``op:sparse_decode`` range around the attention call. Two profiled steps keep the file small.

    TRITON_INTERPRET=1 .venv/bin/python tests/data/trace-cpu-stacks/make_fixture.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OUT = HERE / "reference-cpu-stacks.trace.json.gz"
BATCH, STEPS = 4, 2


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1 so the Triton kernels run on the CPU", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from agent.config import load_target
    from agent.engine_runs import baseline, bench_spec
    from tools.engines.reference import bench
    from tools.engines.reference.spec import parse_spec

    target, _ = load_target("dsv4-flash")
    setting = baseline(target, "cpu")
    os.environ.update(setting.env)
    spec = bench_spec(target, "cpu", setting, [BATCH], {"batch": BATCH, "steps": STEPS})
    with tempfile.TemporaryDirectory() as tmp:
        result = bench.run(parse_spec(json.dumps(spec)), Path(tmp))
        shutil.copyfile(Path(tmp) / result["trace"]["file"], OUT)
    (HERE / "bench-result.json").write_text(json.dumps(
        {key: result[key] for key in ("attention", "interpreter", "shapes", "trace", "versions", "device")},
        indent=2, sort_keys=True) + "\n")
    print(OUT, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
