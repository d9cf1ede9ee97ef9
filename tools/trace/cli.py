"""Human-facing ``python -m agent trace FILE... [--json] [--by-rank] [--by-op | --sequences | --overlap] [--top N] [--categories FILE]``.

``--sequences`` prints the fusion candidates of one rank (tools.trace.sequences: give its eager profile,
and its CUDA-graph replay as a second file to time them as it runs); ``--overlap`` the communication
against computation of each rank (tools.trace.overlap).

``--by-op`` prints kernel time by launching frame (tools.trace.ops) instead of the kernel table; it
exits 0 whatever the attribution's status, which the text and the JSON (``status``, ``message``)
state: a CUDA-graph replay trace gives ``needs-eager-profile``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools import exitcodes

from .events import TraceFormatError
from .categories import DEFAULT_RULES
from .ops import ATTRIBUTED, Attribution, attribute
from .overlap import overlap
from .sequences import fusion_candidates
from .triage import format_overlap, format_sequences
from .records import RankSummary, TraceSummary
from .summary import CPU_HOST, summarize

NAME_WIDTH = 110


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="PyTorch-profiler traces (.json, .json.gz), one per rank or merged")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--by-rank", action="store_true", help="also one table per rank")
    parser.add_argument("--by-op", action="store_true",
                        help="kernel time by launching frame (record_function range or Python frame), all ranks together")
    parser.add_argument("--sequences", action="store_true",
                        help="fusion candidates: frequent kernel sequences by operation (one rank: its eager trace, "
                             "optionally its graph replay as a second file)")
    parser.add_argument("--overlap", action="store_true",
                        help="per rank: collectives' time with no computation beside it, and the overlap")
    parser.add_argument("--top", type=positive_int, default=20, metavar="N", help="kernels shown per table (default 20)")
    parser.add_argument(
        "--categories",
        metavar="FILE",
        help="JSON list of [category, regex] pairs replacing the default kernel category table",
    )


def positive_int(text: str) -> int:
    """An argparse type: a count of rows, where 0 or less would print an empty table as if there were none."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def load_category_rules(path: str | None) -> list | None:
    """The category table from a JSON file, or None for the default; ValueError when unreadable."""
    if path is None:
        return None
    try:
        rules = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--categories {path}: {exc}") from exc
    if not isinstance(rules, list):
        raise ValueError(f"--categories {path}: expected a JSON list of [category, regex] pairs")
    return rules


def _us(value: float) -> str:
    return f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def _table(title: str, summary: RankSummary, top: int) -> list[str]:
    lines = [
        title,
        f"  window {_us(summary.window_us)} us  kernel time {_us(summary.kernel_time_us)} us  "
        f"busy {_us(summary.busy_us)} us  idle {_us(summary.idle_us)} us ({_pct(summary.idle_share)} of window)  "
        f"steps {summary.steps}  devices {summary.devices}",
    ]
    if summary.cuda_graph.launches:
        lines.append(f"  CUDA graphs: {summary.cuda_graph.note}")
    header = f"  {'#':>3}  {'share':>7}  {'total us':>14}  {'calls':>7}  {'mean us':>11}  {'category':<18}  name"
    lines.append(header)
    for index, row in enumerate(summary.kernels[:top], start=1):
        name = row.name if len(row.name) <= NAME_WIDTH else row.name[: NAME_WIDTH - 3] + "..."
        lines.append(
            f"  {index:>3}  {_pct(row.share):>7}  {_us(row.total_us):>14}  {row.calls:>7}  {_us(row.mean_us):>11}  "
            f"{row.category:<18}  {name}"
        )
    rest = summary.kernels[top:]
    if rest:
        rest_time = sum(row.total_us for row in rest)
        share = rest_time / summary.kernel_time_us if summary.kernel_time_us > 0 else None
        lines.append(f"  ... {len(rest)} more kernels, {_us(rest_time)} us ({_pct(share)})")
    used = [(name, total) for name, total in summary.categories.items() if total > 0]
    if used and summary.kernel_time_us > 0:
        used.sort(key=lambda item: -item[1])
        lines.append("  categories: " + " | ".join(f"{name} {_pct(total / summary.kernel_time_us)}" for name, total in used))
    return lines


def format_summary(summary: TraceSummary, top: int = 20) -> str:
    """A readable report of a summary: warnings first, the merged table, then one per rank if present."""
    kind = "CPU-only trace: host ranges, interpreter/CPU times" if summary.kind == CPU_HOST else "GPU kernels"
    lines = [f"{len(summary.files)} trace file(s), {kind}"]
    for file in summary.files:
        lines.append(f"  {file.path}  ranks {', '.join(file.ranks) or '-'}  {file.events:,} events")
    if summary.cuda_graph.hidden:
        lines.append("!! NOT RANKED: " + summary.cuda_graph.note)
    for note in summary.notes:
        if note != summary.cuda_graph.note:
            lines.append("note: " + note)
    lines.append("")
    title = "all ranks" if len(summary.ranks) > 1 or sum(len(f.ranks) for f in summary.files) > 1 else "kernels"
    lines.extend(_table(title, summary.merged, top))
    for key, rank in summary.ranks.items():
        lines.append("")
        lines.extend(_table(f"rank {key}", rank, top))
    return "\n".join(lines)


def _frame_text(frame: dict | None) -> str:
    return "-" if not frame else f"{frame['function']} at {frame['file']}:{frame['line']}"


def format_attribution(found: Attribution, top: int = 20) -> str:
    """A readable report of an attribution: the dominant kernel's operation, then one row per operation."""
    kind = "CPU-only trace: host ranges, interpreter/CPU times" if found.kind == CPU_HOST else "GPU kernels"
    placed = (f"{found.kernels:,} outermost host ranges" if found.kind == CPU_HOST else
              f"{found.kernels:,} kernel events, {found.linked:,} linked to their launch ({found.graph_linked:,} to CUDA-graph launches)")
    lines = [f"{len(found.files)} trace file(s), {kind}: {placed}; Python stacks: "
             f"{'yes' if found.with_stack else 'no'}; record_function ranges: {'yes' if found.annotations else 'no'}"]
    op = found.dominant
    if op is not None:
        lines.append(f"dominant kernel: {op.kernel}  {_us(op.kernel_total_us)} us")
        if op.status == ATTRIBUTED:
            lines.append(f"  operation: {op.name} ({op.source}; frame {_frame_text(op.frame)}): {_us(op.total_us)} us, "
                         f"{_pct(op.share)} of kernel time, {len(op.kernels)} kernels, {op.calls} calls; "
                         f"{_pct(op.coverage)} of the kernel's time inside it")
            lines.append(f"  rule: {op.rule}")
        else:
            lines.append(f"!! {op.status}: {op.message}")
    elif found.status != ATTRIBUTED:
        lines.append(f"!! {found.status}: {found.message}")
    lines.append("")
    lines.append(f"  {'#':>3}  {'share':>7}  {'GPU us' if found.kind != CPU_HOST else 'host us':>14}  {'calls':>6}  "
                 f"{'kernels':>7}  {'source':<15}  operation (frame)")
    for index, row in enumerate(found.rows[:top], start=1):
        label = row.name if not row.frame else f"{row.name} ({_frame_text(row.frame)})"
        label = label if len(label) <= NAME_WIDTH else label[: NAME_WIDTH - 3] + "..."
        lines.append(f"  {index:>3}  {_pct(row.share):>7}  {_us(row.total_us):>14}  {row.calls:>6}  {len(row.kernels):>7}  "
                     f"{row.source:<15}  {label}")
    rest = found.rows[top:]
    if rest:
        lines.append(f"  ... {len(rest)} more operations, {_us(sum(r.total_us for r in rest))} us")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the kernel table (or JSON with --json; --by-op: kernel time by launching frame);
    2 on bad input, with a one-line message."""
    modes = [name for name in ("by_op", "sequences", "overlap") if getattr(args, name, False)]
    if len(modes) > 1:
        print(f"error: choose one of --by-op, --sequences, --overlap (got {', '.join('--' + m.replace('_', '-') for m in modes)})",
              file=sys.stderr)
        return exitcodes.BAD_INPUT
    if getattr(args, "by_op", False):
        analyze, render = (lambda: attribute(args.files)), format_attribution
    elif getattr(args, "sequences", False):
        analyze, render = (lambda: fusion_candidates(args.files)), format_sequences
    elif getattr(args, "overlap", False):
        analyze = lambda: overlap(args.files, rules=load_category_rules(args.categories) or DEFAULT_RULES)  # noqa: E731
        render = format_overlap
    else:
        analyze = lambda: summarize(args.files, by_rank=args.by_rank, categories=load_category_rules(args.categories))  # noqa: E731
        render = format_summary
    try:
        result = analyze()
    except (TraceFormatError, ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)  # the one error form (agent/cli.py)
        return exitcodes.BAD_INPUT
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(render(result, top=args.top))
    return exitcodes.DONE
