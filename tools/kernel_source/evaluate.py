"""Static evaluation of Python launcher and Triton kernel code at given shapes.

A small abstract interpreter over Python's ``ast``: it runs a function's statements in order with
the values it can know (ints, floats, bools, tuples, dicts, tensors known only by dtype) and carries
everything else as ``Unknown`` with the source text and the reason. Shapes the caller gives are
*pinned*: a pinned name (``B``) or expression text (``q.shape[0]``) wins over the source's own
assignment. Nothing is imported or executed for real.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

from tools import ast_ops

# torch attribute name -> canonical torch dtype name
TORCH_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int": "int32",
    "int64": "int64",
    "long": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
}
# Triton language scalar types (tl.float32 ...) -> the same canonical names
TL_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "int1": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float8e4nv": "float8_e4m3fn",
    "float8e5": "float8_e5m2",
}
# Short spellings accepted from users (--dtype NAME=bf16)
DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "f16": "float16",
    "fp32": "float32",
    "f32": "float32",
    "fp64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "i1": "bool",
    "u1": "bool",
    "fp8e4nv": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
    "e5m2": "float8_e5m2",
}

# Methods that keep a tensor's dtype
_SAME_DTYPE_METHODS = {
    "contiguous", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "flatten", "as_strided",
    "expand", "expand_as", "narrow", "select", "clone", "detach", "t", "view_as", "reshape_as",
    "squeeze_", "unsqueeze_", "movedim", "swapaxes", "unflatten", "split", "chunk", "index_select",
    "repeat", "mT", "T", "flip", "roll", "__getitem__", "cuda", "cpu",
}
_DTYPE_METHODS = {
    "float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
    "int": "int32", "long": "int64", "bool": "bool", "byte": "uint8", "char": "int8", "short": "int16",
}
_TORCH_FACTORIES = {"empty", "zeros", "ones", "full", "randn", "rand", "randint", "tensor", "empty_strided", "arange"}
_TORCH_LIKE_FACTORIES = {"empty_like", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like"}

# Conditions about another platform: analyzed for a CUDA target, they are taken as false.
_OTHER_PLATFORM = re.compile(r"hip|rocm|npu|xpu|musa|gfx9|cdna|mps|habana|hpu", re.IGNORECASE)
_THIS_PLATFORM = re.compile(r"(^|[^a-z])_?is_cuda(\(\))?$|is_cuda_alike|_is_nvidia", re.IGNORECASE)

_MAX_CALL_DEPTH = 8


@dataclass(frozen=True)
class Unknown:
    """A value the source does not determine statically: ``text`` is its expression, ``why`` the reason."""

    text: str
    why: str

    def __repr__(self) -> str:
        return f"Unknown({self.text!r}: {self.why})"


@dataclass(frozen=True)
class Tensor:
    """A tensor known only by dtype (canonical torch name or None) and how that dtype was found."""

    dtype: str | None
    origin: str


@dataclass(frozen=True)
class DType:
    name: str


@dataclass(frozen=True)
class ModuleRef:
    name: str  # "triton", "triton.language", "torch", "math", or a dotted attribute of one


@dataclass(frozen=True)
class ConfigValue:
    """A ``triton.Config(...)`` built statically."""

    kwargs: dict
    num_warps: int | Unknown
    num_stages: int | Unknown
    num_ctas: int | Unknown
    maxnreg: int | None | Unknown
    text: str


@dataclass
class Closure:
    """A lambda or def with the scope it was made in."""

    node: ast.Lambda | ast.FunctionDef
    scope: "Scope"


class MetaDict(dict):
    """The dict Triton passes to grid lambdas and heuristics: kernel arguments plus config values."""


def derived(text: str, missing: "Unknown") -> "Unknown":
    """An Unknown computed from ``missing``: keeps the root cause, not the whole chain."""
    if missing.text == text:
        return missing
    if missing.why.startswith("needs "):
        return Unknown(text, missing.why)
    return Unknown(text, f"needs {missing.text} ({missing.why})")


def is_known(value: Any) -> bool:
    if isinstance(value, Unknown):
        return False
    if isinstance(value, (tuple, list)):
        return all(is_known(v) for v in value)
    return True


def first_unknown(*values: Any) -> Unknown | None:
    for value in values:
        if isinstance(value, Unknown):
            return value
        if isinstance(value, (tuple, list)):
            inner = first_unknown(*value)
            if inner is not None:
                return inner
    return None


def canonical_dtype(name: str) -> str:
    """Canonical torch dtype name for a user's spelling (bf16, torch.bfloat16, tl.float32, int32...)."""
    key = name.strip()
    for prefix in ("torch.", "tl.", "triton.language."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key.startswith("*"):
        key = key[1:]
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    if key in TORCH_DTYPES:
        return TORCH_DTYPES[key]
    if key in TL_DTYPES:
        return TL_DTYPES[key]
    raise ValueError(f"unknown dtype {name!r}")


def normalize_key(text: str) -> str:
    """Expression text in ast.unparse's spelling, so 'q.shape[ 0 ]' and "q.shape[0]" match."""
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval").body)
    except SyntaxError:
        return text.strip()


@dataclass
class Notes:
    """Assumptions made and symbols left unresolved while evaluating (ordered, without repeats)."""

    assumptions: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)

    def assume(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)

    def unresolved_symbol(self, text: str) -> None:
        if text not in self.unresolved:
            self.unresolved.append(text)

    def override(self, text: str) -> None:
        if text not in self.overrides:
            self.overrides.append(text)


class Scope:
    """Names bound in one function (or module) body, with the enclosing scope as parent."""

    def __init__(self, ctx: "Context", parent: "Scope | None" = None, values: dict | None = None):
        self.ctx = ctx
        self.parent = parent
        self.values: dict[str, Any] = dict(values or {})

    def fork(self) -> "Scope":
        return Scope(self.ctx, self.parent, self.values)

    def lookup(self, name: str) -> Any:
        if name in self.ctx.pinned:
            return self.ctx.pinned[name]
        scope: Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        if name in _BUILTINS:
            return _BUILTINS[name]
        return Unknown(name, "not defined in the analyzed source")

    def assign(self, name: str, value: Any, line: int | None = None) -> None:
        if name in self.ctx.pinned:
            self.ctx.notes.override(f"{name}={self.ctx.pinned[name]} given; the source's assignment at line {line} ignored")
            return
        self.values[name] = value


@dataclass
class Context:
    """What one evaluation shares: the file's text, pinned shapes, notes, and the target platform."""

    source: str
    pinned: dict[str, Any]
    notes: Notes
    platform: str = "cuda"
    program_ids: tuple[int, int, int] = (0, 0, 0)
    grid: tuple | None = None
    kernel_mode: bool = False
    depth: int = 0

    def text(self, node: ast.AST) -> str:
        return segment(self.source, node)


@functools.lru_cache(maxsize=16)
def _encoded_lines(source: str) -> tuple[bytes, ...]:
    return tuple(line.encode() for line in source.splitlines(keepends=True))


def segment(source: str, node: ast.AST) -> str:
    """The source text of ``node`` (as ast.get_source_segment, without re-splitting the file each call)."""
    lines = _encoded_lines(source)
    try:
        first, last = node.lineno - 1, node.end_lineno - 1
        start, end = node.col_offset, node.end_col_offset
    except AttributeError:
        return ast.unparse(node)
    if end is None or last >= len(lines):
        return ast.unparse(node)
    if first == last:
        return lines[first][start:end].decode()
    parts = [lines[first][start:]] + list(lines[first + 1:last]) + [lines[last][:end]]
    return b"".join(parts).decode()


class _Builtin:
    def __init__(self, name: str, fn):
        self.name = name
        self.fn = fn

    def __repr__(self) -> str:
        return f"<builtin {self.name}>"


def _cdiv(a, b):
    return -(-a // b)


def _next_power_of_2(n):
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _small_range(*args):
    values = range(*args)
    if len(values) > 100_000:
        raise ValueError("range too long to expand statically")
    return tuple(values)


def _minmax(fn):
    def apply(*args):
        if len(args) == 1 and isinstance(args[0], (tuple, list)):
            return fn(args[0])
        return fn(args)

    return apply


_BUILTINS = {
    "min": _Builtin("min", _minmax(min)),
    "max": _Builtin("max", _minmax(max)),
    "int": _Builtin("int", int),
    "float": _Builtin("float", float),
    "bool": _Builtin("bool", bool),
    "abs": _Builtin("abs", abs),
    "round": _Builtin("round", round),
    "len": _Builtin("len", len),
    "range": _Builtin("range", lambda *a: _small_range(*a)),
    "tuple": _Builtin("tuple", tuple),
    "list": _Builtin("list", list),
    "sum": _Builtin("sum", sum),
    "divmod": _Builtin("divmod", divmod),
}

# Functions of modules (by dotted name) evaluated on known arguments.
_MODULE_FUNCTIONS = {
    "triton.cdiv": _cdiv,
    "triton.language.cdiv": _cdiv,
    "triton.next_power_of_2": _next_power_of_2,
    "triton.language.minimum": min,
    "triton.language.maximum": max,
    "math.ceil": math.ceil,
    "math.floor": math.floor,
    "math.log2": math.log2,
    "math.sqrt": math.sqrt,
    "math.prod": math.prod,
    "math.gcd": math.gcd,
    "triton.language.constexpr": lambda v: v,
    "triton.language.cast": lambda v, *a, **k: v,
}
_MODULE_ALIASES = {"tl": "triton.language", "triton.language": "triton.language", "triton": "triton", "torch": "torch", "math": "math"}


def cuda_platform_condition(text: str) -> bool | None:
    """On a CUDA target, a condition naming another platform (hip, rocm, npu, xpu, gfx9...) is
    False and one naming CUDA is True; None for any other condition."""
    if _OTHER_PLATFORM.search(text):
        return False
    if _THIS_PLATFORM.search(text.strip()):
        return True
    return None


def platform_guess(text: str, ctx: Context) -> bool | None:
    """For an undecidable condition naming a platform: False if another platform, True if this one."""
    if ctx.platform != "cuda":
        return None
    return cuda_platform_condition(text)


def truth(node: ast.expr, scope: Scope) -> bool | Unknown:
    """A condition's value; undecidable platform tests resolved by ``platform_guess`` (noted)."""
    value = evaluate(node, scope)
    if not isinstance(value, Unknown):
        try:
            return bool(value)
        except Exception:  # a tensor or other object without a static truth value
            return Unknown(scope.ctx.text(node), "truth value not static")
    text = scope.ctx.text(node)
    guess = _platform_guess_expr(node, scope)
    if guess is not None:
        scope.ctx.notes.assume(f"`{text}` taken as {guess} (analysis is for {scope.ctx.platform})")
        return guess
    return value


def _platform_guess_expr(node: ast.expr, scope: Scope) -> bool | None:
    """Platform guess through `not`, `and`, `or`, so `not _is_hip and x` still resolves what it can."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _platform_guess_expr(node.operand, scope)
        return None if inner is None else not inner
    return platform_guess(scope.ctx.text(node), scope.ctx)


# ---------------------------------------------------------------------------------------------
# expressions


def evaluate(node: ast.expr, scope: Scope) -> Any:
    """The static value of an expression in ``scope`` (``Unknown`` where it cannot be known)."""
    ctx = scope.ctx
    pinned = _pinned_by_text(node, ctx)
    if pinned is not None:
        return pinned
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return scope.lookup(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        items: list = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                inner = evaluate(element.value, scope)
                if isinstance(inner, (tuple, list)):
                    items.extend(inner)
                    continue
                return Unknown(ctx.text(node), f"unpacks {ctx.text(element.value)}, whose length is unknown")
            items.append(evaluate(element, scope))
        return tuple(items) if isinstance(node, ast.Tuple) else list(items)
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                inner = evaluate(value, scope)
                if isinstance(inner, dict):
                    out.update(inner)
                else:
                    return Unknown(ctx.text(node), f"unpacks {ctx.text(value)}, which is unknown")
                continue
            k = evaluate(key, scope)
            if isinstance(k, Unknown):
                return Unknown(ctx.text(node), "a key is unknown")
            out[k] = evaluate(value, scope)
        return out
    if isinstance(node, ast.BinOp):
        left = evaluate(node.left, scope)
        right = evaluate(node.right, scope)
        missing = first_unknown(left, right)
        if missing is not None:
            return derived(ctx.text(node), missing)
        try:
            return ast_ops.binary(node.op, left, right)
        except Exception as exc:
            return Unknown(ctx.text(node), f"cannot compute ({type(exc).__name__})")
    if isinstance(node, ast.UnaryOp):
        operand = evaluate(node.operand, scope)
        if isinstance(operand, Unknown):
            return derived(ctx.text(node), operand)
        try:
            return ast_ops.unary(node.op, operand)
        except Exception:
            return Unknown(ctx.text(node), "cannot compute")
    if isinstance(node, ast.Compare):
        return _evaluate_compare(node, scope)
    if isinstance(node, ast.BoolOp):
        return _evaluate_boolop(node, scope)
    if isinstance(node, ast.IfExp):
        return _evaluate_ifexp(node, scope)
    if isinstance(node, ast.Call):
        return _evaluate_call(node, scope)
    if isinstance(node, ast.Subscript):
        return _evaluate_subscript(node, scope)
    if isinstance(node, ast.Attribute):
        return _evaluate_attribute(node, scope)
    if isinstance(node, ast.Lambda):
        return Closure(node, scope)
    if isinstance(node, ast.ListComp):
        return _evaluate_listcomp(node, scope)
    if isinstance(node, ast.Slice):
        parts = [evaluate(p, scope) if p is not None else None for p in (node.lower, node.upper, node.step)]
        if first_unknown(*parts):
            return Unknown(ctx.text(node), "slice bound unknown")
        return slice(*parts)
    if isinstance(node, ast.NamedExpr):
        value = evaluate(node.value, scope)
        scope.assign(node.target.id, value, node.lineno)
        return value
    return Unknown(ctx.text(node), f"{type(node).__name__} is not evaluated")


def _pinned_by_text(node: ast.expr, ctx: Context) -> Any:
    """A pinned shape keyed by this expression's text (``q.shape[0]``, ``x.stride(1)``)."""
    if not ctx.pinned or isinstance(node, (ast.Name, ast.Constant)):
        return None
    if not isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        return None
    return ctx.pinned.get(ast.unparse(node))


def _evaluate_compare(node: ast.Compare, scope: Scope) -> Any:
    ctx = scope.ctx
    left = evaluate(node.left, scope)
    result = True
    for op, comparator in zip(node.ops, node.comparators):
        right = evaluate(comparator, scope)
        if isinstance(op, (ast.Is, ast.IsNot)) and (right is None or left is None):
            other = left if right is None else right
            if isinstance(other, (Tensor, int, float, tuple, Closure, ConfigValue)) and not isinstance(other, bool):
                value = not isinstance(op, ast.Is)
            elif other is None:
                value = isinstance(op, ast.Is)
            else:
                return Unknown(ctx.text(node), f"whether {ctx.text(node.left)} is None is not known")
        else:
            missing = first_unknown(left, right)
            if missing is not None:
                return derived(ctx.text(node), missing)
            if isinstance(left, Tensor) or isinstance(right, Tensor):
                return Unknown(ctx.text(node), "compares a tensor")
            try:
                value = ast_ops.compare(op, left, right)
            except Exception:
                return Unknown(ctx.text(node), "cannot compare")
        result = result and value
        left = right
    return result


def _evaluate_boolop(node: ast.BoolOp, scope: Scope) -> Any:
    """Python's `and`/`or` (returning an operand, as `forced or MAX` needs), left to right."""
    is_and = isinstance(node.op, ast.And)
    value: Any = None
    for operand in node.values:
        value = evaluate(operand, scope)
        if isinstance(value, Unknown):
            guess = _platform_guess_expr(operand, scope)
            if guess is None:
                return derived(scope.ctx.text(node), value)
            scope.ctx.notes.assume(f"`{scope.ctx.text(operand)}` taken as {guess} (analysis is for {scope.ctx.platform})")
            value = guess
        try:
            decisive = (not value) if is_and else bool(value)
        except Exception:
            return Unknown(scope.ctx.text(node), "truth value not static")
        if decisive:
            return value
    return value


def _evaluate_ifexp(node: ast.IfExp, scope: Scope) -> Any:
    ctx = scope.ctx
    test = truth(node.test, scope)
    if not isinstance(test, Unknown):
        return evaluate(node.body if test else node.orelse, scope)
    body = evaluate(node.body, scope)
    orelse = evaluate(node.orelse, scope)
    if is_known(body) and is_known(orelse) and body == orelse:
        return body
    tensors = [v for v in (body, orelse) if isinstance(v, Tensor) and v.dtype]
    others = [v for v in (body, orelse) if not (isinstance(v, Tensor) and v.dtype)]
    if tensors and all(isinstance(v, (Unknown, Tensor)) for v in others):
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) == 1:
            dtype = dtypes.pop()
            return Tensor(dtype, f"{dtype} from one branch of `{ctx.text(node)}` (the other branch assumed the same dtype)")
    return derived(ctx.text(node), test)


def _evaluate_listcomp(node: ast.ListComp, scope: Scope) -> Any:
    ctx = scope.ctx
    results: list = []

    def run(generators: list[ast.comprehension], inner: Scope) -> bool:
        if not generators:
            results.append(evaluate(node.elt, inner))
            return True
        gen = generators[0]
        iterable = evaluate(gen.iter, inner)
        if not isinstance(iterable, (tuple, list, range)) or not is_known(tuple(iterable)):
            return False
        for item in iterable:
            child = Scope(ctx, inner)
            bind_target(gen.target, item, child, getattr(gen.target, "lineno", None))
            keep = True
            for cond in gen.ifs:
                c = truth(cond, child)
                if isinstance(c, Unknown):
                    return False
                keep = keep and c
            if keep and not run(generators[1:], child):
                return False
        return True

    if not run(list(node.generators), scope):
        return Unknown(ctx.text(node), "comprehension over values not known")
    return results


def _dtype_of(value: Any) -> str | None:
    if isinstance(value, DType):
        return value.name
    if isinstance(value, str):
        try:
            return canonical_dtype(value)
        except ValueError:
            return None
    return None


def _evaluate_call(node: ast.Call, scope: Scope) -> Any:
    ctx = scope.ctx
    text = ctx.text(node)
    func = node.func
    # Method calls on values: tensors by dtype, .to(), .view(dtype) ...
    if isinstance(func, ast.Attribute):
        base_value = evaluate(func.value, scope)
        if not isinstance(base_value, ModuleRef):
            return _evaluate_method(node, func.attr, base_value, scope)
    callee = evaluate(func, scope)
    args, kwargs, missing = _call_arguments(node, scope)
    if isinstance(callee, ModuleRef):
        name = callee.name
        if name in ("triton.Config", "triton.runtime.Config", "triton.runtime.autotuner.Config"):
            return _make_config(node, args, kwargs, ctx)
        if name == "triton.language.program_id":
            axis = args[0] if args else kwargs.get("axis", 0)
            if ctx.kernel_mode and isinstance(axis, int):
                return ctx.program_ids[axis]
            return Unknown(text, "program index")
        if name == "triton.language.num_programs":
            axis = args[0] if args else kwargs.get("axis", 0)
            if ctx.grid is not None and isinstance(axis, int) and axis < len(ctx.grid):
                return ctx.grid[axis]
            return Unknown(text, "grid size")
        if name.startswith("triton.language.") and name.split(".")[-1] in ("load", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or"):
            return Unknown(text, "runtime data (tl.load)")
        if name.startswith("torch."):
            return _torch_call(name.split(".", 1)[1], args, kwargs, text)
        fn = _MODULE_FUNCTIONS.get(name)
        if fn is not None:
            if missing is not None:
                return derived(text, missing)
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                return Unknown(text, f"{name} failed statically ({type(exc).__name__})")
        return Unknown(text, f"call to {name} is not evaluated")
    if isinstance(callee, _Builtin):
        if missing is not None:
            return derived(text, missing)
        try:
            return callee.fn(*args, **kwargs)
        except Exception as exc:
            return Unknown(text, f"{callee.name}() failed statically ({type(exc).__name__})")
    if isinstance(callee, Closure):
        return call_closure(callee, args, kwargs, text, ctx)
    if isinstance(callee, Unknown):
        return Unknown(text, f"call to {callee.text} ({callee.why})")
    return Unknown(text, "call not evaluated")


def _call_arguments(node: ast.Call, scope: Scope) -> tuple[list, dict, Unknown | None]:
    args: list = []
    missing: Unknown | None = None
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            value = evaluate(arg.value, scope)
            if isinstance(value, (tuple, list)):
                args.extend(value)
                continue
            missing = missing or Unknown(scope.ctx.text(arg), "unpacked arguments unknown")
            continue
        args.append(evaluate(arg, scope))
    kwargs: dict = {}
    for kw in node.keywords:
        value = evaluate(kw.value, scope)
        if kw.arg is None:
            if isinstance(value, dict):
                kwargs.update(value)
            else:
                missing = missing or Unknown(scope.ctx.text(kw.value), "unpacked keyword arguments unknown")
            continue
        kwargs[kw.arg] = value
    missing = missing or first_unknown(*args, *kwargs.values())
    return args, kwargs, missing


def _make_config(node: ast.Call, args: list, kwargs: dict, ctx: Context) -> Any:
    values = args[0] if args else kwargs.get("kwargs", {})
    if not isinstance(values, dict):
        return Unknown(ctx.text(node), "config kwargs unknown")
    positional = ["num_warps", "num_stages", "num_ctas", "maxnreg"]
    opts = dict(zip(positional, args[1:]))
    opts.update({k: v for k, v in kwargs.items() if k in positional})
    return ConfigValue(
        kwargs=dict(values),
        num_warps=opts.get("num_warps", 4),
        num_stages=opts.get("num_stages", 3),
        num_ctas=opts.get("num_ctas", 1),
        maxnreg=opts.get("maxnreg"),
        text=ctx.text(node),
    )


def _torch_call(name: str, args: list, kwargs: dict, text: str) -> Any:
    dtype = _dtype_of(kwargs.get("dtype"))
    if name in _TORCH_FACTORIES:
        if dtype:
            return Tensor(dtype, f"dtype={dtype} in `{text}`")
        if name == "arange":
            return Tensor("int64", f"torch.arange default int64 in `{text}`")
        if name == "randint":
            return Tensor("int64", f"torch.randint default int64 in `{text}`")
        return Tensor("float32", f"torch default dtype float32 in `{text}`")
    if name in _TORCH_LIKE_FACTORIES:
        if dtype:
            return Tensor(dtype, f"dtype={dtype} in `{text}`")
        base = args[0] if args else None
        if isinstance(base, Tensor):
            return Tensor(base.dtype, f"like its input in `{text}`")
        return Unknown(text, "dtype of the input tensor unknown")
    if name in ("cat", "stack", "concat"):
        parts = args[0] if args else ()
        if isinstance(parts, (tuple, list)):
            dtypes = {p.dtype for p in parts if isinstance(p, Tensor)}
            if len(dtypes) == 1:
                return Tensor(dtypes.pop(), f"from the inputs of `{text}`")
        return Unknown(text, "dtype of the inputs unknown")
    return Unknown(text, f"torch.{name} is not evaluated")


def _evaluate_method(node: ast.Call, method: str, base: Any, scope: Scope) -> Any:
    ctx = scope.ctx
    text = ctx.text(node)
    args, kwargs, missing = _call_arguments(node, scope)
    if method in ("view", "to", "type"):
        for candidate in list(args) + [kwargs.get("dtype")]:
            dtype = _dtype_of(candidate)
            if dtype:
                return Tensor(dtype, f".{method}({dtype}) in `{text}`")
        if isinstance(base, Tensor):
            return base if method != "type" else Unknown(text, "tensor type")
        if method == "to" and isinstance(base, (int, float)):
            return base  # kernel scalars: x.to(tl.int64)
        return derived(text, base) if isinstance(base, Unknown) else Unknown(text, "not evaluated")
    if method in _DTYPE_METHODS and not args:
        if isinstance(base, (Tensor, Unknown)):
            dtype = _DTYPE_METHODS[method]
            return Tensor(dtype, f".{method}() in `{text}`")
    if method in _SAME_DTYPE_METHODS and isinstance(base, Tensor):
        return Tensor(base.dtype, base.origin)
    if isinstance(base, Closure) and method == "__call__":
        return call_closure(base, args, kwargs, text, ctx)
    if isinstance(base, dict) and method == "get":
        if missing is None and args:
            return base.get(args[0], args[1] if len(args) > 1 else None)
    if isinstance(base, (int, float)) and method in ("to", "__index__"):
        return base
    if isinstance(base, Unknown):
        return derived(text, base)
    return Unknown(text, f".{method}() is not evaluated")


def _evaluate_subscript(node: ast.Subscript, scope: Scope) -> Any:
    ctx = scope.ctx
    text = ctx.text(node)
    base = evaluate(node.value, scope)
    index = evaluate(node.slice, scope)
    if isinstance(base, Tensor):
        return Tensor(base.dtype, base.origin)
    if isinstance(base, Unknown):
        return derived(text, base)
    if isinstance(index, Unknown):
        return derived(text, index)
    try:
        if isinstance(base, dict) and index not in base:
            return Unknown(text, f"{index!r} not among the known keys")
        return base[index]
    except Exception:
        return Unknown(text, "subscript not evaluated")


def _evaluate_attribute(node: ast.Attribute, scope: Scope) -> Any:
    ctx = scope.ctx
    text = ctx.text(node)
    base = evaluate(node.value, scope)
    if isinstance(base, ModuleRef):
        dotted = f"{base.name}.{node.attr}"
        if base.name == "torch" and node.attr in TORCH_DTYPES:
            return DType(TORCH_DTYPES[node.attr])
        if base.name == "triton.language" and node.attr in TL_DTYPES:
            return DType(TL_DTYPES[node.attr])
        if dotted == "triton.language.constexpr":
            return ModuleRef(dotted)
        return ModuleRef(dotted)
    if isinstance(base, Tensor):
        if node.attr == "dtype":
            return DType(base.dtype) if base.dtype else Unknown(text, "dtype unknown")
        return Unknown(text, f"tensor attribute {node.attr} (pass it as --shape '{text}=N')")
    if isinstance(base, ConfigValue):
        return getattr(base, node.attr, Unknown(text, "config attribute"))
    if isinstance(base, Unknown):
        return derived(text, base)
    return Unknown(text, "attribute not evaluated")


def call_closure(closure: Closure, args: list, kwargs: dict, text: str, ctx: Context) -> Any:
    """Run a lambda or def statically on known arguments; Unknown if anything in it is not."""
    if ctx.depth >= _MAX_CALL_DEPTH:
        return Unknown(text, "call nesting too deep to evaluate")
    node = closure.node
    scope = Scope(ctx, closure.scope)
    if not bind_arguments(node.args, args, kwargs, scope, text):
        return Unknown(text, "arguments do not bind")
    ctx.depth += 1
    try:
        if isinstance(node, ast.Lambda):
            return evaluate(node.body, scope)
        outcome = execute(node.body, scope)
        if outcome.kind == "returned":
            return outcome.value
        if outcome.kind == "unknown":
            return Unknown(text, outcome.why)
        return None
    finally:
        ctx.depth -= 1


def bind_arguments(spec: ast.arguments, args: list, kwargs: dict, scope: Scope, text: str) -> bool:
    """Bind call arguments to a function's parameters, defaults included."""
    params = list(spec.posonlyargs) + list(spec.args)
    defaults = [None] * (len(params) - len(spec.defaults)) + list(spec.defaults)
    kwargs = dict(kwargs)
    for i, (param, default) in enumerate(zip(params, defaults)):
        if i < len(args):
            value = args[i]
        elif param.arg in kwargs:
            value = kwargs.pop(param.arg)
        elif default is not None:
            value = evaluate(default, scope.parent or scope)
        else:
            value = Unknown(param.arg, f"argument {param.arg} not given in `{text}`")
        scope.values[param.arg] = value
    if spec.vararg is not None:
        scope.values[spec.vararg.arg] = tuple(args[len(params):])
    for param, default in zip(spec.kwonlyargs, spec.kw_defaults):
        if param.arg in kwargs:
            scope.values[param.arg] = kwargs.pop(param.arg)
        elif default is not None:
            scope.values[param.arg] = evaluate(default, scope.parent or scope)
        else:
            scope.values[param.arg] = Unknown(param.arg, "keyword argument not given")
    if spec.kwarg is not None:
        scope.values[spec.kwarg.arg] = kwargs
    return True


# ---------------------------------------------------------------------------------------------
# statements


@dataclass
class Outcome:
    kind: str  # "normal" | "reached" | "returned" | "unknown" (not static) | "break" | "continue"
    value: Any = None
    why: str = ""


def bind_target(target: ast.expr, value: Any, scope: Scope, line: int | None) -> None:
    """Assign ``value`` to an assignment target (names, tuples, starred); attributes/items ignored."""
    ctx = scope.ctx
    if isinstance(target, ast.Name):
        scope.assign(target.id, value, line)
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        elts = target.elts
        star = next((i for i, e in enumerate(elts) if isinstance(e, ast.Starred)), None)
        if isinstance(value, (tuple, list)) and (len(value) == len(elts) or star is not None):
            if star is None:
                for element, item in zip(elts, value):
                    bind_target(element, item, scope, line)
                return
            tail = len(elts) - star - 1
            for element, item in zip(elts[:star], value[:star]):
                bind_target(element, item, scope, line)
            bind_target(elts[star].value, list(value[star:len(value) - tail]), scope, line)
            for element, item in zip(elts[star + 1:], value[len(value) - tail:]):
                bind_target(element, item, scope, line)
            return
        base = value.text if isinstance(value, Unknown) else ctx.text(target)
        for i, element in enumerate(elts):
            if isinstance(element, ast.Starred):
                bind_target(element.value, Unknown(f"{base}[{i}:]", "starred unpacking"), scope, line)
                continue
            index_text = f"{base}[{i}]" if star is None or i < star else f"{base}[{i - len(elts)}]"
            pinned = ctx.pinned.get(normalize_key(index_text))
            item = pinned if pinned is not None else Unknown(index_text, value.why if isinstance(value, Unknown) else "unpacked from a value not known")
            bind_target(element, item, scope, line)
        return
    if isinstance(target, ast.Starred):
        bind_target(target.value, value, scope, line)


def _assigned_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


def _merge(scope: Scope, branches: list[Scope], test_text: str, line: int) -> None:
    names = set()
    for branch in branches:
        names |= set(branch.values)
    for name in names:
        values = [b.values.get(name, scope.values.get(name, _MISSING)) for b in branches]
        first = values[0]
        if all(_same(v, first) for v in values[1:]) and first is not _MISSING:
            scope.values[name] = first
        else:
            scope.values[name] = Unknown(name, f"differs between the branches of `{test_text}` (line {line})")


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.dtype is not None and a.dtype == b.dtype
    if isinstance(a, (Closure, Scope)) or isinstance(b, (Closure, Scope)):
        return False
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:
        return False


def execute(stmts: list[ast.stmt], scope: Scope, target: ast.AST | None = None, path: set[int] | None = None) -> Outcome:
    """Run statements in order; stop when reaching ``target`` (a node inside them).

    ``path`` holds the ids of ``target``'s ancestors, so compound statements on the way are
    entered rather than run. Conditions that cannot be decided on the way to the target are
    recorded as assumptions.
    """
    for stmt in stmts:
        if target is not None and path is not None and id(stmt) in path:
            outcome = _enter(stmt, scope, target, path)
            if outcome.kind == "reached" and outcome.value is None:
                outcome.value = scope  # the innermost scope at the target
            return outcome
        outcome = _run(stmt, scope)
        if outcome.kind != "normal":
            return outcome
    return Outcome("normal")  # "break"/"continue" are returned above to the enclosing loop


def _enter(stmt: ast.stmt, scope: Scope, target: ast.AST, path: set[int]) -> Outcome:
    ctx = scope.ctx
    if stmt is target or not isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef)):
        return Outcome("reached")
    if isinstance(stmt, ast.If):
        in_body = any(id(s) in path for s in stmt.body)
        test = truth(stmt.test, scope)
        branch = stmt.body if in_body else stmt.orelse
        if isinstance(test, Unknown):
            ctx.notes.assume(f"line {stmt.lineno}: `{ctx.text(stmt.test)}` taken as {in_body} (the analyzed code is on that side)")
        elif bool(test) != in_body:
            ctx.notes.assume(f"line {stmt.lineno}: at these shapes `{ctx.text(stmt.test)}` is {bool(test)}, so this code does not run; analyzed anyway")
        return execute(branch, scope, target, path)
    if isinstance(stmt, (ast.For, ast.While)):
        if isinstance(stmt, ast.For):
            first = first_iteration_value(stmt.iter, scope)
            if not isinstance(first, Unknown):
                bind_target(stmt.target, first, scope, stmt.lineno)
                ctx.notes.assume(f"line {stmt.lineno}: analyzed at the first iteration of `for {ctx.text(stmt.target)} in {ctx.text(stmt.iter)}`")
            else:
                bind_target(stmt.target, Unknown(ctx.text(stmt.target), f"loop variable of line {stmt.lineno}"), scope, stmt.lineno)
        for name in _assigned_names(stmt.body):
            if name not in ctx.pinned and name in scope.values:
                scope.values[name] = Unknown(name, f"updated in the loop at line {stmt.lineno}")
        return execute(stmt.body, scope, target, path)
    if isinstance(stmt, ast.With):
        for item in stmt.items:
            if item.optional_vars is not None:
                bind_target(item.optional_vars, Unknown(ctx.text(item.optional_vars), "with-statement value"), scope, stmt.lineno)
        return execute(stmt.body, scope, target, path)
    if isinstance(stmt, ast.Try):
        for block in (stmt.body, stmt.orelse, stmt.finalbody, *[h.body for h in stmt.handlers]):
            if any(id(s) in path for s in block):
                return execute(block, scope, target, path)
        return Outcome("reached")
    # a nested def holding the target: its body runs with the enclosing scope as closure
    inner = Scope(ctx, scope)
    for arg in stmt.args.posonlyargs + stmt.args.args + stmt.args.kwonlyargs:
        inner.values[arg.arg] = Unknown(arg.arg, f"parameter of {stmt.name}")
    return execute(stmt.body, inner, target, path)


RANGE_FUNCTIONS = ("range", "triton.language.range", "triton.language.static_range")


def range_arguments(call: ast.expr, scope: Scope) -> tuple[Any, Any, Any] | None:
    """(start, stop, step) of ``range``/``tl.range``/``tl.static_range`` calls, else None."""
    if not isinstance(call, ast.Call):
        return None
    callee = evaluate(call.func, scope)
    name = callee.name if isinstance(callee, (ModuleRef, _Builtin)) else None
    if name not in RANGE_FUNCTIONS:
        return None
    args = [evaluate(a, scope) for a in call.args[:3]]
    if len(args) == 1:
        return 0, args[0], 1
    if len(args) == 2:
        return args[0], args[1], 1
    if len(args) == 3:
        return args[0], args[1], args[2]
    return None


def first_iteration_value(iterable: ast.expr, scope: Scope) -> Any:
    bounds = range_arguments(iterable, scope)
    if bounds is not None:
        start, stop, step = bounds
        return start if is_known(start) else Unknown(scope.ctx.text(iterable), "loop start unknown")
    value = evaluate(iterable, scope)
    if isinstance(value, (tuple, list)) and value:
        return value[0]
    return Unknown(scope.ctx.text(iterable), "loop values unknown")


def _run(stmt: ast.stmt, scope: Scope) -> Outcome:
    ctx = scope.ctx
    if isinstance(stmt, ast.Assign):
        value = evaluate(stmt.value, scope)
        for target in stmt.targets:
            bind_target(target, value, scope, stmt.lineno)
        return Outcome("normal")
    if isinstance(stmt, ast.AnnAssign):
        if stmt.value is not None:
            bind_target(stmt.target, evaluate(stmt.value, scope), scope, stmt.lineno)
        return Outcome("normal")
    if isinstance(stmt, ast.AugAssign):
        if isinstance(stmt.target, ast.Name):
            current = scope.lookup(stmt.target.id)
            value = evaluate(stmt.value, scope)
            missing = first_unknown(current, value)
            if missing is not None:
                result = derived(stmt.target.id, missing)
            else:
                try:
                    result = ast_ops.binary(stmt.op, current, value)
                except Exception:
                    result = Unknown(stmt.target.id, "cannot compute")
            scope.assign(stmt.target.id, result, stmt.lineno)
        return Outcome("normal")
    if isinstance(stmt, ast.If):
        test = truth(stmt.test, scope)
        if not isinstance(test, Unknown):
            return execute(stmt.body if test else stmt.orelse, scope)
        branches = []
        for block in (stmt.body, stmt.orelse):
            branch = scope.fork()
            outcome = execute(block, branch)
            if outcome.kind in ("returned", "unknown", "break", "continue"):
                return Outcome("unknown", why=f"returns under `{ctx.text(stmt.test)}`, which is not known ({test.why})")
            branches.append(branch)
        _merge(scope, branches, ctx.text(stmt.test), stmt.lineno)
        return Outcome("normal")
    if isinstance(stmt, (ast.For, ast.While)):
        ran = _run_loop(stmt, scope)
        if ran is not None:
            return ran
    if isinstance(stmt, (ast.For, ast.While, ast.AsyncFor)):
        for name in _assigned_names(stmt.body + stmt.orelse + ([stmt.target] if isinstance(stmt, ast.For) else [])):
            if name not in ctx.pinned:
                scope.values[name] = Unknown(name, f"updated in the loop at line {stmt.lineno}")
        if any(isinstance(n, ast.Return) for s in stmt.body for n in ast.walk(s)):
            return Outcome("unknown", why=f"may return inside the loop at line {stmt.lineno}")
        return Outcome("normal")
    if isinstance(stmt, ast.Return):
        return Outcome("returned", evaluate(stmt.value, scope) if stmt.value is not None else None)
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        scope.assign(stmt.name, Closure(stmt, scope), stmt.lineno)
        return Outcome("normal")
    if isinstance(stmt, ast.With):
        for item in stmt.items:
            if item.optional_vars is not None:
                bind_target(item.optional_vars, Unknown(ctx.text(item.optional_vars), "with-statement value"), scope, stmt.lineno)
        return execute(stmt.body, scope)
    if isinstance(stmt, ast.Try):
        return execute(stmt.body, scope)
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        bind_imports(stmt, scope)
        return Outcome("normal")
    if isinstance(stmt, ast.Raise):
        return Outcome("unknown", why=f"raises at line {stmt.lineno}")
    if isinstance(stmt, ast.Break):
        return Outcome("break")
    if isinstance(stmt, ast.Continue):
        return Outcome("continue")
    if isinstance(stmt, ast.ClassDef):
        scope.assign(stmt.name, Unknown(stmt.name, "class"), stmt.lineno)
    return Outcome("normal")


_MAX_LOOP_ITERATIONS = 4096


def _run_loop(stmt: ast.For | ast.While, scope: Scope) -> Outcome | None:
    """Run a launcher-side loop whose iterations are all known (a while over known values, a for
    over a known sequence), on a copy of the scope; None when it cannot be run statically."""
    trial = scope.fork()
    if isinstance(stmt, ast.For):
        bounds = range_arguments(stmt.iter, trial)
        if bounds is not None:
            if not all(isinstance(b, int) for b in bounds) or bounds[2] == 0:
                return None
            items = range(*bounds)
        else:
            items = evaluate(stmt.iter, trial)
            if not isinstance(items, (tuple, list)):
                return None
        if len(items) > _MAX_LOOP_ITERATIONS:
            return None
        iterator = iter(items)
    count = 0
    while True:
        if isinstance(stmt, ast.While):
            test = truth(stmt.test, trial)
            if isinstance(test, Unknown):
                return None
            if not test:
                break
        else:
            try:
                item = next(iterator)
            except StopIteration:
                break
            bind_target(stmt.target, item, trial, stmt.lineno)
        count += 1
        if count > _MAX_LOOP_ITERATIONS:
            return None
        outcome = execute(stmt.body, trial)
        if outcome.kind == "break":
            break
        if outcome.kind == "unknown":
            return None
        if outcome.kind == "returned":
            scope.values.update(trial.values)
            return outcome
    scope.values.update(trial.values)
    return Outcome("normal")


def bind_imports(stmt: ast.Import | ast.ImportFrom, scope: Scope) -> None:
    """Bind imported names: triton/tl/torch/math as modules, the rest as Unknown with their origin."""
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            bound = alias.asname or alias.name.split(".")[0]
            full = alias.name if alias.asname else alias.name.split(".")[0]
            if full.split(".")[0] in ("triton", "torch", "math"):
                scope.values[bound] = ModuleRef(_MODULE_ALIASES.get(full, full))
            else:
                scope.values[bound] = Unknown(bound, f"module {alias.name}")
        return
    module = "." * stmt.level + (stmt.module or "")
    for alias in stmt.names:
        bound = alias.asname or alias.name
        dotted = f"{stmt.module}.{alias.name}" if stmt.module else alias.name
        if stmt.level == 0 and stmt.module and stmt.module.split(".")[0] in ("triton", "math", "torch"):
            if dotted == "triton.language" or dotted == "triton.language.core":
                scope.values[bound] = ModuleRef("triton.language")
            elif stmt.module in ("triton.language", "triton.language.core"):
                scope.values[bound] = ModuleRef(f"triton.language.{alias.name}")
            elif stmt.module == "triton" or stmt.module.startswith("triton."):
                short = f"triton.{alias.name}"
                scope.values[bound] = ModuleRef(short)
            elif stmt.module == "torch" and alias.name in TORCH_DTYPES:
                scope.values[bound] = DType(TORCH_DTYPES[alias.name])
            else:
                scope.values[bound] = ModuleRef(dotted)
        else:
            scope.values[bound] = Unknown(bound, f"imported from {module}")


def module_scope(tree: ast.Module, ctx: Context) -> Scope:
    """The module's top-level names: constants, imports, functions (as closures)."""
    scope = Scope(ctx)
    for stmt in tree.body:
        _run(stmt, scope)
    return scope


def names_in(node: ast.AST) -> list[str]:
    """Free names read in an expression, in order of first appearance (lambda parameters excluded)."""
    bound: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Lambda):
            bound |= {a.arg for a in sub.args.args}
    found = [
        sub for sub in ast.walk(node)
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound
    ]
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    seen: list[str] = []
    for sub in found:
        if sub.id not in seen:
            seen.append(sub.id)
    return seen
