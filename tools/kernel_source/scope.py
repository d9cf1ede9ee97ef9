"""Where names get their values: the scope chain of one evaluation, what it shares (``Context``) and
what it notes on the way (``Notes``).

A name resolves to its pinned value first (the caller's shapes win over the source's assignments),
then through the enclosing scopes, then to the builtins this evaluator applies, else to an Unknown.
Assignments bind through ``bind_target`` (a pinned name keeps its pinned value, noted).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from tools.pyeval import binding
from tools.pyeval.builtins import PURE
from tools.pyeval.syntax import dotted_name
from tools.pyeval.values import Builtin, ModuleRef, Unknown

from .source_text import normalize_key, segment


def _minmax(fn):
    """min/max over one sequence argument or over several arguments."""
    def apply(*args):
        if len(args) == 1 and isinstance(args[0], (tuple, list)):
            return fn(args[0])
        return fn(args)

    return apply


BUILTINS = {
    name: Builtin(name, PURE[name])
    for name in ("int", "float", "bool", "abs", "round", "len", "range", "tuple", "list", "sum", "divmod")
}
BUILTINS["min"] = Builtin("min", _minmax(min))
BUILTINS["max"] = Builtin("max", _minmax(max))


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
        if name in BUILTINS:
            return BUILTINS[name]
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


def triton_function(func: ast.expr, module: Scope) -> str | None:
    """The ``triton.language`` function a callee names through the module's imports: 'load' for
    ``tl.load`` / ``triton.language.load`` / an imported ``load``, 'math.exp2' for ``tl.math.exp2``; else None."""
    name = dotted_name(func)
    if not name:
        return None
    head, _, tail = name.partition(".")
    value = module.values.get(head)
    if isinstance(value, ModuleRef):
        full = f"{value.name}.{tail}" if tail else value.name
        if full.startswith("triton.language."):
            return full[len("triton.language."):]
    return None


def bind_target(target: ast.expr, value: Any, scope: Scope, line: int | None) -> None:
    """Assign ``value`` to an assignment target (names, tuples, starred); attributes/items ignored.

    A tuple target over a value of unknown length gets one Unknown per element, named by its index
    (``out[0]``), so that a pinned ``out[0]`` still applies."""
    ctx = scope.ctx

    def split(tuple_target: ast.Tuple | ast.List, whole: Any) -> list:
        if isinstance(whole, (tuple, list)):
            items = binding.split_sequence(tuple_target, whole)
            if items is not None:
                return items
        elts = tuple_target.elts
        star = binding.star_index(tuple_target)
        base = whole.text if isinstance(whole, Unknown) else ctx.text(tuple_target)
        why = whole.why if isinstance(whole, Unknown) else "unpacked from a value not known"
        items = []
        for i, element in enumerate(elts):
            if isinstance(element, ast.Starred):
                items.append(Unknown(f"{base}[{i}:]", "starred unpacking"))
                continue
            index_text = f"{base}[{i}]" if star is None or i < star else f"{base}[{i - len(elts)}]"
            pinned = ctx.pinned.get(normalize_key(index_text))
            items.append(pinned if pinned is not None else Unknown(index_text, why))
        return items

    binding.bind_target(target, value, lambda name, item: scope.assign(name, item, line), split)
