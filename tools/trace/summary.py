"""One streaming pass over each trace file, then per-rank and merged summaries."""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .categories import DEFAULT_RULES, categorizer, category_names, validate_rules
from .cuda_graph import GRAPH_LAUNCH, RUNTIME_CATEGORIES, graph_info, merge_graph_info
from .events import TraceFormatError, iter_record_batches
from .host import HOST_RANGE_CATEGORIES, PROFILER_STEP, fold_worker_collectives, is_work_range, outermost
from .ranks import rank_from_filename, rank_from_metadata, rank_from_pid, rank_sort_key
from .records import CudaGraphInfo, RankSummary, TraceFile, TraceSummary
from .steps import StepTimes, merge_step_times, step_number, step_times
from .timeline import timeline
from .totals import NameDurations, category_totals, kernel_rows, merge_durations

# Device activity: kernels, and memory copies/sets, which occupy the GPU's copy or compute engines.
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# record_function ranges as the device saw them (ProfilerStep#N among them).
GPU_ANNOTATION = "gpu_user_annotation"

GPU = "gpu"
CPU_HOST = "cpu-host"

# A GPU trace whose device events are all copies and sets lost its kernels (a profiler that dropped
# them, a cut file): ranking the copies would name a "dominant kernel" that is not one.
NO_KERNELS_NOTE = "no kernel events in the trace, only memory copies/sets: the kernels were not recorded, so nothing is ranked"
CPU_HOST_NOTE = (
    "CPU-only trace (no device activity): the kernels are the outermost host ranges on each thread "
    "(aten ops, record_function ranges named after Triton kernels run by the interpreter); their times "
    "are CPU/interpreter wall times, not GPU kernel times"
)


@dataclass
class RankEvents:
    """What one pass keeps of one rank's events (compact arrays, not the events)."""

    # kernel name -> its durations (summed exactly at the end, so that neither the order of the
    # events nor the grouping into ranks can change a total's last digit)
    device_durations: NameDurations = field(default_factory=dict)
    # device key (the event's pid) -> (starts, durations)
    device_intervals: dict = field(default_factory=dict)
    kernel_correlations: array = field(default_factory=lambda: array("q"))
    graph_launches: array = field(default_factory=lambda: array("q"))
    runtime_calls: int = 0
    kernel_events: int = 0  # device events of category "kernel" (the rest are memory copies and sets)
    steps: int = 0
    # (pid, tid) -> (starts, durations, name ids); only used when the trace has no device activity
    host_ranges: dict = field(default_factory=dict)
    # name -> id in host_name_list, or a negative marker for ProfilerStep#N / profiler-internal names
    host_names: dict = field(default_factory=dict)
    host_name_list: list = field(default_factory=list)
    # pid -> [(N, ts, dur)] of ProfilerStep#N ranges: device-side (gpu_user_annotation) and host-side
    gpu_steps: dict = field(default_factory=dict)
    cpu_steps: dict = field(default_factory=dict)

    @property
    def device_events(self) -> int:
        return len(self.kernel_correlations)

    def is_empty(self) -> bool:
        return not (self.device_events or self.runtime_calls or self.host_ranges or self.steps)

    def absorb(self, other: RankEvents) -> None:
        """Add another accumulator of the same rank (events of one rank split across pid labels)."""
        self.device_durations = merge_durations([self.device_durations, other.device_durations])
        for key, (starts, durs) in other.device_intervals.items():
            mine = self.device_intervals.setdefault(key, (array("d"), array("d")))
            mine[0].extend(starts)
            mine[1].extend(durs)
        self.kernel_correlations.extend(other.kernel_correlations)
        self.graph_launches.extend(other.graph_launches)
        self.runtime_calls += other.runtime_calls
        self.kernel_events += other.kernel_events
        self.steps += other.steps
        for mine, theirs in ((self.gpu_steps, other.gpu_steps), (self.cpu_steps, other.cpu_steps)):
            for pid, ranges in theirs.items():
                mine.setdefault(pid, []).extend(ranges)
        for thread, (starts, durs, ids) in other.host_ranges.items():
            mine = self.host_ranges.setdefault(thread, (array("d"), array("d"), array("l")))
            mine[0].extend(starts)
            mine[1].extend(durs)
            for i in ids:
                name = other.host_name_list[i]
                name_id = self.host_names.get(name)
                if name_id is None:
                    name_id = self.host_names[name] = _host_name_id(name, self)
                mine[2].append(name_id)


_STEP = -1
_NOT_WORK = -2


def _host_name_id(name: object, acc: RankEvents) -> int:
    """Id of a host range name in acc's name list; _STEP / _NOT_WORK for ranges that are not work."""
    if not isinstance(name, str):
        return _NOT_WORK
    if PROFILER_STEP.match(name):
        return _STEP
    if not is_work_range(name):
        return _NOT_WORK
    acc.host_name_list.append(name)
    return len(acc.host_name_list) - 1


def read_rank_events(path: str | Path) -> tuple[int, dict, dict[str | None, RankEvents]]:
    """Stream one file: (events read, top-level metadata, accumulators by pid rank label or None)."""
    metadata: dict = {}
    by_label: dict[str | None, RankEvents] = {}
    by_pid: dict = {}
    count = 0
    for batch in iter_record_batches(path, metadata):
        for event in batch:
            count += 1
            if event.ph != "X":
                continue
            pid = event.pid
            try:
                acc = by_pid[pid]
            except (KeyError, TypeError):
                acc = _first_of_pid(pid, by_pid, by_label, f"{path}: event {count}")
            cat = event.cat
            if cat in DEVICE_CATEGORIES:
                name = event.name
                dur = event.dur
                args = event.args
                if not name or not isinstance(name, str):
                    # a nameless event would be ranked as a kernel called "": refused, not guessed
                    raise TraceFormatError(f"{path}: device event {count} (cat {cat!r}) has no name")
                if isinstance(dur, (int, float)) and not dur >= 0:
                    raise TraceFormatError(f"{path}: device event {count} ({name!r}) has a negative or NaN dur {dur!r}")
                if cat == "kernel":
                    acc.kernel_events += 1
                try:
                    durations = acc.device_durations.get(name)
                    if durations is None:
                        durations = acc.device_durations[name] = array("d")
                    durations.append(dur)
                    intervals = acc.device_intervals.get(pid)
                    if intervals is None:
                        intervals = acc.device_intervals[pid] = (array("d"), array("d"))
                    intervals[0].append(event.ts)
                    intervals[1].append(dur)
                    acc.kernel_correlations.append(-1 if args is None else args.correlation)
                except TypeError as exc:
                    raise TraceFormatError(f"{path}: device event {count} ({name!r}) lacks a numeric ts/dur/correlation") from exc
            elif cat in HOST_RANGE_CATEGORIES:
                name = event.name
                name_id = acc.host_names.get(name)
                if name_id is None:
                    name_id = acc.host_names[name] = _host_name_id(name, acc)
                if name_id < 0:
                    if name_id == _STEP:
                        acc.steps += 1
                        _add_step(acc.cpu_steps, pid, name, event, path, count)
                    continue
                thread = (pid, event.tid)
                ranges = acc.host_ranges.get(thread)
                if ranges is None:
                    ranges = acc.host_ranges[thread] = (array("d"), array("d"), array("l"))
                try:
                    ranges[0].append(event.ts)
                    ranges[1].append(event.dur)
                except TypeError as exc:
                    raise TraceFormatError(f"{path}: host event {count} ({name!r}) lacks a numeric ts/dur") from exc
                ranges[2].append(name_id)
            elif cat == GPU_ANNOTATION:
                if step_number(event.name) is not None:
                    _add_step(acc.gpu_steps, pid, event.name, event, path, count)
            elif cat in RUNTIME_CATEGORIES:
                acc.runtime_calls += 1
                if isinstance(event.name, str) and GRAPH_LAUNCH.match(event.name):
                    _add_graph_launch(acc, event, f"{path}: graph launch {count}")
    return count, metadata, by_label


def _first_of_pid(pid, by_pid: dict, by_label: dict[str | None, RankEvents], where: str) -> RankEvents:
    """The accumulator of a pid met for the first time: its rank label's, shared by every pid of that
    rank (a merged file labels one rank's processes alike)."""
    try:
        hash(pid)
    except TypeError as exc:
        raise TraceFormatError(f"{where} has an unhashable pid {pid!r}") from exc
    label = rank_from_pid(pid)
    acc = by_label.get(label)
    if acc is None:
        acc = by_label[label] = RankEvents()
    by_pid[pid] = acc
    return acc


def _add_graph_launch(acc: RankEvents, event, where: str) -> None:
    args = event.args
    try:
        acc.graph_launches.append(-1 if args is None else args.correlation)
    except TypeError as exc:
        raise TraceFormatError(f"{where} has a non-integer correlation") from exc


def _add_step(steps: dict, pid, name: str, event, path, count: int) -> None:
    number = step_number(name)
    if number is None:
        return
    if not isinstance(event.ts, (int, float)) or not isinstance(event.dur, (int, float)):
        raise TraceFormatError(f"{path}: step range {count} ({name!r}) lacks a numeric ts/dur")
    steps.setdefault(pid, []).append((number, float(event.ts), float(event.dur)))


@dataclass
class _Part:
    """A rank's numbers before they become a RankSummary (kept for merging)."""

    durations: NameDurations
    window_us: float
    busy_us: float
    steps: int
    devices: int
    cuda_graph: CudaGraphInfo
    step_times: StepTimes | None = None


def _gpu_part(acc: RankEvents) -> _Part:
    window = busy = 0.0
    per_device = []
    for pid, (starts, durs) in acc.device_intervals.items():
        line = timeline(starts, durs)
        window += line.window_us
        busy += line.busy_us
        per_device.append(step_times(starts, durs, acc.gpu_steps.get(pid, [])))
    return _Part(
        step_times=merge_step_times(per_device),
        durations=acc.device_durations,
        window_us=window,
        busy_us=busy,
        steps=acc.steps,
        devices=len(acc.device_intervals),
        cuda_graph=graph_info(acc.graph_launches, acc.kernel_correlations),
    )


def _host_part(acc: RankEvents) -> _Part:
    names = acc.host_name_list
    durations: NameDurations = {}
    per_process: dict = {}
    units = {thread: [[starts[i], durs[i], ids[i]] for i in outermost(starts, durs)]
             for thread, (starts, durs, ids) in acc.host_ranges.items()}
    for (pid, _tid), rows in fold_worker_collectives(units, names.__getitem__).items():
        process = per_process.setdefault(pid, ([], []))
        for start, dur, name_id in rows:
            name = names[name_id]
            row = durations.get(name)
            if row is None:
                row = durations[name] = array("d")
            row.append(dur)
            process[0].append(start)
            process[1].append(dur)
    window = busy = 0.0
    per_pid = []
    for pid, (starts, durs) in per_process.items():
        line = timeline(starts, durs)
        window += line.window_us
        busy += line.busy_us
        per_pid.append(step_times(starts, durs, acc.cpu_steps.get(pid, [])))
    return _Part(
        step_times=merge_step_times(per_pid),
        durations=durations,
        window_us=window,
        busy_us=busy,
        steps=acc.steps,
        devices=sum(1 for starts, _ in per_process.values() if starts),
        cuda_graph=CudaGraphInfo(),
    )


def _summary(part: _Part, categorize: Callable[[str], str], categories: list[str]) -> RankSummary:
    rows, kernel_time = kernel_rows(part.durations, categorize)
    idle = part.window_us - part.busy_us
    steps = part.step_times
    return RankSummary(
        in_step_window_us=None if steps is None else steps.in_step_window_us,
        between_steps_idle_us=None if steps is None else steps.between_steps_idle_us,
        outside_steps_us=None if steps is None else steps.outside_us,
        step_windows=() if steps is None else steps.windows,
        window_us=part.window_us,
        kernel_time_us=kernel_time,
        busy_us=part.busy_us,
        idle_us=idle,
        idle_share=(idle / part.window_us) if part.window_us > 0 else None,
        steps=part.steps,
        devices=part.devices,
        kernels=rows,
        categories=category_totals(part.durations, rows, categories),
        cuda_graph=part.cuda_graph,
    )


def _merged_part(parts: list[_Part]) -> _Part:
    """All ranks as one: durations pooled, windows and busy times summed over devices, steps the most any rank ran."""
    return _Part(
        durations=merge_durations(part.durations for part in parts),
        window_us=math.fsum(part.window_us for part in parts),
        busy_us=math.fsum(part.busy_us for part in parts),
        steps=max(part.steps for part in parts),
        devices=sum(part.devices for part in parts),
        cuda_graph=merge_graph_info([part.cuda_graph for part in parts]),
        step_times=merge_step_times([part.step_times for part in parts]),
    )


def _file_rank(path: str, metadata: dict, default: str) -> str:
    return rank_from_filename(path) or rank_from_metadata(metadata) or default


def _read_ranks(paths: Sequence[str | Path]) -> tuple[dict[str, RankEvents], list[TraceFile], dict[str, bool]]:
    """Each file read once: accumulators by rank (the pid's label, else the file's rank), the files as
    read, and whether each file holds device activity; ValueError when two files hold one rank."""
    per_rank: dict[str, RankEvents] = {}
    owner: dict[str, str] = {}
    files = []
    file_has_device: dict[str, bool] = {}
    for raw_path in paths:
        path = str(raw_path)
        count, metadata, by_label = read_rank_events(path)
        default = "0" if len(paths) == 1 else Path(path).name
        file_rank = _file_rank(path, metadata, default)
        found: dict[str, RankEvents] = {}
        for label, acc in by_label.items():
            if acc.is_empty():
                continue
            key = label if label is not None else file_rank
            if key in found:
                found[key].absorb(acc)
            else:
                found[key] = acc
        for key, acc in found.items():
            if key in per_rank:
                raise ValueError(f"{owner[key]} and {path} both hold rank {key}")
            per_rank[key] = acc
            owner[key] = path
        file_has_device[path] = any(acc.device_events or acc.runtime_calls for acc in found.values())
        files.append(TraceFile(path=path, ranks=tuple(sorted(found, key=rank_sort_key)), events=count))
    return per_rank, files, file_has_device


def summarize(
    paths: Sequence[str | Path],
    *,
    by_rank: bool = False,
    categories: Sequence[Sequence[str]] | None = None,
) -> TraceSummary:
    """Kernel tables, categories, window/busy/idle and CUDA-graph accounting for trace files.

    paths: PyTorch-profiler Chrome traces (.json or .json.gz), one per rank (rank from SGLang's
    ``-TP-N`` file label, else ``distributedInfo.rank``) and/or merged files (rank from the pid
    label SGLang's merger writes). by_rank: also fill ``ranks`` with each rank's summary.
    categories: a [category, regex] table replacing categories.DEFAULT_RULES.
    Raises ValueError (TraceFormatError for unreadable files) on bad input: no paths, a missing or
    malformed file, two files holding the same rank, GPU and CPU-only traces mixed, nothing to count.
    """
    if not paths:
        raise ValueError("no trace files given")
    rules = validate_rules(categories) if categories is not None else DEFAULT_RULES
    categorize = categorizer(rules)
    names = category_names(rules)

    per_rank, files, file_has_device = _read_ranks(paths)
    if not per_rank:
        raise TraceFormatError(f"no kernels, CUDA calls or host ranges in {', '.join(str(p) for p in paths)}")
    kind = GPU if any(file_has_device.values()) else CPU_HOST
    if kind == GPU and not all(file_has_device.values()):
        cpu_only = [p for p, has in file_has_device.items() if not has]
        raise ValueError(f"cannot merge GPU traces with CPU-only traces ({', '.join(cpu_only)})")

    notes = []
    parts = {}
    for key in sorted(per_rank, key=rank_sort_key):
        acc = per_rank[key]
        parts[key] = _gpu_part(acc) if kind == GPU else _host_part(acc)
        if kind == GPU and acc.device_events == 0 and not acc.graph_launches:
            notes.append(
                f"rank {key}: {acc.runtime_calls} CUDA runtime calls on the host but no device activity in the trace "
                "(was the profiler run without ProfilerActivity.CUDA?)"
            )

    merged = _summary(_merged_part(list(parts.values())), categorize, names)
    if kind == CPU_HOST:
        notes.insert(0, CPU_HOST_NOTE)
    if merged.cuda_graph.hidden:
        notes.insert(0, merged.cuda_graph.note)
    if kind == GPU and not merged.kernels and not merged.cuda_graph.hidden and not notes:
        notes.append("no device activity in the trace")
    if kind == GPU and merged.kernels and not any(acc.kernel_events for acc in per_rank.values()):
        notes.append(NO_KERNELS_NOTE)
    return TraceSummary(
        kind=kind,
        files=tuple(files),
        merged=merged,
        ranks={key: _summary(part, categorize, names) for key, part in parts.items()} if by_rank else {},
        cuda_graph=merged.cuda_graph,
        notes=tuple(notes),
        category_rules=tuple(rules),
    )
