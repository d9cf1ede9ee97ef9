"""``analyze``: a kernel's launch grid, loops and resources at given shapes, as one GridReport."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .evaluate import Context, MetaDict, Notes, Scope, Tensor, Unknown, canonical_dtype, evaluate, normalize_key
from .grid import Config, LaunchEval, evaluate_launch, to_plain
from .launches import LaunchSite, find_launch_sites
from .locate import KernelDef, find_kernel_definitions
from .loops import LoopInfo, analyze_loops, jit_helpers
from .occupancy import arch_limits, normalize_arch, occupancy, waves
from .resources import compile_resources

_HEAD_NAMES = ("H", "h", "h_q", "num_heads", "nheads", "head_num", "num_q_heads", "n_heads", "heads", "num_head", "q_heads", "H_q")


class KernelNotFound(ValueError):
    """No definition of the kernel under the given source."""


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


def _pointer_params(fn: ast.FunctionDef, module: Scope) -> set[str]:
    """Parameters used as the base of an address (additive term of a load/store pointer, followed
    through assignments), for arguments whose type the launcher does not show."""
    from .loops import _triton_function

    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and isinstance(node.op, (ast.Add, ast.Sub)):
            assigned.setdefault(node.target.id, []).append(ast.BinOp(left=ast.Name(node.target.id, ast.Load()), op=node.op, right=node.value))
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    found: set[str] = set()
    seen: set[str] = set()

    def additive(expr: ast.expr) -> None:
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
            additive(expr.left)
            additive(expr.right)
        elif isinstance(expr, ast.Name):
            if expr.id in params:
                found.add(expr.id)
            if expr.id not in seen:
                seen.add(expr.id)
                for value in assigned.get(expr.id, []):
                    additive(value)
        elif isinstance(expr, ast.Subscript):
            additive(expr.value)
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("to", "cast"):
            additive(expr.func.value)

    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and _triton_function(node, module) in (
            "load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "make_block_ptr", "make_tensor_descriptor",
        ):
            pointer = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg in ("pointer", "base")), None)
            if pointer is not None:
                additive(pointer)
    return found


ALIGNED_STAND_IN = 1 << 20  # an int Triton specializes as divisible by 16 (and not as the constant 1)


def compile_arguments(
    kernel: KernelDef, values: dict[str, Any], dtypes: dict, pointers: set[str], aligned_unknown_ints: bool = True
) -> tuple[list[dict], list[str], list[str]]:
    """Arguments for the AOT compile: (args, assumptions, blockers).

    Unknown int arguments are compiled as multiples of 16 by default (``aligned_unknown_ints``),
    since that specialization changes the code (vector widths, registers) and aligned strides and
    sizes are the common case; each such choice is listed in the assumptions.
    """
    args: list[dict] = []
    assumptions: list[str] = []
    blockers: list[str] = []
    for param in kernel.params:
        value = values.get(param.name)
        name = param.name
        if param.constexpr:
            if isinstance(value, Unknown):
                blockers.append(f"constexpr {name} unknown ({value.why}); pass --shape {name}=VALUE")
                continue
            if isinstance(value, Tensor):
                blockers.append(f"constexpr {name} receives a tensor")
                continue
            args.append({"name": name, "kind": "constexpr", "value": value})
            continue
        if name in dtypes:
            dtype, forced_pointer = dtypes[name]
            if forced_pointer or isinstance(value, Tensor) or (name in pointers and not isinstance(value, (int, float))):
                args.append({"name": name, "kind": "tensor", "dtype": dtype})
            else:
                known = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
                args.append(_scalar(name, known, dtype))
            continue
        if isinstance(value, Tensor):
            if value.dtype is None:
                blockers.append(f"dtype of tensor argument {name} unknown; pass --dtype {name}=DTYPE")
                continue
            if "assumed" in value.origin:
                assumptions.append(f"{name}: {value.origin}")
            args.append({"name": name, "kind": "tensor", "dtype": value.dtype})
        elif value is None:
            args.append({"name": name, "kind": "none"})
        elif isinstance(value, bool):
            args.append({"name": name, "kind": "bool", "value": value})
        elif isinstance(value, int):
            args.append({"name": name, "kind": "int" if -(2**31) <= value < 2**31 else "int64", "value": value})
        elif isinstance(value, float):
            args.append({"name": name, "kind": "float", "value": value})
        elif isinstance(value, Unknown):
            annotation = (param.annotation or "").replace("tl.", "").replace("triton.language.", "")
            if annotation.startswith(("float", "bfloat")):
                args.append({"name": name, "kind": "float", "value": None})
            elif annotation == "int64":
                args.append({"name": name, "kind": "int64", "value": ALIGNED_STAND_IN if aligned_unknown_ints else None})
            elif name in pointers and not annotation:
                blockers.append(f"{name} is a pointer whose dtype is not known ({value.text}); pass --dtype {name}=DTYPE")
            elif aligned_unknown_ints:
                args.append({"name": name, "kind": "int", "value": ALIGNED_STAND_IN})
                assumptions.append(
                    f"{name}: value unknown ({value.text}); compiled as a multiple of 16 (Triton specializes such ints, as "
                    "strides and sizes of aligned tensors are); pass --shape to give the value"
                )
            else:
                args.append({"name": name, "kind": "int", "value": None})
                assumptions.append(f"{name}: value unknown ({value.text}); compiled as an int32 without value specialization")
        else:
            blockers.append(f"argument {name} has a value the compile cannot take: {value!r}")
    return args, assumptions, blockers


def _scalar(name: str, value: Any, dtype: str) -> dict:
    if dtype.startswith(("float", "bfloat")):
        return {"name": name, "kind": "float", "value": value}
    if dtype == "int64":
        return {"name": name, "kind": "int64", "value": value}
    if dtype == "bool":
        return {"name": name, "kind": "bool", "value": bool(value)}
    return {"name": name, "kind": "int", "value": value}


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
    definitions = find_kernel_definitions(source, kernel)
    if not definitions:
        raise KernelNotFound(f"no definition of kernel {kernel!r} under {source}")
    sites = find_launch_sites(source, kernel)
    kdef = _pick_definition(definitions, sites)
    others = [d.to_dict() for d in definitions if d is not kdef]
    notes = Notes()
    pinned = {normalize_key(k): v for k, v in shapes.items()}
    dtypes = {k: (canonical_dtype(v), v.strip().startswith("*")) for k, v in (dtypes or {}).items()}
    archs = _archs(arch)
    if others:
        notes.assume(f"{len(definitions)} definitions of {kernel}; analyzed {kdef.file}:{kdef.line}")

    site = _pick_site(sites, kdef, launcher)
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

    module_ctx = Context(source=kdef.source, pinned=pinned, notes=notes)
    from .evaluate import module_scope

    kmodule = evaluation.kernel_scope if evaluation else module_scope(kdef.tree, module_ctx)
    helpers = jit_helpers(kdef.tree)

    def ctx_factory(label: str) -> Context:
        grid = grids.get(label)
        return Context(source=kdef.source, pinned=pinned, notes=Notes(), kernel_mode=True, grid=grid if isinstance(grid, tuple) else None)

    loops = analyze_loops(
        kdef.node,
        kdef.source,
        kmodule,
        config_args,
        ctx_factory,
        evaluation.arg_names if evaluation else {},
        evaluation.grid_symbols if evaluation else [],
        helpers,
    )

    pointers = _pointer_params(kdef.node, kmodule)
    config_reports: list[ConfigReport] = []
    for config in configs:
        grid_value = grids.get(config.label)
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
        chosen_label = _match_chosen(chosen_config, configs).label if chosen_config and _match_chosen(chosen_config, configs) else None
        skip = not compile_all_configs and chosen_label is not None and config.label != chosen_label
        for arch_name in archs:
            if skip:
                report.resources[arch_name] = {"arch": arch_name, "ok": False, "error": "not compiled: only the chosen config was asked for"}
            else:
                report.resources[arch_name] = _resources(
                    kdef, config, config_args[config.label], dtypes, pointers, arch_name, compile, python, aligned_unknown_ints
                )
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
        if not archs:
            report.below_one_wave["any"] = True if programs is not None and programs < sms else None
        config_reports.append(report)

    chosen = None
    if chosen_config:
        match = _match_chosen(chosen_config, configs)
        chosen = {"config": dict(chosen_config), "label": match.label if match else None}
        if match is None:
            notes.unresolved_symbol(f"chosen config {chosen_config} matches none of the kernel's configs")

    uncovered = [loop.line for loop in loops if loop.reduction and not loop.covered_by_grid]
    focus = [c for c in config_reports if chosen and c.label == chosen.get("label")] or config_reports
    below = [v for c in focus for v in c.below_one_wave.values()]
    below_one = True if below and all(v is True for v in below) else False if below and all(v is False for v in below) else None
    grid_top = _agreed([c.grid for c in focus])
    programs_top = _agreed([c.programs for c in focus])

    report = GridReport(
        kernel=kernel,
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
    for config in config_reports:
        for arch_name, usage in config.resources.items():
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
    if real_heads is not None:
        padded = _padded_heads(report, head_symbol, shapes)
        report.padding = padded_programs(report, real_heads, padded, head_symbol=head_symbol)
    report.diagnosis = _diagnosis(kdef, kmodule, config_args, grids, loops, chosen, report.padding, ncu_csv, kernel,
                                  {name: dtype for name, (dtype, _) in dtypes.items()})
    return report


def _diagnosis(kdef, kmodule, config_args, grids, loops, chosen, padding, ncu_csv, kernel, dtypes) -> dict:
    """The diagnosis, or its failure as data: a grid report stays useful when the diagnosis is not."""
    from .diagnosis import diagnose
    from .ncu import summarize

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


def _resources(
    kdef: KernelDef, config: Config, values: dict, dtypes: dict, pointers: set[str], arch: str, enabled: bool, python: str | None, aligned_unknown_ints: bool
) -> dict:
    if not enabled:
        return {"arch": arch, "ok": False, "error": "compile disabled"}
    args, assumptions, blockers = compile_arguments(kdef, values, dtypes, pointers, aligned_unknown_ints)
    if blockers:
        return {"arch": arch, "ok": False, "error": "; ".join(blockers), "assumptions": assumptions}
    request = {
        "kernel_file": str(kdef.file),
        "kernel_name": kdef.name,
        "arch": arch,
        "args": args,
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": config.num_ctas if config.num_ctas not in (None, 1) else None,
        "maxnreg": config.maxnreg,
    }
    usage = compile_resources(request, python=python)
    usage["assumptions"] = assumptions
    return usage


def _configs_without_launch(kdef: KernelDef, notes: Notes) -> list[Config]:
    from .evaluate import module_scope
    from .grid import _autotune

    ctx = Context(source=kdef.source, pinned={}, notes=notes)
    configs, _ = _autotune(kdef, module_scope(kdef.tree, ctx), notes)
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


def _head_axis(report: GridReport, head_symbol: str | None) -> tuple[int, str] | None:
    for index, axis in enumerate(report.grid_axes):
        for symbol in axis["units"]:
            if (head_symbol and symbol == head_symbol) or (not head_symbol and symbol in _HEAD_NAMES):
                return index, symbol
    return None


def _padded_heads(report: GridReport, head_symbol: str | None, shapes: dict[str, int]) -> int:
    found = _head_axis(report, head_symbol)
    if found is None:
        raise ValueError("no grid axis over heads found; name it with head_symbol")
    symbol = found[1]
    if symbol in shapes:
        return shapes[symbol]
    value = report.kernel_args.get(symbol, {}).get("value")
    if isinstance(value, int):
        return value
    raise ValueError(f"the padded head count ({symbol}) is not among the shapes")


def padded_programs(report: GridReport, real_heads: int, padded_heads: int, head_symbol: str | None = None) -> dict:
    """How many programs compute only padding heads (head index >= ``real_heads``), per config.

    The head axis is the grid axis whose expression is the head symbol or ``cdiv(head, K)``
    (K heads per program); a program holding real and padded heads counts as real.
    """
    found = _head_axis(report, head_symbol)
    if found is None:
        raise ValueError("no grid axis over heads found; name it with head_symbol")
    index, symbol = found
    axis = report.grid_axes[index]
    by_config: dict[str, dict] = {}
    for config in report.configs:
        per_program = axis.get("units_by_config", {}).get(config.label, {}).get(symbol)
        if per_program is None or config.grid is None or any(d is None for d in config.grid):
            by_config[config.label] = {"padding_programs": None, "programs": config.programs}
            continue
        extent = config.grid[index]
        padded_extent = -(-padded_heads // per_program)
        real_extent = -(-real_heads // per_program)
        others = math.prod(d for i, d in enumerate(config.grid) if i != index)
        padding = max(0, padded_extent - real_extent) * others
        by_config[config.label] = {
            "heads_per_program": per_program,
            "head_axis_extent": extent,
            "consistent": extent == padded_extent,  # the grid was evaluated at padded_heads
            "real_head_programs_on_axis": real_extent,
            "padding_programs": padding,
            "programs": config.programs,
            "padding_share": padding / config.programs if config.programs else None,
        }
    values = [v["padding_programs"] for v in by_config.values()]
    return {
        "head_axis": index,
        "head_symbol": symbol,
        "real_heads": real_heads,
        "padded_heads": padded_heads,
        "padding_programs": values[0] if values and all(v == values[0] for v in values) else None,
        "by_config": by_config,
    }


__all__ = ["GridReport", "ConfigReport", "KernelNotFound", "analyze", "padded_programs", "compile_arguments"]
