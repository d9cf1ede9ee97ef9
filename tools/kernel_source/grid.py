"""Evaluate one launch: the launcher's scope at the launch, the grid, the kernel's arguments, configs."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from tools.pyeval.syntax import assign_targets
from tools.pyeval.values import Builtin, ModuleRef, Unknown

from .dtypes import canonical_dtype
from .expressions import call_closure, evaluate
from .scope import Context, Notes, Scope
from .source_text import segment
from .statements import execute, module_scope, names_in
from .values import Closure, ConfigValue, DType, MetaDict, Tensor
from .launches import LaunchSite
from .locate import KernelDef

TRITON_LAUNCH_OPTIONS = {
    "num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_cooperative_grid",
    "launch_pdl", "debug", "sanitize_overflow", "num_buffers_warp_spec", "num_consumer_groups",
    "reg_dec_producer", "reg_inc_consumer", "extern_libs", "warp_size", "waves_per_eu", "matrix_instr_nonkdim", "kpack",
}
CUDA_DEFAULT_NUM_WARPS = 4  # triton.backends.nvidia.compiler.CUDAOptions
CUDA_DEFAULT_NUM_STAGES = 3


@dataclass
class Config:
    """One configuration a launch can compile to: an autotune candidate, or the launch's own options."""

    label: str
    kwargs: dict
    num_warps: int | None
    num_stages: int | None
    num_ctas: int | None = 1
    maxnreg: int | None = None
    source: str = "autotune"  # "autotune" | "launch"
    text: str = ""

    def as_dict(self) -> dict:
        """The flat form the box and autotuner report: constexprs plus num_warps/num_stages."""
        out = dict(self.kwargs)
        out["num_warps"] = self.num_warps
        out["num_stages"] = self.num_stages
        return out

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "kwargs": dict(self.kwargs),
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "num_ctas": self.num_ctas,
            "maxnreg": self.maxnreg,
            "source": self.source,
            "text": self.text,
        }


@dataclass
class Axis:
    expr: str
    symbols: list[str]
    units: dict[str, str]  # symbol -> how many of it one program covers (source text), e.g. {"h_q": "BLOCK_H"}
    node: ast.expr | None = None

    def to_dict(self) -> dict:
        return {"expr": self.expr, "symbols": list(self.symbols), "units": dict(self.units)}


@dataclass
class LaunchEval:
    site: LaunchSite
    ctx: Context
    scope: Scope
    kernel_scope: Scope
    grid_expr: str
    grid_var: str | None
    grid_line: int | None
    grid_symbols: list[str]
    axes: list[Axis]
    arg_texts: dict[str, str]
    arg_names: dict[str, list[str]]  # kernel param -> launcher names its argument reads
    launch_args: dict[str, Any]
    launch_options: dict[str, Any]
    configs: list[Config]
    config_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    grids: dict[str, Any] = field(default_factory=dict)
    autotune: dict | None = None
    defaults_used: dict[str, Any] = field(default_factory=dict)


def _is_function_value(value: Any) -> bool:
    return isinstance(value, (ModuleRef, Builtin, Closure, DType))


def launcher_scope(site: LaunchSite, ctx: Context) -> tuple[Scope, dict[str, Any]]:
    """The launcher's names at the launch (parameters taken at their defaults where they have one)."""
    module = module_scope(site.tree, ctx)
    if not site.functions:
        return module, {}
    outer = site.functions[0]
    scope = Scope(ctx, module)
    defaults_used: dict[str, Any] = {}
    args = outer.args
    positional = list(args.posonlyargs) + list(args.args)
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for param, default in list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults)):
        if default is not None:
            value = evaluate(default, module)
            scope.values[param.arg] = value
            defaults_used[param.arg] = value
        else:
            scope.values[param.arg] = _commented_tensor(param, site.source) or Unknown(param.arg, f"parameter of {outer.name}")
    if args.vararg:
        scope.values[args.vararg.arg] = Unknown(args.vararg.arg, f"*args of {outer.name}")
    if args.kwarg:
        scope.values[args.kwarg.arg] = Unknown(args.kwarg.arg, f"**kwargs of {outer.name}")
    path = {id(node) for node in site.path}
    outcome = execute(outer.body, scope, site.call, path)
    if outcome.kind == "reached" and isinstance(outcome.value, Scope):
        return outcome.value, defaults_used
    ctx.notes.unresolved_symbol(f"launch at line {site.line} not reached while evaluating {site.launcher} ({outcome.why or outcome.kind})")
    return scope, defaults_used


_COMMENT_DTYPE = re.compile(
    r"(?<![\w.])(bf16|bfloat16|fp16|float16|half|fp32|float32|fp64|float64|int8|int16|int32|int64|uint8|"
    r"float8_e4m3fn|float8_e5m2|fp8e4nv|fp8_e4m3|e4m3|fp8e5|e5m2)(?![\w])"
)


def _commented_tensor(param: ast.arg, source: str) -> Tensor | None:
    """A tensor parameter documented on its own line (``q: torch.Tensor,  # [B, H, D] bf16``)."""
    annotation = ast.unparse(param.annotation) if param.annotation is not None else ""
    if annotation and "Tensor" not in annotation:
        return None
    lines = source.splitlines()
    if not 0 < param.lineno <= len(lines):
        return None
    line = lines[param.lineno - 1]
    if "#" not in line:
        return None
    comment = line.split("#", 1)[1].strip()
    matches = {canonical_dtype(m) for m in _COMMENT_DTYPE.findall(comment)}
    if len(matches) != 1:
        return None
    dtype = matches.pop()
    return Tensor(dtype, f"{dtype} from the comment on line {param.lineno}: '# {comment}'")


def _grid_definition(site: LaunchSite) -> tuple[ast.AST | None, str | None, int | None]:
    """The expression (or def) that defines the grid: the subscript itself, or the last assignment
    to the grid variable before the launch in the launcher's functions."""
    node = site.grid_node
    if not isinstance(node, ast.Name):
        return node, None, site.line
    name = node.id
    best: tuple[int, ast.AST] | None = None
    for function in reversed(site.functions) if site.functions else [site.tree]:
        for sub in ast.walk(function):
            line = getattr(sub, "lineno", None)
            if line is None or line > site.line:
                continue
            if (isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.value is not None
                    and any(isinstance(t, ast.Name) and t.id == name for t in assign_targets(sub))):
                candidate: ast.AST = sub.value
            elif isinstance(sub, ast.FunctionDef) and sub.name == name:
                candidate = sub
            else:
                continue
            if best is None or line >= best[0]:
                best = (line, candidate)
        if best is not None:
            break
    if best is None:
        return node, name, None
    return best[1], name, best[0]


def _meta_keys(node: ast.AST) -> list[str]:
    params: set[str] = set()
    if isinstance(node, ast.Lambda):
        params = {a.arg for a in node.args.args}
    elif isinstance(node, ast.FunctionDef):
        params = {a.arg for a in node.args.args}
    keys: list[str] = []
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Subscript)
            and isinstance(sub.value, ast.Name)
            and sub.value.id in params
            and isinstance(sub.slice, ast.Constant)
            and isinstance(sub.slice.value, str)
            and sub.slice.value not in keys
        ):
            keys.append(sub.slice.value)
    return keys


def _grid_body(node: ast.AST | None) -> ast.AST | None:
    if isinstance(node, ast.Lambda):
        return node.body
    if isinstance(node, ast.FunctionDef):
        returns = [s for s in ast.walk(node) if isinstance(s, ast.Return) and s.value is not None]
        return returns[-1].value if returns else None
    return node


def _symbols(node: ast.AST | None, scope: Scope, skip: set[str] | None = None) -> list[str]:
    if node is None:
        return []
    skip = set(skip or ())
    if isinstance(node, (ast.Lambda, ast.FunctionDef)):
        skip |= {a.arg for a in node.args.args}
    out = []
    for name in names_in(node):
        if name in skip or _is_function_value(scope.lookup(name)):
            continue
        out.append(name)
    for key in _meta_keys(node):
        if key not in out:
            out.append(key)
    return out


def _axis_units(node: ast.expr, source: str) -> dict[str, str]:
    """{S: K} when the axis is S (K=1), cdiv(S, K), or (S + K - 1) // K."""
    text = lambda n: segment(source, n)  # noqa: E731
    if isinstance(node, ast.Name):
        return {node.id: "1"}
    if isinstance(node, ast.Call) and node.args and len(node.args) == 2:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "cdiv" and isinstance(node.args[0], ast.Name):
            return {node.args[0].id: text(node.args[1])}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) and isinstance(node.left, ast.BinOp):
        left = node.left
        if isinstance(left.op, ast.Sub) and isinstance(left.left, ast.BinOp) and isinstance(left.left.op, ast.Add) and isinstance(left.left.left, ast.Name):
            return {left.left.left.id: text(node.right)}
    return {}


def _axes(definition: ast.AST | None, source: str, scope: Scope) -> list[Axis]:
    body = _grid_body(definition)
    if isinstance(body, (ast.Tuple, ast.List)):
        elements = body.elts
    elif body is not None and not isinstance(body, (ast.Name, ast.Call)):
        elements = [body]
    else:
        return []
    params = {a.arg for a in definition.args.args} if isinstance(definition, (ast.Lambda, ast.FunctionDef)) else set()
    axes = []
    for element in elements:
        text = segment(source, element)
        symbols = _symbols(element, scope, params) + _meta_keys_in(element, definition)
        axes.append(Axis(expr=text, symbols=symbols, units=_axis_units(element, source), node=element))
    for axis in axes:
        axis.symbols = list(dict.fromkeys(axis.symbols))
    return axes


def _meta_keys_in(element: ast.AST, definition: ast.AST | None) -> list[str]:
    if not isinstance(definition, (ast.Lambda, ast.FunctionDef)):
        return []
    params = {a.arg for a in definition.args.args}
    return [
        sub.slice.value
        for sub in ast.walk(element)
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id in params
        and isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, str)
    ]


def _bind_call(kernel: KernelDef, site: LaunchSite, scope: Scope, ctx: Context) -> tuple[dict, dict, dict, dict]:
    """Kernel parameter -> (value, source text); launch options; param -> launcher names read."""
    params = kernel.param_names()
    values: dict[str, Any] = {}
    texts: dict[str, str] = {}
    names: dict[str, list[str]] = {}
    options: dict[str, Any] = {}
    call = site.call
    position = 0
    aligned = True
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            value = evaluate(arg.value, scope)
            if not isinstance(value, (tuple, list)) and aligned:
                value = _iterable_branch(arg.value, scope, ctx)
            if isinstance(value, (tuple, list)) and aligned:
                for index, item in enumerate(value):
                    if position < len(params):
                        values[params[position]] = item
                        texts[params[position]] = f"{ctx.text(arg.value)}[{index}]"
                        names[params[position]] = _launcher_names(arg.value, scope)
                    position += 1
                continue
            if aligned:
                ctx.notes.unresolved_symbol(
                    f"line {arg.lineno}: `{ctx.text(arg)}` has a length not known statically; the positional arguments after it are not matched to parameters"
                )
            aligned = False
            continue
        if aligned and position < len(params):
            values[params[position]] = evaluate(arg, scope)
            texts[params[position]] = ctx.text(arg)
            names[params[position]] = _launcher_names(arg, scope)
        position += 1
    for kw in call.keywords:
        if kw.arg is None:
            value = evaluate(kw.value, scope)
            if isinstance(value, dict):
                for key, item in value.items():
                    (values if key in params else options)[key] = item
                    texts.setdefault(key, f"{ctx.text(kw.value)}[{key!r}]")
            else:
                ctx.notes.unresolved_symbol(f"line {kw.value.lineno}: `**{ctx.text(kw.value)}` not known statically ({getattr(value, 'why', '')})")
            continue
        value = evaluate(kw.value, scope)
        if kw.arg in params:
            values[kw.arg] = value
            texts[kw.arg] = ctx.text(kw.value)
            names[kw.arg] = _launcher_names(kw.value, scope)
        elif kw.arg != "grid":
            options[kw.arg] = value
    return values, texts, names, options


def _iterable_branch(node: ast.expr, scope: Scope, ctx: Context) -> tuple | None:
    """For ``*(a, b) if c else 0``: only a tuple/list branch can be unpacked, so use it (noted)."""
    if not isinstance(node, ast.IfExp):
        return None
    branches = [b for b in (node.body, node.orelse) if not (isinstance(b, ast.Constant) and not isinstance(b.value, (str, bytes, tuple)))]
    literal = [b for b in branches if isinstance(b, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in b.elts)]
    if len(branches) != 1 or len(literal) != 1:
        return None
    ctx.notes.assume(f"line {node.lineno}: `*{ctx.text(node)}` unpacks its tuple branch (the other cannot be unpacked)")
    return tuple(evaluate(e, scope) for e in literal[0].elts)


def _launcher_names(node: ast.expr, scope: Scope) -> list[str]:
    return [n for n in names_in(node) if not _is_function_value(scope.lookup(n))]


def autotune_configs(kernel: KernelDef, kscope: Scope, notes: Notes) -> tuple[list[Config] | None, dict | None]:
    """The kernel's ``@triton.autotune`` configs and their key/prune info; (None, None) without autotune,
    an empty list when the configs are not known statically (noted)."""
    call = kernel.autotune
    if call is None:
        return None, None
    config_node = next((k.value for k in call.keywords if k.arg == "configs"), call.args[0] if call.args else None)
    key_node = next((k.value for k in call.keywords if k.arg == "key"), call.args[1] if len(call.args) > 1 else None)
    info = {
        "key": evaluate(key_node, kscope) if key_node is not None else None,
        "prune_configs_by": any(k.arg == "prune_configs_by" for k in call.keywords),
        "text": kscope.ctx.text(config_node) if config_node is not None else None,
    }
    if isinstance(info["key"], Unknown):
        info["key"] = info["key"].text
    values = evaluate(config_node, kscope) if config_node is not None else Unknown("configs", "missing")
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, ConfigValue) for v in values):
        notes.unresolved_symbol(f"autotune configs `{info['text']}` not known statically")
        return [], info
    if info["prune_configs_by"]:
        notes.assume("autotune has prune_configs_by: some configs may be dropped at run time; all are listed")
    configs = []
    for i, value in enumerate(values):
        configs.append(
            Config(
                label=str(i),
                kwargs=dict(value.kwargs),
                num_warps=value.num_warps if isinstance(value.num_warps, int) else None,
                num_stages=value.num_stages if isinstance(value.num_stages, int) else None,
                num_ctas=value.num_ctas if isinstance(value.num_ctas, int) else None,
                maxnreg=value.maxnreg if isinstance(value.maxnreg, int) else None,
                source="autotune",
                text=value.text,
            )
        )
    return configs, info


def evaluate_launch(kernel: KernelDef, site: LaunchSite, pinned: dict[str, Any], notes: Notes, platform: str = "cuda") -> LaunchEval:
    """Everything about one launch that static evaluation at the pinned shapes can tell."""
    ctx = Context(source=site.source, pinned=pinned, notes=notes, platform=platform)
    scope, defaults_used = launcher_scope(site, ctx)
    kctx = Context(source=kernel.source, pinned=pinned, notes=notes, platform=platform)
    kscope = module_scope(kernel.tree, kctx)

    definition, grid_var, grid_line = _grid_definition(site)
    grid_expr = _grid_text(definition, site.source) if definition is not None else site.grid_text
    grid_symbols = _symbols(definition, scope)
    axes = _axes(definition, site.source, scope)

    values, texts, arg_names, options = _bind_call(kernel, site, scope, ctx)
    used_defaults = {
        name: value for name, value in defaults_used.items()
        if name not in pinned and (name in grid_symbols or any(name in n for n in arg_names.values()))
    }
    for name, value in used_defaults.items():
        notes.assume(f"launcher parameter `{name}` not known: its default {value!r} used")

    configs, autotune = autotune_configs(kernel, kscope, notes)
    if configs is not None and site.kind == "fn":
        notes.assume(f"launched through `.fn` at line {site.line}: the autotuner is bypassed; the launch's own options apply")
        configs, autotune = None, None
    if configs is None:
        num_warps = options.get("num_warps", CUDA_DEFAULT_NUM_WARPS)
        num_stages = options.get("num_stages", CUDA_DEFAULT_NUM_STAGES)
        if isinstance(num_warps, Unknown):
            notes.unresolved_symbol(f"num_warps at the launch: {num_warps.text} ({num_warps.why})")
        configs = [
            Config(
                label="launch",
                kwargs={},
                num_warps=num_warps if isinstance(num_warps, int) else None,
                num_stages=num_stages if isinstance(num_stages, int) else None,
                num_ctas=options.get("num_ctas", 1) if isinstance(options.get("num_ctas", 1), int) else None,
                maxnreg=options.get("maxnreg") if isinstance(options.get("maxnreg"), int) else None,
                source="launch",
                text=", ".join(f"{k}={ctx.text(kw.value)}" for kw in site.call.keywords for k in [kw.arg] if k in ("num_warps", "num_stages")),
            )
        ]

    evaluation = LaunchEval(
        site=site,
        ctx=ctx,
        scope=scope,
        kernel_scope=kscope,
        grid_expr=grid_expr,
        grid_var=grid_var,
        grid_line=grid_line,
        grid_symbols=grid_symbols,
        axes=axes,
        arg_texts=texts,
        arg_names=arg_names,
        launch_args=values,
        launch_options=options,
        configs=configs,
        autotune=autotune,
        defaults_used=used_defaults,
    )
    for config in configs:
        evaluation.config_args[config.label] = kernel_arguments(kernel, evaluation, config, kscope, pinned, notes)
        evaluation.grids[config.label] = evaluate_grid(site, scope, evaluation.config_args[config.label], config, ctx)
    return evaluation


def _grid_text(definition: ast.AST, source: str) -> str:
    if isinstance(definition, ast.FunctionDef):
        body = _grid_body(definition)
        args = ", ".join(a.arg for a in definition.args.args)
        return f"def {definition.name}({args}): return {segment(source, body)}" if body is not None else definition.name
    return segment(source, definition)


def kernel_arguments(kernel: KernelDef, evaluation: LaunchEval, config: Config, kscope: Scope, pinned: dict, notes: Notes) -> dict[str, Any]:
    """Each kernel parameter's value under ``config``: launch arguments, then config values,
    heuristics, the parameter's default; pinned shapes fill what stays unknown."""
    values: dict[str, Any] = {}
    for param in kernel.params:
        if param.name in evaluation.launch_args:
            values[param.name] = evaluation.launch_args[param.name]
        elif param.name in config.kwargs:
            values[param.name] = config.kwargs[param.name]
        elif param.default is not None:
            default_node = ast.parse(param.default, mode="eval").body
            values[param.name] = evaluate(default_node, kscope)
        else:
            values[param.name] = Unknown(param.name, "not passed at the launch")
    for heuristic in kernel.heuristics:
        table = heuristic.args[0] if heuristic.args else next((k.value for k in heuristic.keywords if k.arg == "values"), None)
        table_value = evaluate(table, kscope) if table is not None else None
        if not isinstance(table_value, dict):
            notes.unresolved_symbol(f"heuristics `{kscope.ctx.text(heuristic)}` not evaluated")
            continue
        for name, fn in table_value.items():
            if isinstance(fn, Closure):
                meta = MetaDict(values)
                meta.update(config.kwargs)
                values[name] = call_closure(fn, [meta], {}, f"heuristic {name}", kscope.ctx)
    for name, value in list(values.items()):
        if isinstance(value, Unknown) and name in pinned:
            pinned_value = pinned[name]
            text = evaluation.arg_texts.get(name, "")
            if isinstance(pinned_value, int) and _looks_boolean(text):
                pinned_value = bool(pinned_value)
            values[name] = pinned_value
    return values


def _looks_boolean(text: str) -> bool:
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))


def evaluate_grid(site: LaunchSite, scope: Scope, args: dict[str, Any], config: Config, ctx: Context) -> Any:
    """The grid's dims (a tuple of ints/Unknowns) under ``config``, or Unknown."""
    if site.grid_node is None:
        return Unknown("grid", "no grid at the launch")
    value = evaluate(site.grid_node, scope)
    if isinstance(value, Closure):
        meta = MetaDict(args)
        meta.update(config.kwargs)
        meta.setdefault("num_warps", config.num_warps)
        meta.setdefault("num_stages", config.num_stages)
        value = call_closure(value, [meta], {}, site.grid_text, ctx)
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(value, tuple):
        return value
    if isinstance(value, Unknown):
        return value
    return Unknown(site.grid_text, f"grid evaluated to {type(value).__name__}")


def to_plain(value: Any) -> Any:
    """A JSON-friendly view of an evaluated value."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, Unknown):
        return {"unknown": value.text, "why": value.why}
    if isinstance(value, Tensor):
        return {"tensor": value.dtype, "origin": value.origin}
    if isinstance(value, DType):
        return {"dtype": value.name}
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return {"value": repr(value)}


__all__ = ["Axis", "Config", "LaunchEval", "evaluate_launch", "kernel_arguments", "to_plain"]
