"""Abstract values for the gate interpreter.

Concrete Python values (ints, strings, tuples, None, bools) stand for themselves. What the source
cannot tell statically is an `Unknown` (tools.pyeval.values: the gates scan fills its `labels`, what
it depends on, `arch`, whether that looked architecture-related and stayed unresolved, and `truth`,
what is known of its truthiness: the result of `x and y` when `x` is unknown is either a falsy `x`
or `y`), with `why` saying the reason where one is known. Modules of the scanned tree are
`ModuleRef`s. `Alts` holds a few possible values
(a helper that returns False on one path and True on another). References to code in the scanned
tree (functions, classes, modules) and to outside objects (`torch.cuda`) are small frozen records.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Any

from tools.pyeval.values import ModuleRef, Unknown

MAX_ALTS = 12
# "No such attribute/field" from a lookup, where None is a legitimate value.
MISSING = object()


@dataclass(frozen=True)
class Alts:
    """One of several possible values (never nested, never a single value). `labels` say what
    chooses between them (a test the scan could not decide, an import that may fail), `arch`
    whether that choice looked architecture-related and stayed unresolved."""

    values: frozenset
    labels: frozenset = field(default=frozenset(), compare=False)
    arch: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Tagged:
    """A value produced on a path chosen by something unknown (only inside a join)."""

    value: Any
    labels: frozenset
    arch: bool = False


@dataclass(frozen=True)
class FuncRef:
    """A function defined in the scanned tree."""

    module: str
    qualname: str
    node: ast.AST = field(compare=False, hash=False, repr=False)
    node_id: int = 0
    self_value: Any = None  # bound receiver for methods
    is_classmethod: bool = False


@dataclass(frozen=True)
class PartialRef:
    """functools.partial(func, *args, **kwargs) over an in-tree function."""

    func: FuncRef
    args: tuple = ()
    kwargs: tuple = ()  # ((name, value), ...)


@dataclass(frozen=True)
class ClassRef:
    module: str
    qualname: str
    node: ast.AST = field(compare=False, hash=False, repr=False)
    node_id: int = 0


@dataclass(frozen=True)
class Instance:
    cls: ClassRef


@dataclass(frozen=True)
class External:
    """Something outside the scanned tree, by dotted path (`torch.cuda`, `os.environ`)."""

    path: str


@dataclass(frozen=True)
class Decorator:
    """A wrapper such as lru_cache(maxsize=1) that returns the function it is applied to."""

    name: str


@dataclass(frozen=True)
class EnvField:
    """An entry of an environment-variable registry (`envs.NAME` whose class reads os.environ)."""

    name: str
    default: Any
    cls: ClassRef
    defined_at: str


@dataclass(frozen=True)
class BoundBuiltin:
    """A method of a concrete value (`"a.b".split`) or of an EnvField."""

    receiver: Any
    name: str


class Cap(tuple):
    """A device compute capability (major, minor): a tuple with `major`, `minor`, `to_int()`."""

    @property
    def major(self) -> int:
        return self[0]

    @property
    def minor(self) -> int:
        return self[1]


@dataclass(frozen=True)
class Props:
    """torch.cuda.get_device_properties(...) of the device under evaluation."""

    major: int
    minor: int


def tag(value: Any, labels: frozenset, arch: bool = False) -> Tagged:
    if isinstance(value, Tagged):
        return Tagged(value.value, value.labels | labels, value.arch or arch)
    return Tagged(value, frozenset(labels), arch)


def unknown(label: str | None = None, *, arch: bool = False, truth: bool | None = None, why: str = "") -> Unknown:
    """A fresh unknown depending on `label` (source text), for the reason `why`."""
    return Unknown(why=why, labels=frozenset([label]) if label else frozenset(), arch=arch, truth=truth, not_none=truth is True)


def concrete(value: Any) -> bool:
    """Whether `value` is a plain Python value all the way down (None, bool, number, str, bytes, and
    tuples/frozensets of them): what Python's own operators may be applied to."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(concrete(v) for v in value)
    return False


def is_unknown(value: Any) -> bool:
    return isinstance(value, (Unknown, Alts))


def hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def freeze(value: Any) -> Any:
    """Lists become tuples and sets frozensets so values can sit in Alts and memo keys."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, set):
        return frozenset(freeze(v) for v in value)
    if isinstance(value, dict):
        return value
    return value


def join(values: list, labels: frozenset = frozenset(), arch: bool = False) -> Any:
    """The value that is any of `values` (flattening Alts; Unknowns stay distinct by truth).
    When the alternatives differ, the result remembers what chose between them."""
    flat: list = []
    labels = set(labels)
    for value in values:
        if isinstance(value, Tagged):
            labels |= value.labels
            arch = arch or value.arch
            value = value.value
        if isinstance(value, Alts):
            flat.extend(value.values)
            labels |= value.labels
            arch = arch or value.arch
        else:
            flat.append(freeze(value))
    distinct: list = []
    seen: set = set()
    for value in flat:
        key = _alt_key(value)
        if key not in seen:
            seen.add(key)
            distinct.append(value)
    if len(distinct) == 1:
        return distinct[0]
    if not distinct:
        return unknown("no value")
    if len(distinct) > MAX_ALTS or not all(hashable(v) for v in distinct):
        collapsed = collapse(distinct)
        return Unknown(
            why=f"one of {len(distinct)} values", labels=collapsed.labels | frozenset(labels), arch=collapsed.arch or arch,
            truth=collapsed.truth,
        )
    return Alts(frozenset(distinct), frozenset(labels), arch)


def _alt_key(value: Any) -> Any:
    # True == 1 and False == 0 in Python; keep them apart so a helper returning 1 or True stays two values.
    if hashable(value):
        return (type(value).__name__, value)
    return ("id", id(value))


def collapse(values: list) -> Unknown:
    labels: set = set()
    arch = False
    truths = set()
    for value in values:
        if isinstance(value, Unknown):
            labels |= value.labels
            arch = arch or value.arch
        truths.add(truth_of(value))
    truth = truths.pop() if len(truths) == 1 else None
    return Unknown(labels=frozenset(labels), arch=arch, truth=truth if truth in (True, False) else None)


def truth_of(value: Any) -> bool | None:
    """True/False when the truthiness is known, None when not."""
    if isinstance(value, Unknown):
        return value.truth
    if isinstance(value, Alts):
        truths = {truth_of(v) for v in value.values}
        return truths.pop() if len(truths) == 1 else None
    if isinstance(value, (FuncRef, PartialRef, ClassRef, ModuleRef, Decorator, BoundBuiltin, EnvField, Props)):
        return True
    if isinstance(value, (External, Instance)):
        return None
    # Every other value is a plain Python value or a record of ours: its truth is Python's.
    return bool(value)


def uncertainty(value: Any) -> tuple[frozenset, bool]:
    """(labels, arch) of the unknown parts of `value`."""
    if isinstance(value, Unknown):
        return value.labels, value.arch
    if isinstance(value, Alts):
        labels: set = set(value.labels)
        arch = value.arch
        for v in value.values:
            sub_labels, sub_arch = uncertainty(v)
            labels |= sub_labels
            arch = arch or sub_arch
        return frozenset(labels), arch
    return frozenset(), False


def refine_truth(value: Any, truth: bool) -> Any:
    """`value` as seen inside a branch where its truthiness is `truth`."""
    if isinstance(value, Unknown):
        return value.with_truth(truth)
    if isinstance(value, Alts):
        kept = [refine_truth(v, truth) for v in value.values if truth_of(v) in (truth, None)]
        return join(kept, value.labels, value.arch) if kept else value
    return value


def refine_none(value: Any, is_none: bool) -> Any:
    """`value` inside a branch where `value is None` is `is_none`."""
    if isinstance(value, Alts):
        kept = [v for v in value.values if (v is None) == is_none or isinstance(v, Unknown)]
        if not is_none:
            kept = [replace(v, not_none=True) if isinstance(v, Unknown) else v for v in kept]
        return join(kept, value.labels, value.arch) if kept else value
    if isinstance(value, Unknown):
        return None if is_none else replace(value, not_none=True)
    return value
