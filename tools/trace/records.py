"""The records trace analysis returns: plain dataclasses whose to_dict() is JSON and from_dict() its inverse.

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
