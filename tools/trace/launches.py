"""One kernel's launches in a trace, in the order they ran: which launch of a step to look at closely.

A kernel called several times a step in different forms (the sparse decode's window and compressed
caches, say) has launches of very different lengths; a tool that studies one launch (Nsight Compute)
should study the one that costs most, not the first. The trace holds every launch: the position in the
step whose launches take longest is that one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from statistics import median

from tools.trace.events import iter_events, iter_record_batches


@dataclass(frozen=True)
class Position:
    """The chosen position of a kernel's launches within a step, and what the trace says of it."""

    position: int  # 0-based: the launches of the kernel before it in each step
    per_step: int
    median_us: float  # its launches' median duration
    all_median_us: tuple[float, ...]  # the median duration at each position, in step order
    alike: tuple[int, ...]  # the positions whose launches take as long (within ALIKE): the same form, likely
    share: float  # the share of the kernel's time in the alike positions' launches


# Launches whose medians differ by less than this are taken as one form of the call (the same shapes in
# another layer); the first of them is the one studied.
ALIKE = 0.01


def launch_durations(path: str | Path, kernel: str) -> list[float]:
    """Durations (us) of each device launch of ``kernel`` (exact name), in the order they started."""
    found = []
    for batch in iter_record_batches(path):
        found.extend((e.ts, e.dur) for e in batch if e.cat == "kernel" and e.name == kernel and e.dur is not None)
    return [dur for _, dur in sorted(found)]


def longest_position(durations: list[float], steps: int) -> Position | None:
    """The first position in a step whose launches take longest on median (within ALIKE of the
    longest), when the launches split evenly over ``steps`` (the same sequence each step); None when
    they do not, or there are none."""
    if steps <= 0 or not durations or len(durations) % steps:
        return None
    per_step = len(durations) // steps
    medians = tuple(median(durations[i::per_step]) for i in range(per_step))
    longest = max(medians)
    alike = tuple(i for i in range(per_step) if medians[i] >= (1 - ALIKE) * longest)
    total = sum(durations)
    share = sum(sum(durations[i::per_step]) for i in alike) / total if total else 0.0
    return Position(alike[0], per_step, medians[alike[0]], medians, alike, share)


@dataclass(frozen=True)
class LaunchConfig:
    """One launch configuration of a kernel as the profiler recorded it (CUPTI's kernel record)."""

    grid: tuple[int, ...]
    block: tuple[int, ...]
    registers_per_thread: int | None
    shared_memory_bytes: int | None
    launches: int
    median_us: float


def launch_configs(path: str | Path, kernel: str) -> list[LaunchConfig]:
    """The launch configurations of ``kernel`` (exact name) in a trace, from its kernel events' args (``grid``,
    ``block``, ``registers per thread``, ``shared memory``, as PyTorch's profiler copies them from CUPTI): one
    entry a distinct configuration, with its launches and their median duration, most launches first. What a
    kernel without source says of its grid (FlashMLA inside a wheel, on sm_90): the real sglang 0.5.17 server's
    sparse decode ran grid (1, 1, 132), one CTA an SM, 384 threads. Launches without a grid are left out."""
    found: dict[tuple, list[float]] = {}
    for event in iter_events(path):
        args = event.get("args")
        if event.get("cat") != "kernel" or event.get("name") != kernel or not isinstance(args, dict):
            continue
        grid, block = args.get("grid"), args.get("block")
        if not (isinstance(grid, list) and isinstance(block, list)):
            continue
        key = (tuple(grid), tuple(block), args.get("registers per thread"), args.get("shared memory"))
        found.setdefault(key, []).append(float(event.get("dur") or 0.0))
    configs = [LaunchConfig(grid, block, regs, smem, len(durs), median(durs))
               for (grid, block, regs, smem), durs in found.items()]
    return sorted(configs, key=lambda c: (-c.launches, c.grid, c.block))
