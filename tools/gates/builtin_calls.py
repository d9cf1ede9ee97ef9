"""The Python builtins as the gate interpreter calls them: `fn(interp, args, kwargs, label)` on
abstract arguments, answering an `Unknown` (with what it depends on) where an argument is not
concrete. The pure ones are tools.pyeval.builtins' table applied by Python; the others (`all`,
`hasattr`, `getattr`, `map`, ...) look into abstract values. Builtins not modelled are `External`.
"""

from __future__ import annotations

import ast

from tools.pyeval.builtins import PURE
from tools.pyeval.operators import OPERATION_ERRORS
from tools.pyeval.values import Builtin

from .labels import failure
from .values import (
    MISSING,
    BoundBuiltin,
    ClassRef,
    Decorator,
    External,
    FuncRef,
    Instance,
    ModuleRef,
    PartialRef,
    Unknown,
    concrete,
    freeze,
    join,
    truth_of,
    uncertainty,
    unknown,
)


def _need_concrete(args, label):
    for a in args:
        if not concrete(a):
            labels, arch = uncertainty(a)
            return Unknown(labels=labels or frozenset([label]), arch=arch)
    return None


def _pure(fn):
    """A builtin applied by Python itself to concrete positional arguments."""

    def run(interp, args, kwargs, label):
        if kwargs:
            return unknown(label, why="keyword arguments to a builtin are not evaluated")
        bad = _need_concrete(args, label)
        if bad is not None:
            return bad
        try:
            result = fn(*args)
        except OPERATION_ERRORS as exc:
            return unknown(label, why=failure(exc))
        return freeze(list(result)) if isinstance(result, (list, map, filter)) else result

    return run


def _iterable_values(value):
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__generator__":
        return value[1]
    if isinstance(value, (tuple, str, frozenset)):
        return value
    if isinstance(value, dict):
        return tuple(value)
    return None


def _all_any(is_all):
    def run(interp, args, kwargs, label):
        if len(args) != 1:
            return unknown(label)
        values = _iterable_values(args[0])
        if values is None:
            labels, arch = uncertainty(args[0])
            return Unknown(labels=labels or frozenset([label]), arch=arch)
        truths = [truth_of(v) for v in values]
        if is_all:
            if any(t is False for t in truths):
                return False
            if all(t is True for t in truths):
                return True
        else:
            if any(t is True for t in truths):
                return True
            if all(t is False for t in truths):
                return False
        labels: set = set()
        arch = False
        for v in values:
            sub_labels, sub_arch = uncertainty(v)
            labels |= sub_labels
            arch = arch or sub_arch
        return Unknown(labels=frozenset(labels) or frozenset([label]), arch=arch)

    return run


def _tuple_like(interp, args, kwargs, label):
    if not args:
        return ()
    values = _iterable_values(args[0])
    if values is None:
        labels, arch = uncertainty(args[0])
        return Unknown(labels=labels or frozenset([label]), arch=arch)
    return tuple(values)


def _map(interp, args, kwargs, label):
    if len(args) != 2:
        return unknown(label)
    values = _iterable_values(args[1])
    if values is None:
        return unknown(label)
    return ("__generator__", tuple(interp.call(args[0], [v], {}, None, label) for v in values))


def _hasattr(interp, args, kwargs, label):
    if len(args) != 2 or not isinstance(args[1], str):
        return unknown(label)
    obj, name = args
    if isinstance(obj, External):
        if obj.path == "torch" and name == "cuda":
            return True
        return unknown(label)
    if isinstance(obj, ModuleRef):
        scope = interp.project.scope(obj.name)
        return scope is not None and name in scope.bindings
    if isinstance(obj, (Instance, ClassRef)):
        cls = obj.cls if isinstance(obj, Instance) else obj
        found = interp.class_attr(cls, name, None, obj if isinstance(obj, Instance) else None)
        if found is not MISSING:
            return True
        return unknown(label)
    if concrete(obj):
        return hasattr(obj, name)
    return unknown(label)


def _getattr(interp, args, kwargs, label):
    if len(args) < 2 or not isinstance(args[1], str):
        return unknown(label)
    obj, name = args[0], args[1]
    node = ast.Attribute(value=ast.Name(id="_", ctx=ast.Load()), attr=name, ctx=ast.Load())
    if isinstance(obj, ModuleRef):
        scope = interp.project.scope(obj.name)
        if scope is not None and name not in scope.bindings and not scope.star_imports and len(args) == 3:
            return args[2]
    value = interp.lift(lambda o: interp.attribute(o, name, node), obj)
    if isinstance(obj, External) and len(args) == 3:
        return join([value, args[2]])
    return value


def _callable(interp, args, kwargs, label):
    if len(args) != 1:
        return unknown(label)
    value = args[0]
    if isinstance(value, (FuncRef, PartialRef, ClassRef, Decorator, BoundBuiltin, Builtin)):
        return True
    if value is None or concrete(value):
        return False
    labels, arch = uncertainty(value)
    if isinstance(value, External):
        return unknown(f"{value.path} callable")
    return Unknown(labels=labels or frozenset([label]), arch=arch)


def _isinstance(interp, args, kwargs, label):
    return unknown(label)


def _bool(interp, args, kwargs, label):
    if not args:
        return False
    truth = truth_of(args[0])
    if truth is None:
        labels, arch = uncertainty(args[0])
        return Unknown(labels=labels or frozenset([label]), arch=arch)
    return truth


def _len(interp, args, kwargs, label):
    if len(args) == 1:
        values = _iterable_values(args[0])
        if values is not None:
            return len(values)
    return unknown(label)


BUILTINS = {
    name: Builtin(name, fn)
    for name, fn in {
        **{name: _pure(PURE[name]) for name in ("int", "str", "float", "abs", "min", "max", "sorted", "round", "divmod")},
        "len": _len,
        "bool": _bool,
        "tuple": _tuple_like,
        "list": _tuple_like,
        "set": _tuple_like,
        "frozenset": _tuple_like,
        "all": _all_any(True),
        "any": _all_any(False),
        "map": _map,
        "hasattr": _hasattr,
        "getattr": _getattr,
        "callable": _callable,
        "isinstance": _isinstance,
    }.items()
}
BUILTINS["object"] = External("object")
BUILTINS["NotImplemented"] = External("NotImplemented")
# Builtins the scan does not apply: calls of them are calls of outside functions.
for _name in ("print", "range", "type", "id", "repr", "zip", "enumerate", "dict", "super", "iter", "next", "open", "vars", "globals", "issubclass", "sum", "reversed", "filter", "format", "hash", "ord", "chr", "bytes", "object", "property", "staticmethod", "classmethod", "Exception", "ValueError", "RuntimeError", "ImportError", "TypeError", "KeyError", "AttributeError", "NotImplementedError", "AssertionError", "OSError", "ModuleNotFoundError"):
    BUILTINS.setdefault(_name, External(_name))
