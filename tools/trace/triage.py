"""Text forms of ``agent trace --sequences`` (fusion candidates) and ``--overlap`` (communication against
computation per rank), for standalone triage; ``--json`` prints the records' to_dict() instead."""

from __future__ import annotations

from .overlap import OverlapReport
from .sequences import SequenceReport

NAME_WIDTH = 60


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def format_sequences(found: SequenceReport, top: int = 20) -> str:
    """The candidates, best first: operation, kernels, count, launches, kernel time and gaps a step."""
    lines = [f"fusion candidates: {len(found.candidates)} closed frequent kernel sequences (at least once a step) "
             f"over {found.steps} step(s)",
             f"  operations from {found.attribution_file}" + ("" if found.attributed else " (none: no per-kernel launches)"),
             f"  times from {found.timing_file} ({found.timing}); {100 * found.matched:.1f}% of the steps' kernels "
             f"matched there; step window {found.step_window_us:,.1f} us, kernel time {found.kernel_time_us:,.1f} us a step"]
    lines += [f"note: {note}" for note in found.notes]
    lines.append("  gap: device idle between the sequence's kernels (measured), what a fused kernel saves at most "
                 "besides the intermediates' traffic (not in the trace)")
    lines.append(f"  {'#':>3}  {'operation':<24}  {'len':>3}  {'a step':>6}  {'launches':>8}  {'kernel us':>10}  "
                 f"{'gap us':>8}  kernels")
    for index, row in enumerate(found.candidates[:top], start=1):
        kernels = " > ".join(_short(k, 40) for k in row.kernels[:4]) + (f" > ... ({len(row.kernels)})" if len(row.kernels) > 4 else "")
        lines.append(f"  {index:>3}  {_short(row.operation, 24):<24}  {len(row.kernels):>3}  {row.per_step:>6.1f}  "
                     f"{row.launches_per_step:>8.1f}  {row.time_us_per_step:>10,.1f}  {row.gap_us_per_step:>8,.1f}  {kernels}")
    rest = found.candidates[top:]
    if rest:
        lines.append(f"  ... {len(rest)} more sequences")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def format_overlap(found: OverlapReport, top: int = 20) -> str:
    """One row per rank: step window, communication, exposed, overlapped, computation (step means, us)."""
    lines = [f"communication/computation overlap, {len(found.ranks)} rank(s): {found.note}",
             f"  {'rank':>5}  {'steps':>5}  {'streams':>7}  {'window us':>10}  {'comm us':>10}  {'exposed us':>10}  "
             f"{'overlap':>7}  {'compute us':>10}  {'collectives':>11}  file"]
    for row in found.ranks[:top]:
        lines.append(f"  {row.rank:>5}  {row.steps:>5}  {row.streams:>7}  {row.window_us:>10,.1f}  {row.communication_us:>10,.1f}  "
                     f"{row.exposed_us:>10,.1f}  {_pct(row.overlap_share):>7}  {row.computation_us:>10,.1f}  "
                     f"{row.collectives:>11.1f}  {row.file}")
    if all(row.communication_us == 0 for row in found.ranks):
        lines.append("  no collective kernels in the traces: nothing to overlap")
    return "\n".join(lines)
