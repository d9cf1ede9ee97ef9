"""The grid tool's report: ``GridReport`` for one kernel (where it is, how it is launched, how the work
spreads over the SMs, its loops, registers and diagnosis) and a ``ConfigReport`` per autotune config;
``to_dict`` is the JSON the box prints."""

from __future__ import annotations

from dataclasses import dataclass, field

from .loops import LoopInfo


@dataclass
class ConfigReport:
    label: str
    config: dict  # flat: constexprs + num_warps + num_stages
    source: str
    threads_per_program: int | None
    grid: list | None
    programs: int | None
    coverage: float | None
    trip_counts: dict[str, int | None] = field(default_factory=dict)  # loop line -> count
    resources: dict[str, dict] = field(default_factory=dict)  # arch -> ResourceUsage dict
    occupancy: dict[str, dict] = field(default_factory=dict)  # arch -> Occupancy dict
    blocks_per_sm: dict[str, int | None] = field(default_factory=dict)
    waves: dict[str, float | None] = field(default_factory=dict)
    below_one_wave: dict[str, bool | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "config": self.config,
            "source": self.source,
            "threads_per_program": self.threads_per_program,
            "grid": self.grid,
            "programs": self.programs,
            "coverage": self.coverage,
            "trip_counts": dict(self.trip_counts),
            "resources": self.resources,
            "occupancy": self.occupancy,
            "blocks_per_sm": self.blocks_per_sm,
            "waves": self.waves,
            "below_one_wave": self.below_one_wave,
        }


@dataclass
class GridReport:
    """What the grid step needs about one kernel: where it is, how it is launched, how the work
    spreads over the SMs, what each program loops over, and what it costs in registers."""

    kernel: str
    file: str
    line: int
    kind: str
    launcher: dict | None
    launch_sites: list[dict]
    grid_expr: str | None
    grid_var: str | None
    grid_symbols: list[str]
    grid_axes: list[dict]
    grid: list | None
    programs: int | None
    sms: int
    coverage: float | None
    archs: list[str]
    arch_limits: dict[str, dict]
    autotune: dict | None
    configs: list[ConfigReport]
    loops: list[LoopInfo]
    kernel_args: dict[str, dict]
    launch_options: dict
    serial_reduction_uncovered: bool
    uncovered_reduction_loops: list[int]
    below_one_wave: bool | None
    split_k_candidate: bool | None
    chosen: dict | None
    shapes: dict[str, int]
    assumptions: list[str]
    unresolved: list[str]
    overrides: list[str]
    other_definitions: list[dict] = field(default_factory=list)
    padding: dict | None = None
    diagnosis: dict | None = None  # diagnosis.diagnose: bytes loaded/unique, inner products; ncu where given

    def config(self, label: str) -> ConfigReport:
        return next(c for c in self.configs if c.label == label)

    def to_dict(self) -> dict:
        return {
            "kernel": self.kernel,
            "file": self.file,
            "line": self.line,
            "kind": self.kind,
            "launcher": self.launcher,
            "launch_sites": self.launch_sites,
            "grid_expr": self.grid_expr,
            "grid_var": self.grid_var,
            "grid_symbols": self.grid_symbols,
            "grid_axes": self.grid_axes,
            "grid": self.grid,
            "programs": self.programs,
            "sms": self.sms,
            "coverage": self.coverage,
            "archs": self.archs,
            "arch_limits": self.arch_limits,
            "autotune": self.autotune,
            "configs": [c.to_dict() for c in self.configs],
            "loops": [loop.to_dict() for loop in self.loops],
            "kernel_args": self.kernel_args,
            "launch_options": self.launch_options,
            "serial_reduction_uncovered": self.serial_reduction_uncovered,
            "uncovered_reduction_loops": self.uncovered_reduction_loops,
            "below_one_wave": self.below_one_wave,
            "split_k_candidate": self.split_k_candidate,
            "chosen": self.chosen,
            "shapes": self.shapes,
            "assumptions": self.assumptions,
            "unresolved": self.unresolved,
            "overrides": self.overrides,
            "other_definitions": self.other_definitions,
            "padding": self.padding,
            "diagnosis": self.diagnosis,
        }

