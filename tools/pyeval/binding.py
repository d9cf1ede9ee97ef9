"""How values flow into names: assignment targets, a call's parameters, a comprehension's loop.

The walks are shared; what a value *is* stays with the evaluator, passed in as small callbacks:
how to split a value over a tuple target, how to evaluate a default, how to iterate an iterable.
Each callback's contract is in the docstring of the function taking it.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Iterable


def bind_target(
    target: ast.expr,
    value: Any,
    store: Callable[[str, Any], None],
    split: Callable[[ast.Tuple | ast.List, Any], list],
) -> None:
    """Bind ``value`` to an assignment target.

    A name: ``store(name, value)``. A tuple or list target: ``split(target, value)`` returns one
    value per element of ``target.elts`` (for a starred element, what it collects), and each is bound
    to its element in turn. A starred target binds its inner target. Attributes and subscripts bind
    nothing (no object state is tracked)."""
    if isinstance(target, ast.Name):
        store(target.id, value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element, item in zip(target.elts, split(target, value)):
            bind_target(element, item, store, split)
    elif isinstance(target, ast.Starred):
        bind_target(target.value, value, store, split)


def star_index(target: ast.Tuple | ast.List) -> int | None:
    """Position of the starred element of a tuple target, None when it has none."""
    return next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)), None)


def split_sequence(target: ast.Tuple | ast.List, value: tuple | list) -> list | None:
    """Python's own unpacking of a known sequence over ``target`` (a starred element collects a
    list), or None when the lengths do not fit."""
    n = len(target.elts)
    star = star_index(target)
    if star is None:
        return list(value) if len(value) == n else None
    tail = n - star - 1
    if len(value) < n - 1:
        return None
    return list(value[:star]) + [list(value[star:len(value) - tail])] + list(value[len(value) - tail:])


def bind_parameters(
    spec: ast.arguments,
    args: list,
    kwargs: dict,
    default: Callable[[ast.expr], Any],
    missing: Callable[[ast.arg, bool], Any],
) -> tuple[dict, tuple, dict]:
    """Bind a call's arguments to a function's named parameters, the way Python does.

    Returns ({parameter: value} for positional and keyword-only parameters, in declaration order;
    the positional arguments left over for ``*args``; the keyword arguments no named parameter
    took, for ``**kwargs``). A parameter not given takes ``default(expr)`` of its default
    (evaluated here, in declaration order), else ``missing(param, keyword_only)``. The caller binds
    ``spec.vararg``/``spec.kwarg`` from the leftovers as it models them. A bound receiver is passed
    as the first positional argument."""
    positional = list(spec.posonlyargs) + list(spec.args)
    first_default = len(positional) - len(spec.defaults)
    left = dict(kwargs)
    bound: dict = {}
    for i, param in enumerate(positional):
        if i < len(args):
            bound[param.arg] = args[i]
        elif param.arg in left:
            bound[param.arg] = left.pop(param.arg)
        elif i >= first_default:
            bound[param.arg] = default(spec.defaults[i - first_default])
        else:
            bound[param.arg] = missing(param, False)
    for param, default_node in zip(spec.kwonlyargs, spec.kw_defaults):
        if param.arg in left:
            bound[param.arg] = left.pop(param.arg)
        elif default_node is not None:
            bound[param.arg] = default(default_node)
        else:
            bound[param.arg] = missing(param, True)
    return bound, tuple(args[len(positional):]), left


def comprehension_values(
    node: ast.ListComp | ast.SetComp | ast.GeneratorExp,
    scope: Any,
    *,
    items: Callable[[ast.expr, Any], Iterable | None],
    child: Callable[[Any], Any],
    bind: Callable[[ast.expr, Any, Any], None],
    keep: Callable[[ast.expr, Any], bool | None],
    value: Callable[[ast.expr, Any], Any],
) -> list | None:
    """The element values a comprehension produces, in order, or None when that is not known.

    For each generator, left to right: ``items(iter_expr, scope)`` gives the values it iterates (None:
    not known), each is bound with ``bind(target, item, inner)`` in ``inner = child(scope)``, its
    conditions are decided by ``keep(cond, inner)`` (None: not known), and the innermost scope
    evaluates ``value(node.elt, inner)``. ``scope`` is whatever the evaluator's name scope is."""
    results: list = []

    def run(generators: list, outer: Any) -> bool:
        if not generators:
            results.append(value(node.elt, outer))
            return True
        gen = generators[0]
        iterable = items(gen.iter, outer)
        if iterable is None:
            return False
        for item in iterable:
            inner = child(outer)
            bind(gen.target, item, inner)
            chosen = True
            for cond in gen.ifs:
                decided = keep(cond, inner)
                if decided is None:
                    return False
                chosen = chosen and decided
            if chosen and not run(generators[1:], inner):
                return False
        return True

    return results if run(list(node.generators), scope) else None
