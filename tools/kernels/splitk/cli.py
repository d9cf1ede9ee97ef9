"""Check and timing entry points of the split-K sparse MLA decode: ``python -m tools.kernels.splitk``.

``check --batch B --topk K [--heads H] [--device cpu|cuda] [--seed S]`` draws fresh random inputs
(invalid indices, short valid lengths, a top-k that is no multiple of the tile, duplicated indices,
clustered index runs), runs the kernel into poisoned (NaN) buffers, and compares it with the float32
reference (``dsv4_cache.reference_sparse_decode``) and with the upstream SGLang kernel; one JSON
object on stdout, exit 0 when every error is within its threshold, 1 otherwise.

``bench --batch B --topk K [--heads H]`` times the kernel (and upstream unless ``--no-upstream``) with
CUDA-graph replays; one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional

import torch

from tools.kernels import upstream
from tools.kernels.splitk import declared
from tools.kernels.splitk.check import CONFIGS, VARIANTS, run_check
from tools.kernels.splitk.timing import run_bench


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.kernels.splitk", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("check", "bench"):
        p = sub.add_parser(name)
        p.add_argument("--batch", type=int, required=True)
        p.add_argument("--topk", type=int, required=True)
        p.add_argument("--heads", type=int, default=64)
        p.add_argument("--seed", type=int, default=None, help="default: drawn from the clock (fresh inputs)")
        p.add_argument("--num-splits", type=int, default=None)
        p.add_argument("--no-upstream", action="store_true")
        p.add_argument("--config", choices=sorted(CONFIGS), default="auto", help="tile shape (auto: choose_config)")
        p.add_argument("--engine-call", action="store_true",
                       help="one call in the engine's form: --extra-topk for the compressed cache, --sink")
        p.add_argument("--extra-topk", type=int, default=None, help="with --engine-call: the compressed cache's index width")
        p.add_argument("--sink", action="store_true", help="with --engine-call: pass an attention sink")
        p.add_argument("--plan-arch", type=int, default=None, metavar="SM",
                       help="plan and compile as a GPU of this compute capability would (120: the sm_120 family; on a "
                            "Hopper GPU with Triton's wgmma lowering off), on whatever device this runs")
        if name == "check":
            p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
            p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated of {','.join(VARIANTS)}")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.plan_arch is not None:
        # before anything is compiled: Triton reads the wgmma switch as it compiles (declared.py)
        box = None
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            box = 10 * major + minor
        try:
            os.environ.update(declared.plan_env(args.plan_arch, box))
        except ValueError as exc:
            print(str(exc), file=sys.stderr)
            return 2
    seed = args.seed if args.seed is not None else time.time_ns() % (2**31)
    if args.batch < 1 or args.topk < 1 or args.heads < 1:
        print("batch, topk and heads must be >= 1", file=sys.stderr)
        return 2
    engine_call = {"extra_topk": args.extra_topk, "sink": args.sink} if args.engine_call else None
    if args.command == "check":
        if args.device == "cpu" and not upstream.interpreter_active():
            print("--device cpu needs TRITON_INTERPRET=1 in the environment", file=sys.stderr)
            return 2
        variants = ("engine_call",) if engine_call else tuple(v for v in args.variants.split(",") if v)
        unknown = [v for v in variants if v not in VARIANTS and v != "engine_call"]
        if unknown:
            print(f"unknown variants {unknown}", file=sys.stderr)
            return 2
        result = run_check(
            args.batch, args.topk, args.heads, args.device, seed, variants=variants,
            with_upstream=not args.no_upstream, num_splits=args.num_splits, config=CONFIGS[args.config],
            engine_call=engine_call,
        )  # fmt: skip
        print(json.dumps(result, sort_keys=True))
        return 0 if result["ok"] else 1
    if not torch.cuda.is_available():
        print("bench needs a CUDA device", file=sys.stderr)
        return 2
    result = run_bench(args.batch, args.topk, args.heads, seed, not args.no_upstream, args.num_splits,
                       CONFIGS[args.config], engine_call)  # fmt: skip
    result["device_name"] = torch.cuda.get_device_name()
    print(json.dumps(result, sort_keys=True))
    return 0

