"""``python -m tools.engines.reference bench --spec SPEC_JSON|@file --out DIR``
``python -m tools.engines.reference sweep --spec SWEEP_JSON|@file``
``python -m tools.engines.reference check --spec SPEC_JSON|@file``

A spec with ``distributed: true`` runs in one process per rank (spawn.py); the JSON comes from this one.
Prints exactly one JSON object on stdout (progress goes to stderr). Exit 0 ok; 2 bad input (bad
spec, a device or backend this box lacks: one-line message on stderr, and an ``ok: false`` object);
1 failure (``ok: false`` with ``kind``: oom, non_finite, error).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from tools.box_cli import BadInput, Parser, emit

from .spec import TRITON_BACKENDS, SpecError, parse_spec, parse_sweep_spec


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m tools.engines.reference", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    bench = sub.add_parser("bench", help="time decode steps per batch size; optionally write a trace")
    bench.add_argument("--spec", required=True, help="JSON object, or @path to a JSON file")
    bench.add_argument("--out", required=True, type=Path, help="directory for the trace")
    sweep = sub.add_parser("sweep", help="many bench runs in order in one process, on weights built once")
    sweep.add_argument("--spec", required=True, help="JSON object (spec.SweepSpec), or @path to a JSON file")
    sweep.add_argument("--out", type=Path, help="folder for the runs' records as they end (sweep.PROGRESS_FILE)")
    check = sub.add_parser("check", help="compare the spec's attention backend with torch and float32")
    check.add_argument("--spec", required=True, help="JSON object, or @path to a JSON file")
    return parser


def _prepare_device(requested: str, attentions: set[str]) -> None:
    """Refuse a device this box lacks; on the CPU, put Triton in interpreter mode before it loads."""
    import torch

    cuda = torch.cuda.is_available()
    if requested == "cuda" and not cuda:
        raise BadInput("device cuda requested but torch.cuda.is_available() is false on this box", "bad_input")
    on_cpu = requested == "cpu" or (requested == "auto" and not cuda)
    if on_cpu and attentions & set(TRITON_BACKENDS) and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        if "triton" in sys.modules:
            raise RuntimeError("triton was imported before TRITON_INTERPRET could be set")
        os.environ["TRITON_INTERPRET"] = "1"


def _gpu_only(spec) -> str | None:
    """The first option of ``spec`` that needs a CUDA device, or None."""
    if spec.cuda_graph:
        return "cuda_graph"
    return "delay_frac" if spec.delay_frac else None


def _check_ranks_fit(device, world: int) -> None:
    """NCCL runs one rank a GPU: a distributed run on CUDA needs ``world`` of them."""
    import torch

    if device.type == "cuda" and torch.cuda.device_count() < world:
        raise BadInput(f"bad spec: distributed TP{world} needs {world} GPUs (NCCL runs one rank a GPU), this box has "
                        f"{torch.cuda.device_count()}", "bad_input")


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        sweep = parse_sweep_spec(args.spec) if args.command == "sweep" else None
        spec = sweep.base if sweep else parse_spec(args.spec)
    except SpecError as exc:
        raise BadInput(str(exc), "bad_input") from None
    specs = [sweep.spec_of(i) for i in range(len(sweep.runs))] if sweep else [spec]
    needs_gpu = next((name for name in map(_gpu_only, specs) if name), None)
    if needs_gpu and spec.device == "cpu":
        raise BadInput(f"bad spec: {needs_gpu}: needs a CUDA device, spec device is cpu", "bad_input")
    _prepare_device(spec.device, {s.attention for s in specs})

    from . import bench, check, spawn
    from . import sweep as sweep_mod
    from .attention import BackendUnavailable

    if needs_gpu and bench.resolve_device(spec.device).type != "cuda":
        raise BadInput(f"bad spec: {needs_gpu}: needs a CUDA device, none on this box", "bad_input")
    distributed = spec.distributed and args.command != "check"
    if distributed:
        _check_ranks_fit(bench.resolve_device(spec.device), sweep.world() if sweep else spec.tp)
    spec_text = args.spec if not args.spec.startswith("@") else Path(args.spec[1:]).read_text()
    try:
        if args.command == "check":
            result = check.run(spec)
        elif sweep:
            if args.out is not None:
                args.out.mkdir(parents=True, exist_ok=True)
            result = spawn.run_sweep(sweep, spec_text, args.out) if distributed else sweep_mod.run(sweep, args.out)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            result = spawn.run_bench(spec, spec_text, args.out) if distributed else bench.run(spec, args.out)
            if result.get("trace"):  # every rank's trace is in args.out by now
                result["kernel_names"] = bench.trace_kernel_names(result["trace"], args.out)
    except BackendUnavailable as exc:
        raise BadInput(str(exc), "missing_dependency") from None
    emit(result)
    return 0


def _failure_kind(exc: BaseException) -> str:
    from .bench import NonFinite
    from .multirank import RankFailed

    if isinstance(exc, NonFinite):
        return "non_finite"
    if isinstance(exc, RankFailed):
        return exc.kind
    if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower():
        return "oom"
    return "error"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except BadInput as exc:
        message = str(exc).replace("\n", " ")
        print(message, file=sys.stderr)
        emit({"ok": False, "engine": "reference", "error": message, "kind": exc.kind})
        return 2
    except Exception as exc:  # a crash is a result: report it as JSON, with the traceback on stderr
        traceback.print_exc(file=sys.stderr)
        first_line = (str(exc).strip().splitlines() or [""])[0]
        emit({"ok": False, "engine": "reference", "error": f"{type(exc).__name__}: {first_line}",
               "kind": _failure_kind(exc)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
