"""The records trace analysis returns: plain dataclasses whose to_dict() is JSON and from_dict() its inverse
(the attribution's records, OpKernel to Attribution, are only written: they have no from_dict()).

Times are microseconds (the trace's unit) as floats; a share or ratio with nothing to divide by is
None (JSON null), never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KernelRow:
    """One kernel name's line in a table; share is of the table's kernel_time_us."""

    name: str
    category: str
    calls: int
    total_us: float
    mean_us: float
    share: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "category": self.category,
            "calls": self.calls,
            "total_us": self.total_us,
            "mean_us": self.mean_us,
            "share": self.share,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelRow:
        return cls(
            name=data["name"],
            category=data["category"],
            calls=int(data["calls"]),
            total_us=float(data["total_us"]),
            mean_us=float(data["mean_us"]),
            share=None if data["share"] is None else float(data["share"]),
        )


@dataclass(frozen=True)
class CudaGraphInfo:
    """CUDA-graph launches on the host and the device events correlated to them.

    hidden is True when some graph launch has no kernel correlated to it: those kernels ran but are
    not in the trace, so the kernel table is incomplete and must not be ranked.
    """

    launches: int = 0
    launches_with_kernels: int = 0
    correlated_kernels: int = 0
    hidden: bool = False
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "launches": self.launches,
            "launches_with_kernels": self.launches_with_kernels,
            "correlated_kernels": self.correlated_kernels,
            "hidden": self.hidden,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CudaGraphInfo:
        return cls(
            launches=int(data["launches"]),
            launches_with_kernels=int(data["launches_with_kernels"]),
            correlated_kernels=int(data["correlated_kernels"]),
            hidden=bool(data["hidden"]),
            note=str(data["note"]),
        )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class StepWindow:
    """One ``ProfilerStep#N`` seen from the device (summed over devices when merged).

    window_us: the step's first kernel start to its last kernel end; busy_us: the union of its
    kernels; kernel_time_us: their summed durations; idle_before_us: device idle between the
    previous step's last kernel and this step's first (the profiler's own sync and ``prof.step()``
    gap; None for the first step). On cpu-host traces the kernels are the outermost host ranges.
    """

    step: int
    window_us: float
    busy_us: float
    kernel_time_us: float
    idle_before_us: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "window_us": self.window_us,
            "busy_us": self.busy_us,
            "kernel_time_us": self.kernel_time_us,
            "idle_before_us": self.idle_before_us,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepWindow:
        return cls(
            step=int(data["step"]),
            window_us=float(data["window_us"]),
            busy_us=float(data["busy_us"]),
            kernel_time_us=float(data["kernel_time_us"]),
            idle_before_us=_float_or_none(data["idle_before_us"]),
        )


@dataclass(frozen=True)
class RankSummary:
    """Kernel table and timeline of one rank, or of all ranks merged.

    window_us: per GPU (per host process on cpu-host traces), first kernel start to last kernel
    end; summed over GPUs when there are several (merged ranks), so that idle_share is the share
    of GPU time in the windows with no kernel running. kernel_time_us: sum of kernel durations
    (overlapping kernels both count; the shares divide by it). busy_us: length of the union of
    kernel intervals. idle_us = window_us - busy_us. steps: ProfilerStep#N ranges seen (the
    maximum over ranks when merged). devices: GPUs (or host processes) with kernels.

    The profiler's own gaps, from the ``ProfilerStep#N`` ranges (the device-side ones on GPU
    traces): in_step_window_us, the steps' windows summed; between_steps_idle_us, the device idle
    between consecutive steps (kept out of a step's time T); outside_steps_us, kernel time in no
    step; step_windows, per step. The three numbers are None when the trace has no step ranges.
    """

    window_us: float
    kernel_time_us: float
    busy_us: float
    idle_us: float
    idle_share: float | None
    steps: int
    devices: int
    kernels: tuple[KernelRow, ...]
    categories: dict[str, float]
    cuda_graph: CudaGraphInfo
    in_step_window_us: float | None = None
    between_steps_idle_us: float | None = None
    outside_steps_us: float | None = None
    step_windows: tuple[StepWindow, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "in_step_window_us": self.in_step_window_us,
            "between_steps_idle_us": self.between_steps_idle_us,
            "outside_steps_us": self.outside_steps_us,
            "step_windows": [w.to_dict() for w in self.step_windows],
            "window_us": self.window_us,
            "kernel_time_us": self.kernel_time_us,
            "busy_us": self.busy_us,
            "idle_us": self.idle_us,
            "idle_share": self.idle_share,
            "steps": self.steps,
            "devices": self.devices,
            "kernels": [row.to_dict() for row in self.kernels],
            "categories": dict(self.categories),
            "cuda_graph": self.cuda_graph.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankSummary:
        return cls(
            window_us=float(data["window_us"]),
            kernel_time_us=float(data["kernel_time_us"]),
            busy_us=float(data["busy_us"]),
            idle_us=float(data["idle_us"]),
            idle_share=_float_or_none(data["idle_share"]),
            steps=int(data["steps"]),
            devices=int(data["devices"]),
            kernels=tuple(KernelRow.from_dict(row) for row in data["kernels"]),
            categories={str(k): float(v) for k, v in data["categories"].items()},
            cuda_graph=CudaGraphInfo.from_dict(data["cuda_graph"]),
            # Absent from summaries recorded before step windows were reported.
            in_step_window_us=_float_or_none(data.get("in_step_window_us")),
            between_steps_idle_us=_float_or_none(data.get("between_steps_idle_us")),
            outside_steps_us=_float_or_none(data.get("outside_steps_us")),
            step_windows=tuple(StepWindow.from_dict(w) for w in data.get("step_windows", ())),
        )


@dataclass(frozen=True)
class TraceFile:
    """One input file: its path as given, the rank keys found in it, and its event count."""

    path: str
    ranks: tuple[str, ...]
    events: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "ranks": list(self.ranks), "events": self.events}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceFile:
        return cls(path=str(data["path"]), ranks=tuple(str(r) for r in data["ranks"]), events=int(data["events"]))


@dataclass(frozen=True)
class TraceSummary:
    """Everything summarize() found in a set of trace files.

    kind: "gpu" (device kernels) or "cpu-host" (no device activity: the "kernels" are the outermost
    host ranges of each thread, i.e. interpreter/CPU measurements, not GPU time). merged: all ranks
    together; ranks: per rank key (filled when asked for by_rank). cuda_graph: merged graph-launch
    accounting (hidden if any rank's is). notes: what a reader must know (incomplete traces...).
    category_rules: the [category, regex] table used.
    """

    kind: str
    files: tuple[TraceFile, ...]
    merged: RankSummary
    ranks: dict[str, RankSummary]
    cuda_graph: CudaGraphInfo
    notes: tuple[str, ...] = ()
    category_rules: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "files": [f.to_dict() for f in self.files],
            "merged": self.merged.to_dict(),
            "ranks": {key: summary.to_dict() for key, summary in self.ranks.items()},
            "cuda_graph": self.cuda_graph.to_dict(),
            "notes": list(self.notes),
            "category_rules": [list(rule) for rule in self.category_rules],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceSummary:
        return cls(
            kind=str(data["kind"]),
            files=tuple(TraceFile.from_dict(f) for f in data["files"]),
            merged=RankSummary.from_dict(data["merged"]),
            ranks={str(key): RankSummary.from_dict(value) for key, value in data["ranks"].items()},
            cuda_graph=CudaGraphInfo.from_dict(data["cuda_graph"]),
            notes=tuple(str(n) for n in data["notes"]),
            category_rules=tuple((str(c), str(p)) for c, p in data["category_rules"]),
        )


@dataclass(frozen=True)
class OpKernel:
    """One kernel name inside an operation row."""

    name: str
    calls: int
    total_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "total_us": self.total_us}


@dataclass(frozen=True)
class OpRow:
    """Kernel time launched from one frame. source: "record_function", "python", "aten" (the
    outermost aten op, when nothing else encloses the launch), "graph", "none". frame: the Python
    frame (function, file, line) where known. calls: frame instances that launched its kernels."""

    name: str
    source: str
    frame: dict[str, Any] | None
    calls: int
    total_us: float
    share: float | None
    kernels: tuple[OpKernel, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "frame": self.frame, "calls": self.calls,
                "total_us": self.total_us, "share": self.share, "kernels": [k.to_dict() for k in self.kernels]}


@dataclass(frozen=True)
class DominantOp:
    """The dominant kernel's operation: its frame, total GPU time and kernels.

    kernel_total_us: the kernel's own total; coverage: the share of that total whose launches lie
    in this operation; share: total_us of all kernel time; per_step_us: total_us per profiled step.
    """

    status: str
    message: str
    kernel: str
    kernel_total_us: float
    name: str | None = None
    source: str | None = None
    frame: dict[str, Any] | None = None
    total_us: float | None = None
    share: float | None = None
    coverage: float | None = None
    calls: int = 0
    kernels: tuple[OpKernel, ...] = ()
    rule: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "kernel": self.kernel,
                "kernel_total_us": self.kernel_total_us, "name": self.name, "source": self.source,
                "frame": self.frame, "total_us": self.total_us, "share": self.share, "coverage": self.coverage,
                "calls": self.calls, "kernels": [k.to_dict() for k in self.kernels], "rule": self.rule}


@dataclass(frozen=True)
class Attribution:
    """What attribute() found. kind: "gpu" or "cpu-host". status: ATTRIBUTED, NEEDS_EAGER,
    NO_FRAMES, NO_LAUNCHES or NO_DOMINANT (that of the dominant operation when one was sought).
    kernels/linked/graph_linked: kernel events, those linked to a launch, those to a graph launch.
    with_stack: the trace holds Python frames; annotations: record_function ranges that can enclose
    kernels (on cpu-host traces only ``op:NAME`` ones: the others are the kernels). rows: kernel time by launching frame, largest first."""

    kind: str
    status: str
    message: str
    files: tuple[str, ...]
    kernel_time_us: float
    kernels: int
    linked: int
    graph_linked: int
    with_stack: bool
    annotations: bool
    rows: tuple[OpRow, ...]
    dominant: DominantOp | None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status, "message": self.message, "files": list(self.files),
                "kernel_time_us": self.kernel_time_us, "kernels": self.kernels, "linked": self.linked,
                "graph_linked": self.graph_linked, "with_stack": self.with_stack, "annotations": self.annotations,
                "rows": [r.to_dict() for r in self.rows],
                "dominant": None if self.dominant is None else self.dominant.to_dict()}
