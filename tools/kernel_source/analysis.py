"""``analyze``: a kernel's launch grid, loops and resources at given shapes, as one GridReport.

The steps: find the kernel's definition and the launch to evaluate (locate.py, launches.py),
evaluate the launch per autotune config (grid.py), the loops each program runs (loops.py), per
config and architecture the compile's registers and the occupancy and waves (compile_args.py,
occupancy.py), then the report's verdicts (a serial reduction the grid does not cover, below one
wave), the padding programs (padding.py) and the diagnosis (diagnosis.py, ncu.py).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.pyeval.values import Unknown

from .compile_args import config_resources, pointer_params
from .diagnosis import diagnose
from .dtypes import canonical_dtype
from .expressions import evaluate
from .grid import Config, LaunchEval, autotune_configs, evaluate_launch, to_plain
from .grid_report import ConfigReport, GridReport
from .launches import LaunchSite, find_launch_sites
from .locate import KernelDef, find_kernel_definitions
from .loops import LoopInfo, analyze_loops, jit_helpers
from .ncu import summarize
from .occupancy import arch_limits, normalize_arch, occupancy, waves
from .padding import padded_heads, padded_programs
from .scope import Context, Notes, Scope
from .source_text import normalize_key
from .statements import module_scope
from .values import MetaDict


class KernelNotFound(ValueError):
    """No definition of the kernel under the given source."""


@dataclass(frozen=True)
class _CompileFor:
    """What the per-config compile needs besides the config: the kernel-argument dtypes given
    (name -> (dtype, forced pointer)), the parameters used as pointers, whether to compile at all,
    the interpreter, the int specialization, and the one config to compile (None: every config)."""

    dtypes: dict
    pointers: set
    enabled: bool
    python: str | None
    aligned_unknown_ints: bool
    only_label: str | None


def analyze(
    source: Path,
    kernel: str,
    shapes: dict[str, int],
    sms: int,
    arch: str | list[str] | None = None,
    chosen_config: dict | None = None,
    *,
    dtypes: dict[str, str] | None = None,
    launcher: str | None = None,
    compile: bool = True,
    python: str | None = None,
    real_heads: int | None = None,
    head_symbol: str | None = None,
    aligned_unknown_ints: bool = True,
    compile_all_configs: bool = True,
    ncu_csv: Path | None = None,
) -> GridReport:
    """Analyze kernel ``kernel`` found under ``source`` (a file or a directory tree).

    ``shapes`` pins symbols of the launcher or the kernel (``B``, ``topk``, or expression text such
    as ``q.shape[0]``) to values; ``sms`` is the SM count coverage and waves are computed for;
    ``arch`` (``sm_90``, ``sm_120``, or a list/comma-separated list) enables the ahead-of-time
    compile for registers/spills/shared memory and the occupancy; ``chosen_config`` is the config
    the box's autotuner reported. ``dtypes`` names kernel-argument dtypes the source does not
    show (``{"Q_ptr": "bf16"}``); ``python`` compiles with another interpreter's Triton.
    ``real_heads`` (with the shapes giving the padded head count) fills ``padding``.
    ``aligned_unknown_ints``: compile int arguments the source does not determine as multiples of
    16 (listed in each config's resource assumptions) rather than unspecialized.
    ``compile_all_configs=False`` compiles only the chosen config (when one is given and matches).
    ``diagnosis`` holds the bytes the programs load against the unique bytes, and the inner products
    (``diagnosis.diagnose``); with ``ncu_csv`` (an ``ncu --csv`` export) also Nsight Compute's
    throughputs and verdict under ``diagnosis["ncu"]`` (``ncu.summarize``).
    Raises KernelNotFound when no definition exists under ``source``.
    """
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist")
    notes = Notes()
    kdef, site, sites, others = _locate(source, kernel, launcher, notes)
    pinned = {normalize_key(k): v for k, v in shapes.items()}
    dtypes = {k: (canonical_dtype(v), v.strip().startswith("*")) for k, v in (dtypes or {}).items()}
    archs = _archs(arch)
    site_dicts = [s.to_dict() for s in sites]
    if kdef.kind == "cuda":
        notes.unresolved_symbol("CUDA kernel: launch expressions are reported as text; grid not evaluated")
        return _cuda_report(kdef, site, site_dicts, sms, archs, shapes, notes, others)
    if site is None:
        notes.unresolved_symbol(f"no launch of {kernel} found under {source}" + (f" in {launcher}" if launcher else "") + "; pass the directory that holds its launcher")

    evaluation = evaluate_launch(kdef, site, pinned, notes) if site is not None else None
    configs = evaluation.configs if evaluation else _configs_without_launch(kdef, notes)
    config_args = evaluation.config_args if evaluation else {c.label: {} for c in configs}
    grids = evaluation.grids if evaluation else {}
    kmodule = evaluation.kernel_scope if evaluation else module_scope(kdef.tree, Context(source=kdef.source, pinned=pinned, notes=notes))
    loops = _loops(kdef, kmodule, config_args, grids, pinned, evaluation)

    match = _match_chosen(chosen_config, configs) if chosen_config else None
    compile_for = _CompileFor(dtypes, pointer_params(kdef.node, kmodule), compile, python, aligned_unknown_ints,
                              only_label=match.label if match and not compile_all_configs else None)
    config_reports = [_config_report(kdef, config, config_args[config.label], grids.get(config.label), loops, sms, archs, notes, compile_for)
                      for config in configs]
    chosen = None
    if chosen_config:
        chosen = {"config": dict(chosen_config), "label": match.label if match else None}
        if match is None:
            notes.unresolved_symbol(f"chosen config {chosen_config} matches none of the kernel's configs")

    report = _report(kdef, site, site_dicts, evaluation, config_args, config_reports, loops, chosen, sms, archs, shapes, notes, others)
    _gather_notes(report, loops)
    if real_heads is not None:
        padded = padded_heads(report, head_symbol, shapes)
        report.padding = padded_programs(report, real_heads, padded, head_symbol=head_symbol)
    report.diagnosis = _diagnosis(kdef, kmodule, config_args, grids, loops, chosen, report.padding, ncu_csv, kernel,
                                  {name: dtype for name, (dtype, _) in dtypes.items()})
    return report


def _locate(source: Path, kernel: str, launcher: str | None, notes: Notes) -> tuple[KernelDef, LaunchSite | None, list, list]:
    """(the definition analyzed, the launch evaluated or None, every launch site, the other
    definitions as dicts); raises KernelNotFound."""
    definitions = find_kernel_definitions(source, kernel)
    if not definitions:
        raise KernelNotFound(f"no definition of kernel {kernel!r} under {source}")
    sites = find_launch_sites(source, kernel)
    kdef = _pick_definition(definitions, sites)
    others = [d.to_dict() for d in definitions if d is not kdef]
    if others:
        notes.assume(f"{len(definitions)} definitions of {kernel}; analyzed {kdef.file}:{kdef.line}")
    return kdef, _pick_site(sites, kdef, launcher), sites, others


def _loops(kdef: KernelDef, kmodule: Scope, config_args: dict, grids: dict, pinned: dict, evaluation: LaunchEval | None) -> list[LoopInfo]:
    """The loops of the kernel body, with their trip counts per config (each config run at its grid)."""
    def ctx_factory(label: str) -> Context:
        grid = grids.get(label)
        return Context(source=kdef.source, pinned=pinned, notes=Notes(), kernel_mode=True, grid=grid if isinstance(grid, tuple) else None)

    return analyze_loops(
        kdef.node,
        kdef.source,
        kmodule,
        config_args,
        ctx_factory,
        evaluation.arg_names if evaluation else {},
        evaluation.grid_symbols if evaluation else [],
        jit_helpers(kdef.tree),
    )


def _config_report(kdef: KernelDef, config: Config, values: dict, grid_value: Any, loops: list[LoopInfo], sms: int,
                   archs: list[str], notes: Notes, compile_for: _CompileFor) -> ConfigReport:
    """One config at its grid: programs, coverage, loop trips, and per architecture the compile's
    resources, the occupancy and the waves."""
    dims = _dims(grid_value)
    if isinstance(grid_value, Unknown):
        notes.unresolved_symbol(f"grid: {grid_value.text} ({grid_value.why})")
    elif isinstance(grid_value, tuple):
        for i, dim in enumerate(grid_value):
            if isinstance(dim, Unknown):
                notes.unresolved_symbol(f"grid axis {i}: {dim.text} ({dim.why})")
    programs = math.prod(dims) if dims and all(d is not None for d in dims) else None
    threads = config.num_warps * 32 if config.num_warps else None
    report = ConfigReport(
        label=config.label,
        config=config.as_dict(),
        source=config.source,
        threads_per_program=threads,
        grid=dims,
        programs=programs,
        coverage=programs / sms if programs is not None and sms else None,
        trip_counts={str(loop.line): loop.trip_counts.get(config.label) for loop in loops},
    )
    skip = compile_for.only_label is not None and config.label != compile_for.only_label
    for arch_name in archs:
        if skip:
            report.resources[arch_name] = {"arch": arch_name, "ok": False, "error": "not compiled: only the chosen config was asked for"}
        else:
            report.resources[arch_name] = config_resources(
                kdef, config, values, compile_for.dtypes, compile_for.pointers, arch_name, compile_for.enabled, compile_for.python,
                compile_for.aligned_unknown_ints,
            )
        _occupancy_figures(report, arch_name, threads, programs, sms)
    if not archs:
        report.below_one_wave["any"] = True if programs is not None and programs < sms else None
    return report


def _occupancy_figures(report: ConfigReport, arch_name: str, threads: int | None, programs: int | None, sms: int) -> None:
    """Occupancy, blocks per SM and waves on ``arch_name`` from its compile's resources."""
    usage = report.resources[arch_name]
    if usage.get("ok") and threads:
        occ = occupancy(arch_name, threads, usage["registers"], usage["shared_per_block"] or 0)
        report.occupancy[arch_name] = occ.to_dict()
        report.blocks_per_sm[arch_name] = occ.blocks_per_sm
        report.waves[arch_name] = waves(programs, sms, occ.blocks_per_sm) if programs is not None else None
        report.below_one_wave[arch_name] = report.waves[arch_name] < 1 if report.waves[arch_name] is not None else None
    else:
        report.occupancy[arch_name] = None
        report.blocks_per_sm[arch_name] = None
        report.waves[arch_name] = None
        # fewer programs than SMs is less than one wave whatever the occupancy
        report.below_one_wave[arch_name] = True if programs is not None and programs < sms else None


def _report(kdef, site, site_dicts, evaluation, config_args, config_reports, loops, chosen, sms, archs, shapes, notes, others) -> GridReport:
    """The report of a Triton kernel: the launch, the configs, and the verdicts taken over the chosen
    config (else every config): below one wave where all agree, a split-K candidate when some serial
    reduction loop is not covered by the grid and the programs are below one wave."""
    uncovered = [loop.line for loop in loops if loop.reduction and not loop.covered_by_grid]
    focus = [c for c in config_reports if chosen and c.label == chosen.get("label")] or config_reports
    below = [v for c in focus for v in c.below_one_wave.values()]
    below_one = True if below and all(v is True for v in below) else False if below and all(v is False for v in below) else None
    grid_top = _agreed([c.grid for c in focus])
    programs_top = _agreed([c.programs for c in focus])
    return GridReport(
        kernel=kdef.name,
        file=str(kdef.file),
        line=kdef.line,
        kind=kdef.kind,
        launcher=_launcher_dict(site),
        launch_sites=site_dicts,
        grid_expr=evaluation.grid_expr if evaluation else None,
        grid_var=evaluation.grid_var if evaluation else None,
        grid_symbols=evaluation.grid_symbols if evaluation else [],
        grid_axes=_axes_report(evaluation, config_args) if evaluation else [],
        grid=grid_top,
        programs=programs_top,
        sms=sms,
        coverage=programs_top / sms if programs_top is not None and sms else None,
        archs=archs,
        arch_limits={a: arch_limits(a).to_dict() for a in archs},
        autotune=to_plain(evaluation.autotune) if evaluation and evaluation.autotune else None,
        configs=config_reports,
        loops=loops,
        kernel_args=_kernel_args(kdef, evaluation, config_args),
        launch_options=to_plain(evaluation.launch_options) if evaluation else {},
        serial_reduction_uncovered=bool(uncovered),
        uncovered_reduction_loops=uncovered,
        below_one_wave=below_one,
        split_k_candidate=(bool(uncovered) and below_one) if below_one is not None else (False if not uncovered else None),
        chosen=chosen,
        shapes=dict(sorted(shapes.items())),
        assumptions=list(notes.assumptions),
        unresolved=list(notes.unresolved),
        overrides=list(notes.overrides),
        other_definitions=others,
    )


def _gather_notes(report: GridReport, loops: list[LoopInfo]) -> None:
    """Raise into the report's assumptions and unresolved what the compiles assumed, the kernel
    arguments left unknown, and the loops whose trip count is not known (once each)."""
    for config in report.configs:
        for usage in config.resources.values():
            for note in ((usage or {}).get("assumptions") or []) + ((usage or {}).get("source_notes") or []):
                entry = f"compile: {note}"
                if entry not in report.assumptions:
                    report.assumptions.append(entry)
    for name, entry in report.kernel_args.items():
        value = entry.get("value")
        if isinstance(value, dict) and "unknown" in value:
            text = f"argument {name} = {entry.get('launch_expr')}: {value['why']}"
            if text not in report.unresolved:
                report.unresolved.append(text)
    for loop in loops:
        for note in loop.trip_count_notes:
            if "first program" in note or "while loop" in note or "non-range" in note:
                continue
            entry = f"trip count of line {loop.line}: {note}"
            if entry not in report.unresolved:
                report.unresolved.append(entry)


def _pick_definition(definitions: list[KernelDef], sites: list[LaunchSite]) -> KernelDef:
    launched_files = {s.file for s in sites}
    return sorted(definitions, key=lambda d: (d.kind != "triton", d.file not in launched_files, str(d.file), d.line))[0]


def _pick_site(sites: list[LaunchSite], kernel: KernelDef, launcher: str | None) -> LaunchSite | None:
    candidates = [s for s in sites if (s.kind == "cuda") == (kernel.kind == "cuda")]
    if launcher:
        candidates = [s for s in candidates if s.launcher == launcher or s.launcher.split(".")[-1] == launcher or s.launcher.split(".")[0] == launcher]
    if not candidates:
        return None
    return sorted(candidates, key=lambda s: (s.grid_node is None and s.kind != "cuda", s.file != kernel.file, str(s.file), s.line))[0]


def _match_chosen(chosen: dict, configs: list[Config]) -> Config | None:
    for config in configs:
        flat = config.as_dict()
        if all(flat.get(k) == v for k, v in chosen.items() if k in flat or k in config.kwargs):
            if all(k in flat for k in chosen if k not in ("num_ctas", "maxnreg")):
                return config
    return None


def _dims(value: Any) -> list | None:
    if isinstance(value, tuple):
        return [v if isinstance(v, int) and not isinstance(v, bool) else None for v in value]
    return None


def _diagnosis(kdef, kmodule, config_args, grids, loops, chosen, padding, ncu_csv, kernel, dtypes) -> dict:
    """The diagnosis, or its failure as data: a grid report stays useful when the diagnosis is not."""
    try:
        result = diagnose(kdef, kmodule, config_args, grids, loops, (chosen or {}).get("label"), padding, dtypes)
    except Exception as exc:  # reported, not raised: the grid and loops above are still measured facts
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["ncu"] = summarize(ncu_csv, kernel=kernel)
    return result


def _agreed(values: list) -> Any:
    if values and all(v == values[0] for v in values):
        return values[0]
    return None


def _archs(arch: str | list[str] | None) -> list[str]:
    if arch is None:
        return []
    items = arch.split(",") if isinstance(arch, str) else list(arch)
    return [normalize_arch(a) for a in items if str(a).strip()]


def _launcher_dict(site: LaunchSite | None) -> dict | None:
    if site is None:
        return None
    return {
        "function": site.launcher,
        "file": str(site.file),
        "line": site.launcher_line,
        "launch_line": site.line,
        "where": f"{site.file}:{site.line}",
        "kind": site.kind,
    }


def _axes_report(evaluation: LaunchEval, config_args: dict[str, dict]) -> list[dict]:
    out = []
    for axis in evaluation.axes:
        entry = axis.to_dict()
        units_by_config: dict[str, dict[str, int | None]] = {}
        for config in evaluation.configs:
            values: dict[str, int | None] = {}
            for symbol, text in axis.units.items():
                values[symbol] = _evaluate_unit(text, evaluation, config, config_args[config.label])
            units_by_config[config.label] = values
        entry["units_by_config"] = units_by_config
        out.append(entry)
    return out


def _evaluate_unit(text: str, evaluation: LaunchEval, config: Config, args: dict) -> int | None:
    node = ast.parse(text, mode="eval").body
    scope = Scope(evaluation.ctx, evaluation.scope)
    meta = MetaDict(args)
    meta.update(config.kwargs)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name):
            scope.values[sub.value.id] = meta
    value = evaluate(node, scope)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _kernel_args(kdef: KernelDef, evaluation: LaunchEval | None, config_args: dict[str, dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for param in kdef.params:
        values = {label: to_plain(args.get(param.name)) for label, args in config_args.items()}
        distinct = {repr(v) for v in values.values()}
        entry = {
            "launch_expr": evaluation.arg_texts.get(param.name) if evaluation else None,
            "constexpr": param.constexpr,
        }
        if len(distinct) <= 1:
            entry["value"] = next(iter(values.values()), None)
        else:
            entry["value_by_config"] = values
        out[param.name] = entry
    return out


def _configs_without_launch(kdef: KernelDef, notes: Notes) -> list[Config]:
    ctx = Context(source=kdef.source, pinned={}, notes=notes)
    configs, _ = autotune_configs(kdef, module_scope(kdef.tree, ctx), notes)
    return configs or [Config(label="launch", kwargs={}, num_warps=4, num_stages=3, source="launch")]


def _cuda_report(kdef, site, site_dicts, sms, archs, shapes, notes, others) -> GridReport:
    return GridReport(
        kernel=kdef.name, file=str(kdef.file), line=kdef.line, kind="cuda", launcher=_launcher_dict(site), launch_sites=site_dicts,
        grid_expr=site.grid_text if site else None, grid_var=None, grid_symbols=[], grid_axes=[], grid=None, programs=None, sms=sms,
        coverage=None, archs=archs, arch_limits={a: arch_limits(a).to_dict() for a in archs}, autotune=None, configs=[], loops=[],
        kernel_args={}, launch_options={}, serial_reduction_uncovered=False, uncovered_reduction_loops=[], below_one_wave=None,
        split_k_candidate=None, chosen=None, shapes=dict(sorted(shapes.items())), assumptions=list(notes.assumptions),
        unresolved=list(notes.unresolved), overrides=list(notes.overrides), other_definitions=others,
    )


__all__ = ["KernelNotFound", "analyze"]
