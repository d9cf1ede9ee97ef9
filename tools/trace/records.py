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
class RankSummary:
    """Kernel table and timeline of one rank, or of all ranks merged.

    window_us: per GPU (per host process on cpu-host traces), first kernel start to last kernel
    end; summed over GPUs when there are several (merged ranks), so that idle_share is the share
    of GPU time in the windows with no kernel running. kernel_time_us: sum of kernel durations
    (overlapping kernels both count; the shares divide by it). busy_us: length of the union of
    kernel intervals. idle_us = window_us - busy_us. steps: ProfilerStep#N ranges seen (the
    maximum over ranks when merged). devices: GPUs (or host processes) with kernels.
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

    def to_dict(self) -> dict[str, Any]:
        return {
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
