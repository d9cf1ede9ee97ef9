"""A small abstract interpreter of Python source, specialised to one question: what does this
expression evaluate to on a CUDA device of compute capability `sm`, with these environment
variables set?

It reads the tree's own definitions (helpers, partial/lru_cache wrappers, module constants, class
properties, dispatch tables behind `__getattr__`, environment-variable registries) and executes
helper bodies path by path. What it cannot know becomes an `Unknown` naming what it depends on.

Assumptions, stated once: the platform is CUDA (torch.cuda.is_available() is True, other
torch.<device>.is_available() are False, torch.version.hip is None), the device's capability is
`sm` wherever the capability is read, and torch.version.cuda is `cuda` (default: newer than any
version the tree checks). Environment variables not given are unset (their defaults apply).
Objects are as their constructors and methods initialise them (no runtime mutation is tracked).
"""

from __future__ import annotations

import ast
import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from .attributes import Attributes
from .calls import Calls
from .effects import Budget, Effects, Frame
from .expressions import Expressions
from .index import looks_arch
from .labels import text
from .names import MAX_LOCAL_CHAIN, Names
from .project import Project
from .statements import Statements
from .values import MISSING, Alts, ClassRef, Instance, Unknown, join, uncertainty, unknown

NEWEST_CUDA = "99.9"
MAX_DEPTH = 24
MAX_COMBOS = 32


@dataclass
class Guard:
    """One kind of memoised, recursion-guarded evaluation (see `Interpreter.guarded`): `kind`
    prefixes its memo keys, `active` holds the keys being evaluated (a list that guards may share,
    so that their nesting counts together), `limit` bounds how many may nest, `merge_depth` is how
    far below the caller its effects count (helpers found through it), and `cuts` whether a refusal
    marks the caller's result as not memoisable."""

    kind: str
    active: list
    limit: int | None = None
    merge_depth: int = 1
    cuts: bool = True


class Interpreter(Expressions, Names, Attributes, Calls, Statements):
    """Evaluates expressions of the tree for one architecture and one environment. Results of
    module constants, locals, instance attributes and helper calls are memoised (`guarded`); each
    evaluation's side facts (environment reads, helpers used, unresolved names) travel with it in
    `Effects`. The concerns live in the mixins: expressions, names, attributes, calls, statements."""

    def __init__(self, project: Project, sm: int, env: dict | None = None, cuda: str | None = None):
        self.project = project
        self.sm = sm
        self.env = dict(env or {})
        self.cuda = cuda or NEWEST_CUDA
        self.cuda_assumed = cuda is None
        self.fx = Effects()
        # Memo tables, shared between interpreters as far as the result allows: what did not read
        # the capability holds for every SM, what read no environment variable for every environment.
        env_key = tuple(sorted(self.env.items()))
        tables = project.shared.setdefault(("memo", self.cuda), {})
        self._memos = (
            tables.setdefault((sm, env_key), {}),
            tables.setdefault((sm, None), {}),
            tables.setdefault((None, env_key), {}),
            tables.setdefault((None, None), {}),
        )
        # Locals of enclosing functions and instance attributes nest together: a chain of either is
        # followed MAX_LOCAL_CHAIN steps. An instance attribute met again is refused without cutting
        # (its first evaluation is the one that counts).
        site_active: list = []
        self._globals_guard = Guard("g", [])
        self._locals_guard = Guard("s", site_active, limit=MAX_LOCAL_CHAIN, merge_depth=0)
        self._instance_guard = Guard("i", site_active, cuts=False)
        self._calls_guard = Guard("c", [], limit=MAX_DEPTH)
        self._binding_of: dict = project.shared.setdefault("binding_of", {})  # callable -> (name, file:line, module)
        # Facts about the tree that do not depend on the SM: shared by every interpreter.
        self._carries: dict = project.shared.setdefault("carries", {})
        self._worth: dict = project.shared.setdefault("worth", {})
        self._mro: dict = {}

    # ----------------------------------------------------------------- entry points

    def evaluate(self, node: ast.AST, module: str, chain: tuple = (), cls: ClassRef | None = None) -> tuple[Any, Effects]:
        """Value of `node`, an expression at a site in `module` inside the functions `chain`
        (outermost first) of class `cls`, with the effects of evaluating it. Running out of budget
        or of recursion depth gives an unknown saying so (and an unresolved entry); any other
        exception is a bug of the interpreter and propagates."""
        frame = Frame(module=module, mode="site" if chain else "global", chain=chain, cls=cls)
        if cls is not None and chain:
            frame.self_value = Instance(cls)
        with self._own_effects() as effects:
            try:
                value = self.ev(node, frame)
            except Budget:
                value = unknown(f"{text(node)} (evaluation budget exceeded)", why="evaluation budget exceeded")
                effects.unresolved.setdefault(text(node), "evaluation budget exceeded")
            except RecursionError:
                value = unknown(f"{text(node)} (too deeply nested)", why="too deeply nested to evaluate")
                effects.unresolved.setdefault(text(node), "too deeply nested to evaluate")
        return value, effects

    def call_value(self, func: Any, label: str) -> tuple[Any, Effects]:
        """Result of calling `func` (a FuncRef/PartialRef) with no arguments."""
        with self._own_effects() as effects:
            try:
                value = self.call(func, [], {}, None, label)
            except Budget:
                value = unknown(f"{label} (evaluation budget exceeded)", why="evaluation budget exceeded")
        return value, effects

    # ----------------------------------------------------------------- the memo and recursion guard

    def guarded(
        self,
        guard: Guard,
        key: tuple,
        compute: Callable[[], Any],
        refused: Callable[[], Any],
        *,
        shortcut: Callable[[], Any] | None = None,
        refuse: bool = False,
        memo: bool = True,
        entry: Any = None,
    ) -> Any:
        """The one memo and recursion guard of the interpreter, for every evaluation worth
        remembering (module globals, locals of enclosing functions, instance attributes, calls).

        In order: a result remembered for `key` is returned (unless `memo` is False: an unhashable
        key), its effects merged into the caller's; then `shortcut()`, when given, may answer
        without evaluating (MISSING: it does not); then a cycle (`key` already being evaluated), the
        guard's nesting limit, or `refuse` answers `refused()`, marking the caller's effects cut when
        the guard cuts; otherwise `compute()` runs with `entry` (default: `key`) on the guard's
        active list and its own effects, which are merged into the caller's and, unless cut,
        remembered with the result."""
        memo_key = (guard.kind,) + key
        if memo:
            found = self._memo(memo_key)
            if found is not None:
                self.fx.merge(found[1], guard.merge_depth)
                return found[0]
        if shortcut is not None:
            value = shortcut()
            if value is not MISSING:
                return value
        if refuse or (memo and key in guard.active) or (guard.limit is not None and len(guard.active) >= guard.limit):
            if guard.cuts:
                self.fx.cut = True
            return refused()
        guard.active.append(key if entry is None else entry)
        try:
            with self._own_effects() as effects:
                value = compute()
        finally:
            guard.active.pop()
        self.fx.merge(effects, guard.merge_depth)
        if memo and not effects.cut:
            self._remember(memo_key, value, effects)
        return value

    @contextmanager
    def _own_effects(self):
        """Collect the effects of the work inside into a fresh Effects (yielded), restoring the
        caller's afterwards; the caller decides how much of them to merge into its own."""
        saved, self.fx = self.fx, Effects()
        try:
            yield self.fx
        finally:
            self.fx = saved

    def _memo(self, key):
        for table in self._memos:
            found = table.get(key)
            if found is not None:
                return found
        return None

    def _remember(self, key, value, effects: Effects) -> None:
        index = (0 if effects.env_reads else 1) if effects.touched_arch else (2 if effects.env_reads else 3)
        self._memos[index][key] = (value, effects)

    # ----------------------------------------------------------------- shared by the mixins

    def unknown(self, node_or_label: Any, arch: bool | None = None, reason: str | None = None) -> Unknown:
        """An unknown for a node (or label); one that looks architecture-related is also listed as
        unresolved with `reason`."""
        label = node_or_label if isinstance(node_or_label, str) else text(node_or_label)
        is_arch = looks_arch(label) if arch is None else arch
        why = reason or "not resolvable in the tree"
        if is_arch:
            self.fx.unresolved.setdefault(label, why)
        return unknown(label, arch=is_arch, why=why)

    def where(self, module: str, node: ast.AST) -> str:
        file = self.project.files.get(module)
        rel = file.rel if file is not None else module
        return f"{rel}:{getattr(node, 'lineno', 0)}"

    def lift(self, fn, *values):
        """`fn` applied to each combination of the alternatives among `values` (Alts), joined; a
        plain call when none is an Alts; an unknown past MAX_COMBOS combinations."""
        if any(isinstance(v, Alts) for v in values):
            choices = [sorted(v.values, key=repr) if isinstance(v, Alts) else [v] for v in values]
            total = 1
            for c in choices:
                total *= len(c)
            if total > MAX_COMBOS:
                labels: set = set()
                arch = False
                for v in values:
                    sub_labels, sub_arch = uncertainty(v)
                    labels |= sub_labels
                    arch = arch or sub_arch
                return Unknown(why=f"{total} combinations of alternatives", labels=frozenset(labels), arch=arch)
            labels = frozenset().union(*(v.labels for v in values if isinstance(v, Alts)))
            arch = any(v.arch for v in values if isinstance(v, Alts))
            return join([fn(*combo) for combo in itertools.product(*choices)], labels, arch)
        return fn(*values)
