"""The static value of an expression in a scope, calls included.

Values are plain Python ones where the source determines them, the records of ``values`` otherwise,
and ``Unknown`` with the source text and the reason where it cannot be known. An expression whose
text is pinned (``q.shape[0]``) takes the pinned value. An operation that Python would refuse on the
operands (``1 // 0``, ``min()``) is an Unknown naming the exception; any other exception is a bug of
this evaluator and propagates.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from tools.pyeval import operators
from tools.pyeval.binding import bind_parameters, comprehension_values
from tools.pyeval.values import Builtin, ModuleRef, Unknown

from .dtypes import DTYPE_METHODS, SAME_DTYPE_METHODS, TL_DTYPES, TORCH_DTYPES, dtype_of, torch_call
from .platforms import platform_guess_expr
from .scope import Context, Scope, bind_target
from .values import Closure, ConfigValue, DType, Tensor, derived, first_unknown, is_known

_MAX_CALL_DEPTH = 8
# What a builtin or math function applied to known arguments raises for arguments it refuses.
_CALL_ERRORS = (ArithmeticError, TypeError, ValueError)


def _cdiv(a, b):
    return -(-a // b)


def _next_power_of_2(n):
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


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
_CONFIG_CLASSES = ("triton.Config", "triton.runtime.Config", "triton.runtime.autotuner.Config")
_RUNTIME_DATA = ("load", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or")


def failed(text: str, what: str, exc: Exception) -> Unknown:
    """The Unknown for an operation on known values that Python refused, with the exception as reason."""
    return Unknown(text, f"{what} ({type(exc).__name__}: {exc})")


def evaluate(node: ast.expr, scope: Scope) -> Any:
    """The static value of an expression in ``scope`` (``Unknown`` where it cannot be known)."""
    pinned = _pinned_by_text(node, scope.ctx)
    if pinned is not None:
        return pinned
    rule = _RULES.get(type(node))
    if rule is None:
        return Unknown(scope.ctx.text(node), f"{type(node).__name__} is not evaluated")
    return rule(node, scope)


def truth(node: ast.expr, scope: Scope) -> bool | Unknown:
    """A condition's value; undecidable platform tests resolved by ``platform_guess`` (noted)."""
    value = evaluate(node, scope)
    if not isinstance(value, Unknown):
        try:
            return bool(value)
        except operators.OPERATION_ERRORS as exc:  # an object without a static truth value
            return failed(scope.ctx.text(node), "truth value not static", exc)
    text = scope.ctx.text(node)
    guess = platform_guess_expr(node, scope)
    if guess is not None:
        scope.ctx.notes.assume(f"`{text}` taken as {guess} (analysis is for {scope.ctx.platform})")
        return guess
    return value


def _pinned_by_text(node: ast.expr, ctx: Context) -> Any:
    """A pinned shape keyed by this expression's text (``q.shape[0]``, ``x.stride(1)``)."""
    if not ctx.pinned or isinstance(node, (ast.Name, ast.Constant)):
        return None
    if not isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        return None
    return ctx.pinned.get(ast.unparse(node))


def _sequence(node: ast.Tuple | ast.List, scope: Scope) -> Any:
    items: list = []
    for element in node.elts:
        if isinstance(element, ast.Starred):
            inner = evaluate(element.value, scope)
            if isinstance(inner, (tuple, list)):
                items.extend(inner)
                continue
            return Unknown(scope.ctx.text(node), f"unpacks {scope.ctx.text(element.value)}, whose length is unknown")
        items.append(evaluate(element, scope))
    return tuple(items) if isinstance(node, ast.Tuple) else list(items)


def _dict(node: ast.Dict, scope: Scope) -> Any:
    out = {}
    for key, value in zip(node.keys, node.values):
        if key is None:
            inner = evaluate(value, scope)
            if isinstance(inner, dict):
                out.update(inner)
            else:
                return Unknown(scope.ctx.text(node), f"unpacks {scope.ctx.text(value)}, which is unknown")
            continue
        k = evaluate(key, scope)
        if isinstance(k, Unknown):
            return Unknown(scope.ctx.text(node), "a key is unknown")
        item = evaluate(value, scope)
        try:
            out[k] = item
        except TypeError as exc:  # an unhashable key
            return failed(scope.ctx.text(node), "cannot build the dict", exc)
    return out


def _binop(node: ast.BinOp, scope: Scope) -> Any:
    left = evaluate(node.left, scope)
    right = evaluate(node.right, scope)
    missing = first_unknown(left, right)
    if missing is not None:
        return derived(scope.ctx.text(node), missing)
    try:
        return operators.binary(node.op, left, right)
    except operators.OPERATION_ERRORS as exc:
        return failed(scope.ctx.text(node), "cannot compute", exc)


def _unaryop(node: ast.UnaryOp, scope: Scope) -> Any:
    operand = evaluate(node.operand, scope)
    if isinstance(operand, Unknown):
        return derived(scope.ctx.text(node), operand)
    try:
        return operators.unary(node.op, operand)
    except operators.OPERATION_ERRORS as exc:
        return failed(scope.ctx.text(node), "cannot compute", exc)


def _compare(node: ast.Compare, scope: Scope) -> Any:
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
                value = operators.compare(op, left, right)
            except operators.OPERATION_ERRORS as exc:
                return failed(ctx.text(node), "cannot compare", exc)
        result = result and value
        left = right
    return result


def _boolop(node: ast.BoolOp, scope: Scope) -> Any:
    """Python's `and`/`or` (returning an operand, as `forced or MAX` needs), left to right."""
    is_and = isinstance(node.op, ast.And)
    value: Any = None
    for operand in node.values:
        value = evaluate(operand, scope)
        if isinstance(value, Unknown):
            guess = platform_guess_expr(operand, scope)
            if guess is None:
                return derived(scope.ctx.text(node), value)
            scope.ctx.notes.assume(f"`{scope.ctx.text(operand)}` taken as {guess} (analysis is for {scope.ctx.platform})")
            value = guess
        try:
            decisive = (not value) if is_and else bool(value)
        except operators.OPERATION_ERRORS as exc:
            return failed(scope.ctx.text(node), "truth value not static", exc)
        if decisive:
            return value
    return value


def _ifexp(node: ast.IfExp, scope: Scope) -> Any:
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


def _known_items(iterable: ast.expr, scope: Scope) -> tuple | list | range | None:
    value = evaluate(iterable, scope)
    if not isinstance(value, (tuple, list, range)) or not is_known(tuple(value)):
        return None
    return value


def _listcomp(node: ast.ListComp, scope: Scope) -> Any:
    def keep(cond: ast.expr, inner: Scope) -> bool | None:
        decided = truth(cond, inner)
        return None if isinstance(decided, Unknown) else decided

    results = comprehension_values(
        node, scope,
        items=_known_items,
        child=lambda outer: Scope(scope.ctx, outer),
        bind=lambda target, item, inner: bind_target(target, item, inner, getattr(target, "lineno", None)),
        keep=keep,
        value=evaluate,
    )
    if results is None:
        return Unknown(scope.ctx.text(node), "comprehension over values not known")
    return results


def _subscript(node: ast.Subscript, scope: Scope) -> Any:
    text = scope.ctx.text(node)
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
    except (LookupError, TypeError) as exc:  # an unhashable key, an index out of range, a non-sequence
        return failed(text, "subscript not evaluated", exc)


def _attribute(node: ast.Attribute, scope: Scope) -> Any:
    text = scope.ctx.text(node)
    base = evaluate(node.value, scope)
    if isinstance(base, ModuleRef):
        if base.name == "torch" and node.attr in TORCH_DTYPES:
            return DType(TORCH_DTYPES[node.attr])
        if base.name == "triton.language" and node.attr in TL_DTYPES:
            return DType(TL_DTYPES[node.attr])
        return ModuleRef(f"{base.name}.{node.attr}")
    if isinstance(base, Tensor):
        if node.attr == "dtype":
            return DType(base.dtype) if base.dtype else Unknown(text, "dtype unknown")
        return Unknown(text, f"tensor attribute {node.attr} (pass it as --shape '{text}=N')")
    if isinstance(base, ConfigValue):
        return getattr(base, node.attr, Unknown(text, "config attribute"))
    if isinstance(base, Unknown):
        return derived(text, base)
    return Unknown(text, "attribute not evaluated")


def _slice(node: ast.Slice, scope: Scope) -> Any:
    parts = [evaluate(p, scope) if p is not None else None for p in (node.lower, node.upper, node.step)]
    if first_unknown(*parts):
        return Unknown(scope.ctx.text(node), "slice bound unknown")
    return slice(*parts)


def _named(node: ast.NamedExpr, scope: Scope) -> Any:
    value = evaluate(node.value, scope)
    scope.assign(node.target.id, value, node.lineno)
    return value


# ---------------------------------------------------------------------------------------------
# calls


def _call(node: ast.Call, scope: Scope) -> Any:
    ctx = scope.ctx
    text = ctx.text(node)
    func = node.func
    # Method calls on values: tensors by dtype, .to(), .view(dtype) ...
    if isinstance(func, ast.Attribute):
        base_value = evaluate(func.value, scope)
        if not isinstance(base_value, ModuleRef):
            return _method(node, func.attr, base_value, scope)
    callee = evaluate(func, scope)
    args, kwargs, missing = _call_arguments(node, scope)
    if isinstance(callee, ModuleRef):
        return _module_call(node, callee.name, args, kwargs, missing, ctx)
    if isinstance(callee, Builtin):
        if missing is not None:
            return derived(text, missing)
        try:
            return callee.fn(*args, **kwargs)
        except _CALL_ERRORS as exc:
            return failed(text, f"{callee.name}() failed statically", exc)
    if isinstance(callee, Closure):
        return call_closure(callee, args, kwargs, text, ctx)
    if isinstance(callee, Unknown):
        return Unknown(text, f"call to {callee.text} ({callee.why})")
    return Unknown(text, "call not evaluated")


def _module_call(node: ast.Call, name: str, args: list, kwargs: dict, missing: Unknown | None, ctx: Context) -> Any:
    """A call of a module's function (``triton.cdiv``, ``tl.program_id``, ``torch.empty``, ``math.log2``)."""
    text = ctx.text(node)
    if name in _CONFIG_CLASSES:
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
    if name.startswith("triton.language.") and name.split(".")[-1] in _RUNTIME_DATA:
        return Unknown(text, "runtime data (tl.load)")
    if name.startswith("torch."):
        return torch_call(name.split(".", 1)[1], args, kwargs, text)
    fn = _MODULE_FUNCTIONS.get(name)
    if fn is None:
        return Unknown(text, f"call to {name} is not evaluated")
    if missing is not None:
        return derived(text, missing)
    try:
        return fn(*args, **kwargs)
    except _CALL_ERRORS as exc:
        return failed(text, f"{name} failed statically", exc)


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


def _method(node: ast.Call, method: str, base: Any, scope: Scope) -> Any:
    """``base.method(...)`` for a base that is no module: dtype conversions and views of tensors,
    calls of closures, ``dict.get``."""
    ctx = scope.ctx
    text = ctx.text(node)
    args, kwargs, missing = _call_arguments(node, scope)
    if method in ("view", "to", "type"):
        for candidate in list(args) + [kwargs.get("dtype")]:
            dtype = dtype_of(candidate)
            if dtype:
                return Tensor(dtype, f".{method}({dtype}) in `{text}`")
        if isinstance(base, Tensor):
            return base if method != "type" else Unknown(text, "tensor type")
        if method == "to" and isinstance(base, (int, float)):
            return base  # kernel scalars: x.to(tl.int64)
        return derived(text, base) if isinstance(base, Unknown) else Unknown(text, "not evaluated")
    if method in DTYPE_METHODS and not args:
        if isinstance(base, (Tensor, Unknown)):
            dtype = DTYPE_METHODS[method]
            return Tensor(dtype, f".{method}() in `{text}`")
    if method in SAME_DTYPE_METHODS and isinstance(base, Tensor):
        return Tensor(base.dtype, base.origin)
    if isinstance(base, Closure) and method == "__call__":
        return call_closure(base, args, kwargs, text, ctx)
    if isinstance(base, dict) and method == "get":
        if missing is None and args:
            try:
                return base.get(args[0], args[1] if len(args) > 1 else None)
            except TypeError as exc:  # an unhashable key
                return failed(text, ".get() not evaluated", exc)
    if isinstance(base, (int, float)) and method in ("to", "__index__"):
        return base
    if isinstance(base, Unknown):
        return derived(text, base)
    return Unknown(text, f".{method}() is not evaluated")


def call_closure(closure: Closure, args: list, kwargs: dict, text: str, ctx: Context) -> Any:
    """Run a lambda or def statically on known arguments; Unknown if anything in it is not."""
    from .statements import execute  # statements import this module: imported at call time, keeping imports acyclic

    if ctx.depth >= _MAX_CALL_DEPTH:
        return Unknown(text, "call nesting too deep to evaluate")
    node = closure.node
    scope = Scope(ctx, closure.scope)
    bind_arguments(node.args, args, kwargs, scope, text)
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


def bind_arguments(spec: ast.arguments, args: list, kwargs: dict, scope: Scope, text: str) -> None:
    """Bind call arguments to a function's parameters in ``scope``, defaults evaluated in its parent."""
    def missing(param: ast.arg, keyword_only: bool) -> Unknown:
        if keyword_only:
            return Unknown(param.arg, "keyword argument not given")
        return Unknown(param.arg, f"argument {param.arg} not given in `{text}`")

    bound, extra_args, extra_kwargs = bind_parameters(
        spec, args, kwargs, default=lambda node: evaluate(node, scope.parent or scope), missing=missing
    )
    for param in list(spec.posonlyargs) + list(spec.args):
        scope.values[param.arg] = bound[param.arg]
    if spec.vararg is not None:
        scope.values[spec.vararg.arg] = extra_args
    for param in spec.kwonlyargs:
        scope.values[param.arg] = bound[param.arg]
    if spec.kwarg is not None:
        scope.values[spec.kwarg.arg] = extra_kwargs


_RULES = {
    ast.Constant: lambda node, scope: node.value,
    ast.Name: lambda node, scope: scope.lookup(node.id),
    ast.Tuple: _sequence,
    ast.List: _sequence,
    ast.Dict: _dict,
    ast.BinOp: _binop,
    ast.UnaryOp: _unaryop,
    ast.Compare: _compare,
    ast.BoolOp: _boolop,
    ast.IfExp: _ifexp,
    ast.Call: _call,
    ast.Subscript: _subscript,
    ast.Attribute: _attribute,
    ast.Lambda: Closure,
    ast.ListComp: _listcomp,
    ast.Slice: _slice,
    ast.NamedExpr: _named,
}
