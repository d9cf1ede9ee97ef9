"""Command line for kernel grid analysis: ``python -m agent grid`` (human; ``--json`` for the
report as one JSON object) and ``python -m tools.kernel_source`` (box side, one JSON object).
Exit codes as tools/exitcodes.py: 0 done, 2 bad input, 1 failure."""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from tools import exitcodes

from .analysis import KernelNotFound, analyze
from .grid_report import GridReport
from .source_text import normalize_key


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, type=Path, help="kernel source file or directory tree")
    parser.add_argument("--kernel", required=True, help="kernel name (Triton @triton.jit def, or CUDA __global__)")
    parser.add_argument("--shape", action="append", default=[], metavar="SYMBOL=VALUE",
                        help="pin a symbol of the launcher or kernel (B=1, topk=512, 'q.shape[0]=1'); repeatable")
    parser.add_argument("--sms", required=True, type=int, help="SM count to compute coverage and waves for")
    parser.add_argument("--arch", action="append", default=[], metavar="ARCH",
                        help="compile for this architecture (sm_90, sm_120) for registers/occupancy; repeatable or comma-separated")
    parser.add_argument("--config-json", default=None, help="the autotune config the box chose, as JSON")
    parser.add_argument("--dtype", action="append", default=[], metavar="PARAM=DTYPE",
                        help="dtype of a kernel argument the source does not show (Q_ptr=bf16; *bf16 forces a pointer)")
    parser.add_argument("--launcher", default=None, help="analyze the launch in this function (default: the first found)")
    parser.add_argument("--no-compile", action="store_true", help="skip the ahead-of-time compile")
    parser.add_argument("--only-chosen", action="store_true", help="compile only the config given by --config-json")
    parser.add_argument("--python", default=None, help="interpreter whose Triton compiles the kernel (default: this one)")
    parser.add_argument("--real-heads", type=int, default=None, help="heads per rank before padding: report programs that compute padding")
    parser.add_argument("--head-symbol", default=None, help="the grid symbol that counts heads (default: found by name)")
    parser.add_argument("--ncu-csv", default=None, type=Path,
                        help="an `ncu --csv` export of the kernel: its throughputs, occupancy, stalls and verdict join the diagnosis")
    parser.add_argument("--unaligned-unknown-ints", action="store_true",
                        help="compile int arguments of unknown value without Triton's divisible-by-16 specialization")
    parser.add_argument("--json", action="store_true", help="print the analysis as one JSON object")


class BadInput(ValueError):
    """Arguments that cannot be used (exit code 2)."""


def _pairs(items: list[str], what: str, convert) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise BadInput(f"{what} {item!r} is not NAME=VALUE")
        key, _, value = item.rpartition("=")
        try:
            out[key.strip()] = convert(value.strip())
        except ValueError:
            raise BadInput(f"{what} {item!r}: {value.strip()!r} is not a number, true or false") from None
    return out


FLAGS = {"true": True, "false": False}


def _number(text: str) -> int | float | bool:
    """A pinned value: an int (any base Python reads), a float, or a flag's true/false."""
    if text.lower() in FLAGS:
        return FLAGS[text.lower()]
    try:
        return int(text, 0)
    except ValueError:
        return float(text)


def analyze_from_args(args: argparse.Namespace) -> GridReport:
    """Run ``analyze`` from parsed arguments; BadInput for unusable ones."""
    shapes = _pairs(args.shape, "--shape", _number)
    negative = [f"{k}={v}" for k, v in shapes.items() if v < 0]
    if negative:  # a negative size makes a negative program count, not an error, further on
        raise BadInput(f"--shape {', '.join(negative)}: a shape is a size, count or flag, never negative")
    dtypes = _pairs(args.dtype, "--dtype", str)
    chosen = None
    if args.config_json:
        try:
            chosen = json.loads(args.config_json)
        except json.JSONDecodeError as exc:
            raise BadInput(f"--config-json is not JSON: {exc}") from None
        if not isinstance(chosen, dict):
            raise BadInput("--config-json must be a JSON object")
    archs = [a for item in args.arch for a in item.split(",") if a.strip()]
    if args.sms <= 0:
        raise BadInput("--sms must be positive")
    if args.real_heads is not None and args.real_heads <= 0:
        raise BadInput("--real-heads must be positive")
    try:
        return analyze(
            args.source,
            args.kernel,
            shapes,
            args.sms,
            arch=archs or None,
            chosen_config=chosen,
            dtypes=dtypes,
            launcher=args.launcher,
            compile=not args.no_compile,
            python=args.python,
            real_heads=args.real_heads,
            head_symbol=args.head_symbol,
            aligned_unknown_ints=not args.unaligned_unknown_ints,
            compile_all_configs=not args.only_chosen,
            ncu_csv=getattr(args, "ncu_csv", None),
        )
    except (KernelNotFound, FileNotFoundError) as exc:
        raise BadInput(str(exc)) from None
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def _names_in(path: str) -> set[str]:
    """Every name, parameter and expression text in a Python file (what a pinned shape can match)."""
    tree = ast.parse(Path(path).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            names.add(ast.unparse(node))
    return names


def unused_shapes(report: GridReport, shapes: dict) -> list[str]:
    """The pinned symbols nothing can read: in neither the kernel's file nor its launcher's (a
    CUDA kernel's launch is not evaluated, so every symbol). A typo pins nothing, silently, else."""
    if not shapes:
        return []
    if report.kind == "cuda":
        return list(shapes)
    files = {report.file} | ({report.launcher["file"]} if report.launcher else set())
    names = set().union(*(_names_in(f) for f in files))
    return [k for k in shapes if normalize_key(k) not in names]


def run(args: argparse.Namespace) -> int:
    """Print the analysis as a readable summary, or as JSON with ``--json``; a pinned symbol the
    kernel and its launcher never mention is bad input (the box side, main, keeps it as given)."""
    try:
        report = analyze_from_args(args)
        unused = unused_shapes(report, _pairs(args.shape, "--shape", _number))
        if unused:
            where = "a CUDA kernel's launch is not evaluated" if report.kind == "cuda" else \
                f"not a name in {report.file}" + (f" or {report.launcher['file']}" if report.launcher and
                                                    report.launcher["file"] != report.file else "")
            raise BadInput(f"--shape {', '.join(unused)}: {where}; nothing would read it "
                           f"(grid symbols: {', '.join(report.grid_symbols) or 'none'})")
        counts = [k for k, v in _pairs(args.shape, "--shape", _number).items()
                  if isinstance(v, bool) and normalize_key(k) in report.grid_symbols]
        if counts:
            raise BadInput(f"--shape {', '.join(counts)}: a grid size is a count, not true or false")
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    if getattr(args, "json", False):
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(render(report))
    blocked = _blocked(report)
    if blocked:
        # The registers asked for (--arch) need a value only the user has: the rest of the analysis is
        # printed, but the exit says the command line must change, not that the compiler broke.
        print(f"error: not compiled for {', '.join(blocked)}: {'; '.join(dict.fromkeys(blocked.values()))} "
              "(or --no-compile for the analysis without registers)", file=sys.stderr)
        return exitcodes.BAD_INPUT
    return exitcodes.DONE


def _blocked(report: GridReport) -> dict[str, str]:
    """Architecture -> why its compile was not asked for, where an argument it needs is not known."""
    return {arch: usage["error"] for config in report.configs for arch, usage in config.resources.items()
            if usage and usage.get("blocked")}


def _resource_cells(usage: dict | None) -> list[str]:
    """Registers, spills, shared memory of one compile; "not compiled" where none was asked for
    (--no-compile, --only-chosen), "error" only where a compile was tried and failed."""
    usage = usage or {}
    if usage.get("ok"):
        return [_fmt(usage.get("registers")), _fmt(usage.get("spill_stores")), _fmt(usage.get("shared_per_block"))]
    if _not_compiled(usage):
        return ["not compiled", "-", "-"]
    if usage.get("blocked"):  # a value to pass, named below the table: not the compiler's error
        return ["needs input", "-", "-"]
    return ["error", "?", "?"]


def _not_compiled(usage: dict) -> bool:
    error = str(usage.get("error") or "")
    return error == "compile disabled" or error.startswith("not compiled")


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "?"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render(report: GridReport) -> str:
    """A plain-text summary for a person."""
    lines = [f"{report.kernel}  ({report.kind})  {report.file}:{report.line}"]
    if report.launcher:
        lines.append(f"launched by {report.launcher['function']} at {report.launcher['where']}")
    lines.append(f"grid = {report.grid_expr}   symbols: {', '.join(report.grid_symbols) or '-'}")
    lines.append(f"shapes: {', '.join(f'{k}={v}' for k, v in report.shapes.items()) or '-'}   SMs: {report.sms}")
    lines.append("")
    header = ["config", "threads", "grid", "programs", "coverage"]
    for arch in report.archs:
        header += [f"regs {arch}", f"spill {arch}", f"smem {arch}", f"blk/SM {arch}", f"occ {arch}", f"waves {arch}"]
    loop_lines = [str(loop.line) for loop in report.loops]
    header += [f"trips L{line}" for line in loop_lines]
    rows = [header]
    for config in report.configs:
        label = ",".join(f"{k}={v}" for k, v in config.config.items())
        row = [f"{config.label}: {label}", _fmt(config.threads_per_program), _fmt(config.grid), _fmt(config.programs), _fmt(config.coverage)]
        for arch in report.archs:
            usage = config.resources.get(arch) or {}
            occ = config.occupancy.get(arch) or {}
            measured = usage.get("ok") or not (_not_compiled(usage) or usage.get("blocked"))
            row += _resource_cells(usage) + [
                _fmt(config.blocks_per_sm.get(arch)) if measured else "-",
                f"{occ['occupancy']:.1%}" if occ else "?" if measured else "-",
                _fmt(config.waves.get(arch)) if measured else "-",
            ]
        row += [_fmt(config.trip_counts.get(line)) for line in loop_lines]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    lines.append("")
    for loop in report.loops:
        role = "serial reduction" if loop.reduction else "loop"
        covered = f"split by grid axis {loop.grid_axes}" if loop.grid_axes else ("covered by the grid" if loop.covered_by_grid else "NOT covered by the grid")
        lines.append(f"line {loop.line}: {loop.text}  [{role}; {covered}]")
        if loop.accumulators:
            lines.append(f"    accumulators: {', '.join(loop.accumulators)}")
        if loop.inductions:
            lines.append(f"    inductions: {', '.join(loop.inductions)}")
    lines.append("")
    lines.append(f"serial reduction not covered by the grid: {report.serial_reduction_uncovered}")
    lines.append(f"below one wave: {_fmt(report.below_one_wave)}   split-K candidate: {_fmt(report.split_k_candidate)}")
    if report.chosen:
        lines.append(f"chosen config: {report.chosen['config']} -> {report.chosen['label']}")
    if report.padding:
        lines.append(f"programs computing only padding heads: {_fmt(report.padding['padding_programs'])} "
                     f"({report.padding['real_heads']} real of {report.padding['padded_heads']} heads)")
    skipped = sorted({"--no-compile" if usage.get("error") == "compile disabled" else str(usage.get("error"))
                      for config in report.configs for usage in config.resources.values()
                      if usage and _not_compiled(usage)})
    if skipped:
        lines.append(f"registers, spills, shared memory, occupancy and waves not measured ({'; '.join(skipped)})")
    blocked: dict[tuple[str, str], list[str]] = {}
    for config in report.configs:
        for arch, usage in config.resources.items():
            if usage and usage.get("blocked"):
                blocked.setdefault((arch, usage["error"]), []).append(str(config.label))
            elif usage and not usage.get("ok") and not _not_compiled(usage):
                lines.append(f"compile {config.label} {arch}: {usage.get('error')}")
    for (arch, why), labels in blocked.items():  # the same missing value for every config: said once
        lines.append(f"not compiled for {arch} (config{'s' if len(labels) > 1 else ''} {', '.join(labels)}): {why}")
    diagnosis = report.diagnosis or {}
    if diagnosis.get("ok"):
        lines.append(f"diagnosis ({diagnosis['config']}): loaded {_fmt(diagnosis['loaded_bytes'])} B, unique {_fmt(diagnosis['unique_bytes'])} B, "
                     f"redundancy {_fmt(diagnosis['redundancy_factor'])}x (gathers {_fmt(diagnosis['gather_redundancy_factor'])}x); "
                     f"inner products: {diagnosis['inner_product']}")
    elif diagnosis:
        lines.append(f"diagnosis failed: {diagnosis.get('error')}")
    ncu = diagnosis.get("ncu") or {}
    if ncu:
        lines.append(f"Nsight Compute: {ncu.get('bound')}" + (f" ({ncu['basis']})" if ncu.get("basis") else f" ({ncu.get('why') or ncu.get('error')})"))
    if report.assumptions:
        lines.append("assumptions:")
        lines += [f"  - {a}" for a in report.assumptions]
    if report.unresolved:
        lines.append("unresolved:")
        lines += [f"  - {u}" for u in report.unresolved]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Box side: one JSON object on stdout; 0 ok, 2 bad input, 1 failure."""
    parser = argparse.ArgumentParser(prog="python -m tools.kernel_source", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        report = analyze_from_args(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    except Exception as exc:  # the box reports a failure as a result, with the reason
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exitcodes.FAILED
    print(json.dumps(report.to_dict(), sort_keys=True))
    return exitcodes.DONE
