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
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tools import ast_ops

from .index import ENV_PRIMITIVES, HELPER_MAX_LINES, is_property, looks_arch, mentions
from .model import capability_of
from .project import Project, resolve_from
from .values import (
    Alts,
    BoundBuiltin,
    Cap,
    ClassRef,
    Decorator,
    EnvField,
    External,
    FuncRef,
    Instance,
    ModuleRef,
    PartialRef,
    Props,
    Unknown,
    tag,
    freeze,
    hashable,
    join,
    refine_none,
    refine_truth,
    truth_of,
    uncertainty,
    unknown,
)

NEWEST_CUDA = "99.9"
MAX_DEPTH = 24
MAX_STEPS = 300
MAX_STATES = 8
MAX_COMBOS = 32
LABEL_CHARS = 120
MAX_LOCAL_CHAIN = 4
MAX_LOCAL_BINDINGS = 6

_STR_METHODS = frozenset(
    "lower upper strip lstrip rstrip split rsplit startswith endswith replace join casefold isdigit isnumeric "
    "isalpha partition rpartition title capitalize count find index format removeprefix removesuffix".split()
)
_TUPLE_METHODS = frozenset({"count", "index"})
_DICT_METHODS = frozenset({"get", "keys", "values", "items"})
_DECORATORS = frozenset({"lru_cache", "cache", "wraps", "cached", "cache_once", "functools_cache"})
_ASSUMED_TRUE = frozenset({"torch.cuda.is_available"})


class _Budget(Exception):
    pass


@dataclass
class EnvRead:
    name: str
    default: Any
    defined_at: str | None


@dataclass
class Effects:
    """What an evaluation touched, beyond its value."""

    touched_arch: bool = False
    env_reads: dict = field(default_factory=dict)  # name -> EnvRead
    probes: set = field(default_factory=set)  # modules whose import may fail
    helpers: dict = field(default_factory=dict)  # defined_at -> (name, depth below the site, module)
    unresolved: dict = field(default_factory=dict)  # text -> reason
    notes: set = field(default_factory=set)
    cut: bool = False  # depends on a depth or recursion cut: not memoised

    def merge(self, other: "Effects", depth: int = 0) -> None:
        self.touched_arch = self.touched_arch or other.touched_arch
        for name, read in other.env_reads.items():
            self.env_reads.setdefault(name, read)
        self.probes |= other.probes
        for key, (name, level, module) in other.helpers.items():
            known = self.helpers.get(key)
            if known is None or known[1] > level + depth:
                self.helpers[key] = (name, level + depth, module)
        for key, value in other.unresolved.items():
            self.unresolved.setdefault(key, value)
        self.notes |= other.notes
        self.cut = self.cut or other.cut


@dataclass
class Frame:
    module: str
    mode: str  # "exec" (a helper being run), "site" (a test in place), "global" (module level)
    chain: tuple = ()  # enclosing function nodes, innermost last (site and exec)
    locals: dict | None = None  # exec mode
    cls: ClassRef | None = None
    self_value: Any = None
    steps: int = 0
    site: "Frame | None" = None  # a comprehension's enclosing frame, for names it does not bind


def text(node: ast.AST) -> str:
    """One-line source text of a node (labels of unknowns, reports); kept on the node once made."""
    cached = getattr(node, "_gates_text", None)
    if cached is not None:
        return cached
    try:
        out = ast.unparse(node)
    except Exception:  # unparse of a partial tree
        out = type(node).__name__
    out = " ".join(out.split())
    out = out if len(out) <= LABEL_CHARS else out[: LABEL_CHARS - 3] + "..."
    try:
        node._gates_text = out
    except AttributeError:
        pass
    return out


def _concrete(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(_concrete(v) for v in value)
    return False


def _decorator_names(node: ast.AST) -> set:
    names = set()
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute):
            names.add(target.attr)
        elif isinstance(target, ast.Name):
            names.add(target.id)
    return names


class Interpreter:
    """Evaluates expressions of the tree for one architecture and one environment. Results of
    module constants and helper calls are memoised per interpreter; each evaluation's side facts
    (environment reads, helpers used, unresolved names) travel with it in `Effects`."""

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
        self._global_stack: set = set()
        self._call_stack: list = []
        self._site_stack: set = set()
        self._binding_of: dict = project.shared.setdefault("binding_of", {})  # callable -> (name, file:line, module)
        # Facts about the tree that do not depend on the SM: shared by every interpreter.
        self._carries: dict = project.shared.setdefault("carries", {})
        self._worth: dict = project.shared.setdefault("worth", {})
        self._mro: dict = {}

    # ----------------------------------------------------------------- entry points

    def evaluate(self, node: ast.AST, module: str, chain: tuple = (), cls: ClassRef | None = None) -> tuple[Any, Effects]:
        """Value of `node`, an expression at a site in `module` inside the functions `chain`
        (outermost first) of class `cls`, with the effects of evaluating it."""
        frame = Frame(module=module, mode="site" if chain else "global", chain=chain, cls=cls)
        if cls is not None and chain:
            frame.self_value = Instance(cls)
        with self._own_effects() as effects:
            try:
                value = self.ev(node, frame)
            except _Budget:
                value = unknown(f"{text(node)} (evaluation budget exceeded)")
                effects.unresolved.setdefault(text(node), "evaluation budget exceeded")
            except RecursionError:
                value = unknown(f"{text(node)} (too deeply nested)")
                effects.unresolved.setdefault(text(node), "too deeply nested to evaluate")
        return value, effects

    def call_value(self, func: Any, label: str) -> tuple[Any, Effects]:
        """Result of calling `func` (a FuncRef/PartialRef) with no arguments."""
        with self._own_effects() as effects:
            try:
                value = self.call(func, [], {}, None, label)
            except _Budget:
                value = unknown(f"{label} (evaluation budget exceeded)")
        return value, effects

    # ----------------------------------------------------------------- helpers

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

    def unknown(self, node_or_label: Any, arch: bool | None = None, reason: str | None = None) -> Unknown:
        label = node_or_label if isinstance(node_or_label, str) else text(node_or_label)
        is_arch = looks_arch(label) if arch is None else arch
        if is_arch:
            self.fx.unresolved.setdefault(label, reason or "not resolvable in the tree")
        return unknown(label, arch=is_arch)

    def where(self, module: str, node: ast.AST) -> str:
        file = self.project.files.get(module)
        rel = file.rel if file is not None else module
        return f"{rel}:{getattr(node, 'lineno', 0)}"

    def lift(self, fn, *values):
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
                return Unknown(frozenset(labels), arch)
            labels = frozenset().union(*(v.labels for v in values if isinstance(v, Alts)))
            arch = any(v.arch for v in values if isinstance(v, Alts))
            return join([fn(*combo) for combo in itertools.product(*choices)], labels, arch)
        return fn(*values)

    # ----------------------------------------------------------------- expressions

    def ev(self, node: ast.AST, frame: Frame) -> Any:
        method = getattr(self, "ev_" + type(node).__name__, None)
        if method is None:
            return self.unknown(node, arch=False)
        return method(node, frame)

    def ev_Constant(self, node, frame):
        return node.value

    def ev_Name(self, node, frame):
        return self.lookup(node.id, frame, node)

    def ev_Tuple(self, node, frame):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return self.unknown(node, arch=False)
        values = [self.ev(e, frame) for e in node.elts]
        if any(isinstance(v, Alts) for v in values):
            return self.lift(lambda *vs: tuple(vs), *values)
        return tuple(freeze(v) for v in values)

    ev_List = ev_Tuple

    def ev_Set(self, node, frame):
        value = self.ev_Tuple(node, frame)
        if isinstance(value, tuple) and all(hashable(v) for v in value):
            return frozenset(value)
        return self.unknown(node, arch=False)

    def ev_Dict(self, node, frame):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                return self.unknown(node, arch=False)
            key = self.ev(k, frame)
            if not (_concrete(key) and hashable(key)):
                return self.unknown(node, arch=False)
            out[key] = self.ev(v, frame)
        return out

    def ev_JoinedStr(self, node, frame):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and value.format_spec is None and value.conversion == -1:
                v = self.ev(value.value, frame)
                if not _concrete(v):
                    return self.unknown(node, arch=False)
                parts.append(str(v))
            else:
                return self.unknown(node, arch=False)
        return "".join(parts)

    def ev_NamedExpr(self, node, frame):
        value = self.ev(node.value, frame)
        if frame.mode == "exec" and isinstance(node.target, ast.Name):
            frame.locals[node.target.id] = value
        return value

    def ev_Lambda(self, node, frame):
        return FuncRef(frame.module, "<lambda>", node, id(node))

    def ev_IfExp(self, node, frame):
        test = self.ev(node.test, frame)
        truth = truth_of(test)
        if truth is True:
            return self.ev(node.body, frame)
        if truth is False:
            return self.ev(node.orelse, frame)
        labels, arch = uncertainty(test)
        return join([self.ev(node.body, frame), self.ev(node.orelse, frame)], labels or frozenset([text(node.test)]), arch)

    def ev_BoolOp(self, node, frame):
        is_and = isinstance(node.op, ast.And)

        def rest(i):
            value = self.ev(node.values[i], frame)
            if i == len(node.values) - 1:
                return value
            truth = truth_of(value)
            if truth is (not is_and):
                return value
            if truth is is_and:
                return rest(i + 1)
            labels, arch = uncertainty(value)
            return join([refine_truth(value, not is_and), rest(i + 1)], labels, arch)

        return rest(0)

    def ev_UnaryOp(self, node, frame):
        value = self.ev(node.operand, frame)
        if isinstance(node.op, ast.Not):
            def neg(v):
                truth = truth_of(v)
                if truth is None:
                    labels, arch = uncertainty(v)
                    return Unknown(labels, arch)
                return not truth

            return self.lift(neg, value)

        def op(v):
            if not _concrete(v):
                labels, arch = uncertainty(v)
                return Unknown(labels or frozenset([text(node)]), arch)
            try:
                return ast_ops.unary(node.op, v)
            except Exception:
                return unknown(text(node))

        return self.lift(op, value)

    def binop(self, op, left, right, label):
        def apply(a, b):
            # `"%s" % x` is string formatting, not arithmetic: its result is not a gate value
            if type(op) not in ast_ops.BINARY or not (_concrete(a) and _concrete(b)) or isinstance(a, str) and isinstance(op, ast.Mod):
                labels = uncertainty(a)[0] | uncertainty(b)[0]
                return Unknown(labels or frozenset([label]), uncertainty(a)[1] or uncertainty(b)[1])
            try:
                return ast_ops.binary(op, a, b)
            except Exception:  # includes results too large to build from source
                return unknown(label)

        return self.lift(apply, left, right)

    def ev_BinOp(self, node, frame):
        return self.binop(node.op, self.ev(node.left, frame), self.ev(node.right, frame), text(node))

    def ev_Compare(self, node, frame):
        left = self.ev(node.left, frame)
        result: Any = True
        for op, comparator in zip(node.ops, node.comparators):
            right = self.ev(comparator, frame)
            step = self.compare(op, left, right, node, comparator)
            # chained comparisons: a < b < c is (a < b) and (b < c)
            truth = truth_of(result)
            if truth is False:
                return result
            result = step if truth is True else join([refine_truth(result, False), step])
            left = right
        return result

    def compare(self, op, left, right, node, right_node):
        # `"X" in os.environ` reads the environment
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, External) and right.path == "os.environ":
            if isinstance(left, str):
                self.record_env(left, None, None)
                present = left in self.env
                return present if isinstance(op, ast.In) else not present
            return self.unknown(node, arch=False)

        def apply(a, b):
            if isinstance(op, (ast.Is, ast.IsNot)):
                if b is None or a is None:
                    other = a if b is None else b
                    if isinstance(other, Unknown):
                        if other.not_none:
                            return isinstance(op, ast.IsNot)
                        return Unknown(other.labels, other.arch)
                    if isinstance(other, External):
                        return self.unknown(node, arch=False)
                    is_none = other is None
                    return is_none if isinstance(op, ast.Is) else not is_none
                if isinstance(a, (External,)) and isinstance(b, External):
                    same = a.path == b.path
                    return same if isinstance(op, ast.Is) else not same
                if _concrete(a) and _concrete(b) and isinstance(a, bool) and isinstance(b, bool):
                    return (a is b) if isinstance(op, ast.Is) else (a is not b)
                if isinstance(a, (FuncRef, ClassRef, ModuleRef)) and isinstance(b, (FuncRef, ClassRef, ModuleRef)):
                    same = a == b
                    return same if isinstance(op, ast.Is) else not same
                labels = uncertainty(a)[0] | uncertainty(b)[0]
                return Unknown(labels or frozenset([text(node)]), uncertainty(a)[1] or uncertainty(b)[1])
            if isinstance(a, External) and isinstance(b, External) and isinstance(op, (ast.Eq, ast.NotEq)):
                if a.path == b.path:
                    return isinstance(op, ast.Eq)
            comparable = (
                lambda v: _concrete(v) or isinstance(v, dict) and all(_concrete(k) for k in v)
            )
            if not (comparable(a) and comparable(b)):
                if isinstance(op, (ast.Eq, ast.NotEq)) and (
                    isinstance(a, (FuncRef, ClassRef, ModuleRef, Instance)) and isinstance(b, (FuncRef, ClassRef, ModuleRef))
                ):
                    same = a == b
                    return same if isinstance(op, ast.Eq) else not same
                # membership in a concrete container of an unknown: unknown
                labels = uncertainty(a)[0] | uncertainty(b)[0]
                arch = uncertainty(a)[1] or uncertainty(b)[1]
                return Unknown(labels or frozenset([text(node)]), arch)
            try:
                return ast_ops.compare(op, a, b)
            except Exception:
                return unknown(text(node))

        return self.lift(apply, left, right)

    def ev_Subscript(self, node, frame):
        value = self.ev(node.value, frame)
        if isinstance(node.slice, ast.Slice):
            parts = [self.ev(p, frame) if p is not None else None for p in (node.slice.lower, node.slice.upper, node.slice.step)]

            def cut(v, lo, hi, st):
                if isinstance(v, (tuple, str)) and all(p is None or isinstance(p, int) for p in (lo, hi, st)):
                    return v[slice(lo, hi, st)]
                labels, arch = uncertainty(v)
                return Unknown(labels or frozenset([text(node)]), arch)

            return self.lift(cut, value, *parts)
        index = self.ev(node.slice, frame)
        if isinstance(value, External) and value.path == "os.environ":
            if isinstance(index, str):
                self.record_env(index, None, None)
                if index in self.env:
                    return self.env[index]
                return unknown(f"os.environ[{index!r}] (unset)")
            return self.unknown(node, arch=False)

        def item(v, i):
            if isinstance(v, (tuple, str)) and isinstance(i, int):
                try:
                    return v[i]
                except IndexError:
                    return unknown(text(node))
            if isinstance(v, dict) and _concrete(i) and hashable(i):
                if i in v:
                    return v[i]
                return unknown(text(node))
            labels, arch = uncertainty(v)
            return Unknown(labels or frozenset([text(node)]), arch or looks_arch(text(node)) and isinstance(v, Unknown) and v.arch)

        return self.lift(item, value, index)

    def ev_Starred(self, node, frame):
        return self.unknown(node, arch=False)

    def comprehension(self, node, frame):
        if len(node.generators) != 1:
            return None
        gen = node.generators[0]
        if gen.is_async or not isinstance(gen.target, (ast.Name, ast.Tuple)):
            return None
        iterable = self.ev(gen.iter, frame)
        if isinstance(iterable, dict):
            iterable = tuple(iterable)
        if not isinstance(iterable, (tuple, str, frozenset)) or len(iterable) > 32:
            return None
        inner = Frame(
            module=frame.module, mode="exec", chain=frame.chain, locals={}, cls=frame.cls,
            self_value=frame.self_value, site=frame,
        )
        out = []
        for element in sorted(iterable, key=repr) if isinstance(iterable, frozenset) else iterable:
            self.bind_target(gen.target, element, inner.locals)
            keep = True
            for cond in gen.ifs:
                truth = truth_of(self.ev(cond, inner))
                if truth is None:
                    return None
                keep = keep and truth
            if keep:
                out.append(self.ev(node.elt, inner))
        return out

    def ev_GeneratorExp(self, node, frame):
        out = self.comprehension(node, frame)
        if out is None:
            return self.unknown(node, arch=False)
        return ("__generator__", tuple(out)) if all(hashable(v) for v in out) else self.unknown(node, arch=False)

    def ev_ListComp(self, node, frame):
        out = self.comprehension(node, frame)
        if out is None or not all(hashable(v) for v in out):
            return self.unknown(node, arch=False)
        return tuple(out)

    ev_SetComp = ev_ListComp

    def ev_Attribute(self, node, frame):
        base = self.ev(node.value, frame)
        return self.lift(lambda b: self.attribute(b, node.attr, node), base)

    def ev_Call(self, node, frame):
        func = self.ev(node.func, frame)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                return self.unknown(node, arch=looks_arch(text(node.func)) if isinstance(func, Unknown) and func.arch else False)
            args.append(self.ev(a, frame))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs["**"] = self.unknown(k.value, arch=False)
                continue
            kwargs[k.arg] = self.ev(k.value, frame)
        if isinstance(func, Alts):
            return join([self.call(f, args, kwargs, node, text(node)) for f in sorted(func.values, key=repr)])
        return self.call(func, args, kwargs, node, text(node))

    # ----------------------------------------------------------------- names

    def lookup(self, name: str, frame: Frame, node: ast.AST | None) -> Any:
        if frame.mode == "exec":
            if name in frame.locals:
                return frame.locals[name]
            if frame.site is not None:
                return self.lookup(name, frame.site, node)
            if frame.chain:
                scope = self.project.function_scope(frame.chain[-1])
                if name in scope.locals:
                    return unknown(name)
                for outer in reversed(frame.chain[:-1]):
                    if name in self.project.function_scope(outer).locals:
                        return self.site_local(name, outer, frame)
        elif frame.mode == "site":
            for fn in reversed(frame.chain):
                if name in self.project.function_scope(fn).locals:
                    # Only in the innermost function does the use's position order it against the bindings.
                    return self.site_local(name, fn, frame, node if fn is frame.chain[-1] else None)
        return self.global_value(frame.module, name, node)

    def site_local(self, name: str, fn: ast.AST, frame: Frame, use: ast.AST | None = None) -> Any:
        """A local of an enclosing function: the join of everything bound to it that can reach
        `use` (all bindings when `use` is None). Chains of locals are followed a few steps only;
        each (function, name, reaching bindings) is evaluated once."""
        bindings = self.project.function_scope(fn).locals[name]
        reaching = _reaching(fn, bindings, use)
        key = (id(fn), name, frame.cls.node_id if frame.cls is not None else 0)
        if len(reaching) != len(bindings):
            key = key + tuple(id(b) for b in reaching)
        bindings = reaching
        memo = self._memo(("s",) + key)
        if memo is not None:
            self.fx.merge(memo[1])
            return memo[0]
        if name == "self" and frame.self_value is not None and fn is frame.chain[0]:
            return frame.self_value
        if name == "cls" and frame.cls is not None and fn is frame.chain[0]:
            return frame.cls
        if not any(self.carries(b, frame.module) for b in bindings):
            # Nothing bound to it can depend on the architecture or the environment.
            return unknown(name)
        if key in self._site_stack or len(self._site_stack) >= MAX_LOCAL_CHAIN or len(bindings) > MAX_LOCAL_BINDINGS:
            self.fx.cut = True
            return unknown(name)
        self._site_stack.add(key)
        try:
            with self._own_effects() as effects:
                chain = frame.chain[: frame.chain.index(fn) + 1] if fn in frame.chain else (fn,)
                site = Frame(module=frame.module, mode="site", chain=chain, cls=frame.cls, self_value=frame.self_value)
                value = join([self.binding_value(binding, name, site) for binding in bindings])
        finally:
            self._site_stack.discard(key)
        self.fx.merge(effects)
        if not effects.cut:
            self._remember(("s",) + key, value, effects)
        return value

    def carries_value(self, value: ast.AST, module: str) -> bool:
        key = id(value)
        known = self._carries.get(key)
        if known is None:
            names, attrs = mentions(value)
            summary = self.project.summaries.get(module)
            known = summary is None or any(self.project.relevance.classify(summary, names, attrs))
            self._carries[key] = known
        return known

    def carries(self, binding: ast.AST, module: str) -> bool:
        """Whether a binding's value can depend on the architecture or the environment (pre-pass
        relevance of the names it mentions); imports and definitions always can."""
        key = id(binding)
        known = self._carries.get(key)
        if known is None:
            value = getattr(binding, "value", None)
            if isinstance(binding, ast.arg):
                known = False
            elif isinstance(value, ast.AST) and not isinstance(binding, (ast.Import, ast.ImportFrom)):
                names, attrs = mentions(value)
                summary = self.project.summaries.get(module)
                known = summary is None or any(self.project.relevance.classify(summary, names, attrs))
            else:
                known = True
            self._carries[key] = known
        return known

    def binding_value(self, stmt: ast.AST, name: str, frame: Frame) -> Any:
        if isinstance(stmt, ast.arg):
            if name == "self" and frame.self_value is not None:
                return frame.self_value
            if name == "cls" and frame.cls is not None:
                return frame.cls
            return unknown(name)
        if isinstance(stmt, ast.Assign):
            value = self.ev(stmt.value, frame)
            for target in stmt.targets:
                found = self.extract(target, name, value)
                if found is not _MISSING:
                    return found
            return unknown(name)
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                return self.ev(stmt.value, frame)
            if frame.mode == "global":
                return self.annotated_instance(stmt.annotation, frame.module)
            return unknown(name)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return FuncRef(frame.module, stmt.name, stmt, id(stmt))
        if isinstance(stmt, ast.ClassDef):
            return ClassRef(frame.module, stmt.name, stmt, id(stmt))
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                local = alias.asname or alias.name.split(".")[0]
                if local == name:
                    target = alias.name if alias.asname else alias.name.split(".")[0]
                    return self.module_value(target)
            return unknown(name)
        if isinstance(stmt, ast.ImportFrom):
            base = resolve_from(self.project.files[frame.module], stmt) if frame.module in self.project.files else stmt.module
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    return self.import_value(base or "", alias.name)
            return unknown(name)
        if isinstance(stmt, ast.NamedExpr):
            return self.ev(stmt.value, frame)
        return unknown(name)

    def extract(self, target: ast.AST, name: str, value: Any) -> Any:
        if isinstance(target, ast.Name):
            return value if target.id == name else _MISSING
        if isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    if self.extract(elt.value, name, None) is not _MISSING:
                        return unknown(name)
                    continue
                sub = self.lift(lambda v, i=i: self.element(v, i, len(target.elts), name), value)
                found = self.extract(elt, name, sub)
                if found is not _MISSING:
                    return found
        return _MISSING

    def element(self, value: Any, i: int, n: int, label: str) -> Any:
        if isinstance(value, (tuple,)) and len(value) == n:
            return value[i]
        if isinstance(value, Props):
            return unknown(label)
        labels, arch = uncertainty(value)
        return Unknown(labels or frozenset([label]), arch)

    def bind_target(self, target: ast.AST, value: Any, locals_: dict) -> None:
        if isinstance(target, ast.Name):
            locals_[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            n = len(target.elts)
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    self.bind_target(elt.value, unknown(text(elt)), locals_)
                else:
                    self.bind_target(elt, self.lift(lambda v, i=i: self.element(v, i, n, text(elt)), value), locals_)

    def module_value(self, dotted: str) -> Any:
        if dotted in self.project.files:
            return ModuleRef(dotted)
        return External(dotted)

    def import_value(self, base: str, attr: str) -> Any:
        dotted = f"{base}.{attr}" if base else attr
        if dotted in self.project.files:
            return ModuleRef(dotted)
        if base in self.project.files:
            return self.global_value(base, attr, None)
        return External(dotted)

    def annotated_instance(self, annotation: ast.AST, module: str) -> Any:
        """A name declared with a class annotation and no value is taken as an instance of it."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return unknown(text(annotation))
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            value = self.ev(annotation, Frame(module=module, mode="global"))
            if isinstance(value, ClassRef):
                return Instance(value)
        return unknown(text(annotation))

    def global_value(self, module: str, name: str, node: ast.AST | None) -> Any:
        key = (module, name)
        memo = self._memo(("g",) + key)
        if memo is not None:
            self.fx.merge(memo[1], 1)
            return memo[0]
        if key in self._global_stack:
            self.fx.cut = True
            return unknown(name)
        scope = self.project.scope(module)
        if scope is None:
            return External(f"{module}.{name}")
        self._global_stack.add(key)
        try:
            with self._own_effects() as effects:
                value = self._global_value(scope, name, node)
        finally:
            self._global_stack.discard(key)
        self.fx.merge(effects, 1)
        if not effects.cut:
            self._remember(("g",) + key, value, effects)
        if isinstance(value, (FuncRef, PartialRef)) and value not in self._binding_of:
            bindings = scope.bindings.get(name) or ()
            if bindings:
                # The name the binding statement gives first, whichever alias led here (deterministic).
                stmt = bindings[-1].node
                first = name
                if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                    first = stmt.targets[0].id
                if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    self._binding_of[value] = (first, f"{scope.file.rel}:{stmt.lineno}", module)
        return value

    def _global_value(self, scope, name, node):
        module = scope.name
        bindings = scope.bindings.get(name)
        if not bindings:
            for star in scope.star_imports:
                source = self.project.scope(star)
                if source is None:
                    continue
                exported = name in source.all_names if source.all_names is not None else not name.startswith("_")
                if exported and (name in source.bindings or source.star_imports):
                    value = self.global_value(star, name, node)
                    if not (isinstance(value, Unknown) and name in value.labels and len(value.labels) == 1):
                        return value
            if f"{module}.{name}" in self.project.files:
                return ModuleRef(f"{module}.{name}")
            if name in _BUILTINS:
                return _BUILTINS[name]
            if name in ("__name__", "__file__", "__doc__", "__package__", "__spec__"):
                return unknown(name)
            reason = f"no definition of {name!r} in {module}"
            if scope.has_getattr:
                reason += " (module __getattr__)"
            elif looks_arch(name) and any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(scope.tree)):
                reason += " (bound only by functions at run time: global statement)"
            return self.unknown(name, reason=reason)
        values = []
        why: set = set()
        frame = Frame(module=module, mode="global")
        for binding in bindings:
            possible = True
            definite = True
            for test, branch in binding.guards:
                if test is None:
                    definite = False
                    continue
                if isinstance(test, ast.Try):
                    definite = False
                    for module_name in _try_imports(test):
                        if module_name.split(".")[0] not in self.project.files and not self._in_tree(module_name):
                            self.fx.probes.add(module_name)
                            why.add(f"{module_name} importable")
                    continue
                truth = truth_of(self.ev(test, frame))
                if truth is None:
                    definite = False
                elif truth != branch:
                    possible = False
                    break
            if not possible:
                continue
            value = self.binding_value(binding.node, name, frame)
            if definite:
                values = [value]
            else:
                values.append(value)
        if not values:
            return unknown(name)
        return join(values, frozenset(why))

    def _in_tree(self, dotted: str) -> bool:
        return dotted in self.project.files or any(
            m == dotted or m.startswith(dotted + ".") for m in (dotted.rsplit(".", 1)[0],) if m in self.project.files
        )

    # ----------------------------------------------------------------- attributes

    def attribute(self, base: Any, attr: str, node: ast.AST) -> Any:
        if isinstance(base, Unknown):
            if looks_arch(attr) and not base.arch:
                self.fx.unresolved.setdefault(
                    text(node), f"attribute {attr!r} of {text(node.value)}, which the scan cannot resolve"
                )
            return Unknown(base.labels | {text(node)} if not base.labels else base.labels, base.arch or looks_arch(attr))
        if isinstance(base, ModuleRef):
            scope = self.project.scope(base.name)
            if scope is not None and (attr in scope.bindings or scope.star_imports):
                return self.global_value(base.name, attr, node)
            if f"{base.name}.{attr}" in self.project.files:
                return ModuleRef(f"{base.name}.{attr}")
            return self.unknown(node, reason=f"no attribute {attr!r} in module {base.name}")
        if isinstance(base, External):
            path = f"{base.path}.{attr}"
            if path == "torch.version.hip":
                self.fx.notes.add("assumed CUDA build: torch.version.hip is None")
                return None
            if path == "torch.version.cuda":
                if self.cuda_assumed:
                    self.fx.notes.add("assumed torch.version.cuda newer than any version checked")
                return self.cuda
            if base.path == "torch.version" and attr in ("musa", "xpu", "npu"):
                return None
            return External(path)
        if isinstance(base, Cap):
            if attr == "major":
                return base[0]
            if attr == "minor":
                return base[1]
            if attr in ("to_int",):
                return BoundBuiltin(base, attr)
            return self.unknown(node, arch=False)
        if isinstance(base, Props):
            if attr in ("major", "minor"):
                self.fx.touched_arch = True
                return getattr(base, attr)
            return unknown(text(node))
        if isinstance(base, Instance):
            return self.instance_attr(base, attr, node)
        if isinstance(base, ClassRef):
            return self.class_attr(base, attr, node, instance=None)
        if isinstance(base, EnvField):
            if attr in ("get", "is_set", "set", "override", "clear"):
                return BoundBuiltin(base, attr)
            if attr == "name":
                return base.name
            if attr == "default":
                return base.default
            return unknown(text(node))
        if isinstance(base, str) and attr in _STR_METHODS:
            return BoundBuiltin(base, attr)
        if isinstance(base, tuple) and attr in _TUPLE_METHODS:
            return BoundBuiltin(base, attr)
        if isinstance(base, dict) and attr in _DICT_METHODS:
            return BoundBuiltin(base, attr)
        if isinstance(base, (FuncRef, PartialRef)):
            return unknown(text(node))
        return self.unknown(node, arch=False)

    def mro(self, cls: ClassRef) -> list:
        cached = self._mro.get(cls.node_id)
        if cached is not None:
            return cached
        out: list = []
        seen: set = set()

        def visit(c, depth):
            if c.node_id in seen or depth > 12:
                return
            seen.add(c.node_id)
            out.append(c)
            for base in c.node.bases:
                value = self.ev(base, Frame(module=c.module, mode="global"))
                if isinstance(value, ClassRef):
                    visit(value, depth + 1)

        visit(cls, 0)
        self._mro[cls.node_id] = out
        return out

    def class_attr(self, cls: ClassRef, attr: str, node: ast.AST | None, instance: Instance | None) -> Any:
        for c in self.mro(cls):
            scope = self.project.class_scope(c.module, c.node)
            method = scope.methods.get(attr)
            if method is not None:
                decorators = _decorator_names(method)
                ref_self = None
                is_classmethod = "classmethod" in decorators
                if is_classmethod:
                    ref_self = cls
                elif "staticmethod" not in decorators and instance is not None:
                    ref_self = instance
                ref = FuncRef(c.module, f"{c.qualname}.{attr}", method, id(method), ref_self, is_classmethod)
                if ref not in self._binding_of:
                    self._binding_of[ref] = (f"{c.qualname}.{attr}", self.where(c.module, method), c.module)
                if is_property(method) and instance is not None:
                    return self.call(ref, [], {}, node, f"{c.qualname}.{attr}")
                return ref
            if attr in scope.fields:
                return self.field_value(c, scope, attr)
        return _MISSING

    def field_value(self, cls: ClassRef, scope, attr: str) -> Any:
        stmt = scope.fields[attr][-1]
        frame = Frame(module=cls.module, mode="global")
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            return self.annotated_instance(stmt.annotation, cls.module)
        value_node = stmt.value
        if isinstance(value_node, ast.Call):
            callee = self.ev(value_node.func, frame)
            if isinstance(callee, ClassRef):
                env_field = self.env_field(callee, attr, value_node, cls, stmt)
                if env_field is not None:
                    return env_field
        return self.ev(value_node, frame)

    def env_field(self, field_cls: ClassRef, attr: str, call: ast.Call, owner: ClassRef, stmt: ast.AST) -> EnvField | None:
        """`NAME = FieldClass(default)` in a registry, where FieldClass.get reads os.environ."""
        reads_env = False
        names_itself = False
        for c in self.mro(field_cls):
            scope = self.project.class_scope(c.module, c.node)
            get = scope.methods.get("get")
            if get is not None and not reads_env:
                for sub in ast.walk(get):
                    if isinstance(sub, ast.Attribute) and sub.attr in ENV_PRIMITIVES or isinstance(sub, ast.Name) and sub.id in ENV_PRIMITIVES:
                        reads_env = True
                        break
            if "__set_name__" in scope.methods:
                names_itself = True
        if not reads_env:
            return None
        frame = Frame(module=owner.module, mode="global")
        args = list(call.args)
        name = attr
        if not names_itself:
            if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                name = args.pop(0).value
        default_node = next((k.value for k in call.keywords if k.arg == "default"), args[0] if args else None)
        default = self.ev(default_node, frame) if default_node is not None else None
        return EnvField(name, default if hashable(default) else unknown(text(default_node)), field_cls, self.where(owner.module, stmt))

    def instance_attr(self, inst: Instance, attr: str, node: ast.AST | None) -> Any:
        found = self.class_attr(inst.cls, attr, node, inst)
        if found is not _MISSING:
            return found
        key = (inst.cls.node_id, attr)
        memo = self._memo(("i",) + key)
        if memo is not None:
            self.fx.merge(memo[1], 1)
            return memo[0]
        if key in self._site_stack:
            return unknown(f"self.{attr}")
        self._site_stack.add(key)
        try:
            with self._own_effects() as effects:
                value = self._instance_attr(inst, attr, node)
        finally:
            self._site_stack.discard(key)
        self.fx.merge(effects, 1)
        if not effects.cut:
            self._remember(("i",) + key, value, effects)
        return value

    def _instance_attr(self, inst: Instance, attr: str, node: ast.AST | None) -> Any:
        values = []
        for c in self.mro(inst.cls):
            scope = self.project.class_scope(c.module, c.node)
            for method, value_node, annotation in scope.instance.get(attr, ()):
                frame = Frame(module=c.module, mode="site", chain=(method,), cls=inst.cls, self_value=inst)
                if value_node is not None:
                    if _literal(value_node) or self.carries_value(value_node, c.module):
                        values.append(self.ev(value_node, frame))
                    else:
                        values.append(unknown(f"self.{attr}"))
                elif annotation is not None:
                    values.append(self.annotated_instance(annotation, c.module))
        if values:
            return join(values)
        for c in self.mro(inst.cls):
            scope = self.project.class_scope(c.module, c.node)
            getattr_method = scope.methods.get("__getattr__")
            if getattr_method is not None:
                ref = FuncRef(c.module, f"{c.qualname}.__getattr__", getattr_method, id(getattr_method), inst)
                self.fx.notes.add(f"{attr} resolved through {c.qualname}.__getattr__ ({self.where(c.module, getattr_method)})")
                return self.call(ref, [attr], {}, node, f"{c.qualname}.{attr}")
        label = text(node) if node is not None else f"{inst.cls.qualname}.{attr}"
        return self.unknown(label, reason=f"{inst.cls.qualname} has no attribute {attr!r} the scan can find")

    # ----------------------------------------------------------------- calls

    def call(self, func: Any, args: list, kwargs: dict, node: ast.AST | None, label: str) -> Any:
        if isinstance(func, (FuncRef, PartialRef)):
            if args or kwargs or func not in self._binding_of:
                return self._call(func, args, kwargs, node, label)
            # A call of a named callable with no arguments: record it as a helper when its
            # answer depends on the architecture.
            before = self.fx.touched_arch
            self.fx.touched_arch = False
            value = self._call(func, args, kwargs, node, label)
            if self.fx.touched_arch:
                name, where, module = self._binding_of[func]
                known = self.fx.helpers.get(where)
                if known is None or known[1] > 0:
                    self.fx.helpers[where] = (name, 0, module)
            self.fx.touched_arch = self.fx.touched_arch or before
            return value
        return self._call(func, args, kwargs, node, label)

    def _call(self, func: Any, args: list, kwargs: dict, node: ast.AST | None, label: str) -> Any:
        if isinstance(func, FuncRef):
            return self.call_function(func, args, kwargs, node, label)
        if isinstance(func, PartialRef):
            merged = dict(func.kwargs)
            merged.update(kwargs)
            return self.call_function(func.func, list(func.args) + args, merged, node, label)
        if isinstance(func, Decorator):
            if args and isinstance(args[0], (FuncRef, PartialRef)):
                return args[0]
            return func
        if isinstance(func, ClassRef):
            return self.construct(func, args, kwargs, node)
        if isinstance(func, External):
            return self.external_call(func.path, args, kwargs, node, label)
        if isinstance(func, BoundBuiltin):
            return self.builtin_method(func, args, kwargs, label)
        if isinstance(func, _Builtin):
            return func.fn(self, args, kwargs, label)
        if isinstance(func, Instance):
            call = self.class_attr(func.cls, "__call__", node, func)
            if isinstance(call, FuncRef):
                return self.call_function(call, args, kwargs, node, label)
            return unknown(label)
        if isinstance(func, Unknown):
            return Unknown(func.labels or frozenset([label]), func.arch or looks_arch(label), None)
        return self.unknown(label, arch=False)

    def construct(self, cls: ClassRef, args: list, kwargs: dict, node) -> Any:
        # NamedTuple-like classes keep their positional field values.
        fields = [
            item.target.id
            for item in cls.node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is None
        ]
        bases = {text(b) for b in cls.node.bases}
        if fields and (bases & {"NamedTuple", "typing.NamedTuple"}) and len(args) == len(fields) and not kwargs:
            if all(_concrete(a) for a in args):
                if fields[:2] == ["major", "minor"]:
                    return Cap(args)
                return tuple(args)
        return Instance(cls)

    def call_function(self, ref: FuncRef, args: list, kwargs: dict, node, label: str) -> Any:
        fn = ref.node
        if isinstance(fn, ast.Lambda):
            return unknown(label)
        if not self.worth_running(ref):
            # A long function the pre-pass found unrelated to the architecture and the environment:
            # its result is a condition, not something to run.
            return unknown(label)
        frozen_args = tuple(freeze(a) for a in args)
        frozen_kwargs = tuple(sorted((k, freeze(v)) for k, v in kwargs.items()))
        key = (ref.node_id, ref.self_value, frozen_args, frozen_kwargs)
        memo_ok = hashable(key)
        if memo_ok:
            memo = self._memo(("c",) + key)
            if memo is not None:
                self.fx.merge(memo[1], 1)
                return memo[0]
        if (memo_ok and key in self._call_stack) or len(self._call_stack) >= MAX_DEPTH:
            self.fx.cut = True
            return unknown(label)
        self._call_stack.append(key if memo_ok else (ref.node_id, id(args)))
        try:
            with self._own_effects() as effects:
                try:
                    value = self._run_function(ref, args, kwargs, label)
                except _Budget:
                    value = unknown(f"{label} (budget)")
                    if looks_arch(label):
                        effects.unresolved.setdefault(label, f"{ref.qualname} too long to evaluate")
        finally:
            self._call_stack.pop()
        self.fx.merge(effects, 1)
        if memo_ok and not effects.cut:
            self._remember(("c",) + key, value, effects)
        return value

    def worth_running(self, ref: FuncRef) -> bool:
        fn = ref.node
        key = id(fn)
        known = self._worth.get(key)
        if known is None:
            span = (getattr(fn, "end_lineno", fn.lineno) or fn.lineno) - fn.lineno
            relevance = self.project.relevance
            name = fn.name
            if span <= HELPER_MAX_LINES or name in ("__getattr__", "parse"):
                known = True
            elif "." in ref.qualname and ref.qualname != name:
                known = name in relevance.arch_attrs or name in relevance.env_attrs
            else:
                qualified = f"{ref.module}.{ref.qualname}"
                known = qualified in relevance.arch_qualified or qualified in relevance.env_qualified
            self._worth[key] = known
        return known

    def _run_function(self, ref: FuncRef, args: list, kwargs: dict, label: str) -> Any:
        fn = ref.node
        params = fn.args
        positional = params.posonlyargs + params.args
        local: dict = {}
        given = list(args)
        if ref.self_value is not None and positional:
            local[positional[0].arg] = ref.self_value
            positional = positional[1:]
        defaults = params.defaults
        first_default = len(positional) - len(defaults)
        module_frame = Frame(module=ref.module, mode="global")
        for i, param in enumerate(positional):
            if i < len(given):
                local[param.arg] = given[i]
            elif param.arg in kwargs:
                local[param.arg] = kwargs[param.arg]
            elif i >= first_default:
                local[param.arg] = self.ev(defaults[i - first_default], module_frame)
            else:
                local[param.arg] = unknown(param.arg)
        for param, default in zip(params.kwonlyargs, params.kw_defaults):
            if param.arg in kwargs:
                local[param.arg] = kwargs[param.arg]
            elif default is not None:
                local[param.arg] = self.ev(default, module_frame)
            else:
                local[param.arg] = unknown(param.arg)
        if params.vararg is not None:
            local[params.vararg.arg] = tuple(given[len(positional):]) if all(hashable(g) for g in given[len(positional):]) else unknown(params.vararg.arg)
        if params.kwarg is not None:
            local[params.kwarg.arg] = unknown(params.kwarg.arg)
        cls = None
        if isinstance(ref.self_value, Instance):
            cls = ref.self_value.cls
        elif isinstance(ref.self_value, ClassRef):
            cls = ref.self_value
        frame = Frame(module=ref.module, mode="exec", chain=(fn,), locals=local, cls=cls, self_value=ref.self_value)
        returns, live = self.exec_block(fn.body, [local], frame)
        if live:
            returns.append(None)
        if not returns:
            return unknown(f"{label} (never returns)")
        return join(returns)

    def external_call(self, path: str, args: list, kwargs: dict, node, label: str) -> Any:
        last = path.rsplit(".", 1)[-1]
        if last in ("get_device_capability", "nvmlDeviceGetCudaComputeCapability"):
            self.fx.touched_arch = True
            return Cap(capability_of(self.sm))
        if last == "get_device_properties":
            return Props(*capability_of(self.sm))
        if path in _ASSUMED_TRUE:
            self.fx.notes.add(f"assumed {path}() is True")
            return True
        if re.fullmatch(r"torch\.\w+\.is_available", path):
            return False
        if path in ("os.getenv", "os.environ.get"):
            name = args[0] if args else kwargs.get("key")
            default = args[1] if len(args) > 1 else kwargs.get("default")
            if not isinstance(name, str):
                return self.unknown(label, arch=False)
            self.record_env(name, default, None)
            return self.env.get(name, default)
        if path == "os.environ.setdefault":
            name = args[0] if args else None
            if isinstance(name, str):
                self.record_env(name, args[1] if len(args) > 1 else None, None)
                return self.env.get(name, args[1] if len(args) > 1 else None)
            return unknown(label)
        if last in _DECORATORS:
            if args and isinstance(args[0], (FuncRef, PartialRef)):
                return args[0]
            return Decorator(last)
        if last == "partial" and args and isinstance(args[0], (FuncRef, PartialRef)):
            inner = args[0]
            if isinstance(inner, PartialRef):
                merged = dict(inner.kwargs)
                merged.update(kwargs)
                return PartialRef(inner.func, inner.args + tuple(freeze(a) for a in args[1:]), tuple(sorted(merged.items())))
            return PartialRef(inner, tuple(freeze(a) for a in args[1:]), tuple(sorted((k, freeze(v)) for k, v in kwargs.items())))
        if path in ("importlib.util.find_spec", "importlib.find_loader") and args and isinstance(args[0], str):
            self.fx.probes.add(args[0])
            return unknown(f"{args[0]} importable")
        if path == "object.__getattribute__" and len(args) == 2 and isinstance(args[1], str):
            if isinstance(args[0], Instance):
                return self.instance_attr(args[0], args[1], node)
        return self.unknown(label, arch=looks_arch(path))

    def builtin_method(self, bound: BoundBuiltin, args: list, kwargs: dict, label: str) -> Any:
        receiver = bound.receiver
        if isinstance(receiver, EnvField):
            if bound.name == "get":
                return self.env_get(receiver)
            if bound.name == "is_set":
                self.record_env(receiver.name, receiver.default, receiver.defined_at)
                return receiver.name in self.env
            return None
        if isinstance(receiver, Cap) and bound.name == "to_int":
            return receiver[0] * 10 + receiver[1]
        if not all(_concrete(a) or isinstance(a, dict) for a in args) or not all(_concrete(v) for v in kwargs.values()):
            return unknown(label)
        try:
            result = getattr(receiver, bound.name)(*args, **kwargs)
        except Exception:
            return unknown(label)
        if isinstance(result, list):
            return tuple(result)
        if isinstance(result, (dict, str, int, float, bool, tuple)) or result is None:
            if type(result).__name__ in ("dict_keys", "dict_values", "dict_items"):
                return tuple(result)
            return result
        return tuple(result) if isinstance(result, type({}.keys())) else unknown(label)

    # ----------------------------------------------------------------- environment

    def record_env(self, name: str, default: Any, defined_at: str | None) -> None:
        previous = self.fx.env_reads.get(name)
        if previous is None or previous.defined_at is None and defined_at is not None:
            self.fx.env_reads[name] = EnvRead(name, default if _concrete(default) else None, defined_at)

    def env_get(self, env_field: EnvField) -> Any:
        self.record_env(env_field.name, env_field.default, env_field.defined_at)
        if env_field.name in self.env:
            raw = self.env[env_field.name]
            for c in self.mro(env_field.cls):
                parse = self.project.class_scope(c.module, c.node).methods.get("parse")
                if parse is not None:
                    ref = FuncRef(c.module, f"{c.qualname}.parse", parse, id(parse), Instance(env_field.cls))
                    return self.call_function(ref, [raw], {}, None, f"{env_field.name}.parse")
            return raw
        default = env_field.default
        if isinstance(default, (FuncRef, PartialRef)):
            return self.call(default, [], {}, None, f"{env_field.name} default")
        return default

    # ----------------------------------------------------------------- statements

    def exec_block(self, stmts: list, states: list, frame: Frame) -> tuple[list, list]:
        returns: list = []
        for stmt in stmts:
            if not states:
                break
            frame.steps += 1
            if frame.steps > MAX_STEPS:
                raise _Budget()
            next_states: list = []
            for state in states:
                r, live = self.exec_stmt(stmt, state, frame)
                returns.extend(r)
                next_states.extend(live)
            states = _merge_states(next_states)
        return returns, states

    def exec_stmt(self, stmt: ast.stmt, state: dict, frame: Frame) -> tuple[list, list]:
        frame.locals = state
        if isinstance(stmt, ast.Return):
            return [self.ev(stmt.value, frame) if stmt.value is not None else None], []
        if isinstance(stmt, ast.Raise):
            return [], []
        if isinstance(stmt, ast.Assign):
            value = self.ev(stmt.value, frame)
            for target in stmt.targets:
                self.bind_target(target, value, state)
            return [], [state]
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.bind_target(stmt.target, self.ev(stmt.value, frame), state)
            return [], [state]
        if isinstance(stmt, ast.AugAssign):
            if isinstance(stmt.target, ast.Name):
                current = state.get(stmt.target.id, unknown(stmt.target.id))
                state[stmt.target.id] = self.binop(stmt.op, current, self.ev(stmt.value, frame), text(stmt))
            return [], [state]
        if isinstance(stmt, ast.If):
            return self.exec_if(stmt.test, stmt.body, stmt.orelse, state, frame)
        if isinstance(stmt, ast.Assert):
            truth = truth_of(self.ev(stmt.test, frame))
            if truth is False:
                return [], []
            return [], [state]
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                local = alias.asname or alias.name.split(".")[0]
                state[local] = self.binding_value(stmt, local, Frame(module=frame.module, mode="global"))
            return [], [state]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            state[stmt.name] = FuncRef(frame.module, stmt.name, stmt, id(stmt))
            return [], [state]
        if isinstance(stmt, ast.ClassDef):
            state[stmt.name] = ClassRef(frame.module, stmt.name, stmt, id(stmt))
            return [], [state]
        if isinstance(stmt, ast.Try):
            return self.exec_try(stmt, state, frame)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    self.bind_target(item.optional_vars, unknown(text(item.context_expr)), state)
            return self.exec_block(stmt.body, [state], frame)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            return self.exec_for(stmt, state, frame)
        if isinstance(stmt, ast.While):
            returns, live = self.exec_block(stmt.body, [dict(state)], frame)
            return returns, live + [state]
        if isinstance(stmt, (ast.Break, ast.Continue)):
            return [], [state]
        if isinstance(stmt, ast.Match):
            returns: list = []
            live: list = [state]
            for case in stmt.cases:
                r, l = self.exec_block(case.body, [dict(state)], frame)
                returns.extend(r)
                live.extend(l)
            return returns, live
        return [], [state]

    def exec_if(self, test: ast.AST, body: list, orelse: list, state: dict, frame: Frame) -> tuple[list, list]:
        value = self.ev(test, frame)
        truth = truth_of(value)
        returns: list = []
        live: list = []
        labels, arch = uncertainty(value) if truth is None else (frozenset(), False)
        if truth is None and not labels:
            labels = frozenset([text(test)])
        if truth is not False:
            branch = dict(state)
            if truth is None:
                self.refine(test, True, branch)
            r, l = self.exec_block(body, [branch], frame)
            returns.extend(tag(v, labels, arch) if truth is None else v for v in r)
            live.extend(l)
        if truth is not True:
            branch = dict(state)
            if truth is None:
                self.refine(test, False, branch)
            r, l = self.exec_block(orelse, [branch], frame)
            returns.extend(tag(v, labels, arch) if truth is None else v for v in r)
            live.extend(l)
        return returns, live

    def refine(self, test: ast.AST, truth: bool, state: dict) -> None:
        if isinstance(test, ast.Name) and test.id in state:
            state[test.id] = refine_truth(state[test.id], truth)
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.refine(test.operand, not truth, state)
        elif (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.left, ast.Name)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
            and test.left.id in state
        ):
            is_none = truth if isinstance(test.ops[0], ast.Is) else not truth
            state[test.left.id] = refine_none(state[test.left.id], is_none)
        elif isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And) and truth or isinstance(test.op, ast.Or) and not truth:
                for operand in test.values:
                    self.refine(operand, truth, state)

    def exec_try(self, stmt: ast.Try, state: dict, frame: Frame) -> tuple[list, list]:
        external = [m for m in _try_imports(stmt) if not self._in_tree(m) and m.split(".")[0] not in self.project.files]
        before = dict(state)
        body_fx_unresolved = len(self.fx.unresolved)
        returns, live = self.exec_block(stmt.body, [state], frame)
        if live and stmt.orelse:
            r, live = self.exec_block(stmt.orelse, live, frame)
            returns.extend(r)
        may_fail = bool(external) or any(
            isinstance(sub, ast.Raise) for body_stmt in stmt.body for sub in ast.walk(body_stmt)
        )
        if not may_fail:
            # A call the scan cannot see into may raise: the handlers stay possible then.
            may_fail = any(isinstance(sub, ast.Call) for body_stmt in stmt.body for sub in ast.walk(body_stmt))
        if may_fail:
            for module_name in external:
                self.fx.probes.add(module_name)
            why = frozenset(f"{m} importable" for m in external) or frozenset([f"no exception in try at {self.where(frame.module, stmt)}"])
            for handler in stmt.handlers:
                if handler.name:
                    before = dict(before)
                    before[handler.name] = unknown(handler.name)
                r, l = self.exec_block(handler.body, [dict(before)], frame)
                returns.extend(tag(v, why) for v in r)
                live.extend(l)
            returns = [tag(v, why) for v in returns] if external else returns
        del body_fx_unresolved
        if stmt.finalbody and live:
            r, live = self.exec_block(stmt.finalbody, live, frame)
            returns.extend(r)
        return returns, live

    def exec_for(self, stmt, state: dict, frame: Frame) -> tuple[list, list]:
        iterable = self.ev(stmt.iter, frame)
        if isinstance(iterable, tuple) and len(iterable) == 2 and iterable[0] == "__generator__":
            iterable = iterable[1]
        if isinstance(iterable, dict):
            iterable = tuple(iterable)
        returns: list = []
        if isinstance(iterable, (tuple, str)) and len(iterable) <= 16:
            states = [state]
            for element in iterable:
                next_states = []
                for s in states:
                    s = dict(s)
                    self.bind_target(stmt.target, element, s)
                    r, l = self.exec_block(stmt.body, [s], frame)
                    returns.extend(r)
                    next_states.extend(l)
                states = _merge_states(next_states)
                if not states:
                    break
            if stmt.orelse and states:
                r, states = self.exec_block(stmt.orelse, states, frame)
                returns.extend(r)
            return returns, states
        body_state = dict(state)
        self.bind_target(stmt.target, unknown(text(stmt.target)), body_state)
        r, l = self.exec_block(stmt.body, [body_state], frame)
        returns.extend(r)
        return returns, l + [state]


_MISSING = object()


def _loop_spans(fn: ast.AST) -> list:
    """(first, last) lines of the loops in `fn`'s own body (not in nested definitions), cached on the node."""
    spans = getattr(fn, "_gates_loop_spans", None)
    if spans is None:
        spans = []
        stack = list(ast.iter_child_nodes(fn))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                spans.append((node.lineno, node.end_lineno or node.lineno))
            stack.extend(ast.iter_child_nodes(node))
        fn._gates_loop_spans = spans
    return spans


def _reaching(fn: ast.AST, bindings: list, use: ast.AST | None) -> list:
    """The bindings of a local that can reach `use`: not those that start after it, unless one loop
    holds both (a later rebinding, `major, minor = 10, 0` after `if (major, minor) == (10, 7)`,
    must not join the value the test reads). With no use position, or none reaching, all of them."""
    line = getattr(use, "lineno", None)
    if line is None:
        return bindings
    later = [b for b in bindings if getattr(b, "lineno", 0) > line]
    if not later:
        return bindings
    spans = [(first, last) for first, last in _loop_spans(fn) if first <= line <= last]
    kept = [b for b in bindings if getattr(b, "lineno", 0) <= line or any(b.lineno <= last for _, last in spans)]
    return kept or bindings


def _literal(node: ast.AST) -> bool:
    return all(
        isinstance(sub, (ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.Set, ast.UnaryOp, ast.BinOp, ast.operator, ast.unaryop, ast.expr_context))
        for sub in ast.walk(node)
    )


def _merge_states(states: list) -> list:
    if len(states) <= MAX_STATES:
        return states
    keys = set()
    for s in states:
        keys |= set(s)
    merged = {}
    for key in keys:
        merged[key] = join([s.get(key, unknown(key)) for s in states])
    return [merged]


def _try_imports(node: ast.Try) -> list:
    modules = []
    for stmt in node.body:
        if isinstance(stmt, ast.Import):
            modules.extend(alias.name for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            modules.append(stmt.module)
    return modules


# ----------------------------------------------------------------- builtins


@dataclass(frozen=True)
class _Builtin:
    name: str
    fn: Any = field(compare=False, hash=False)


def _need_concrete(args, label):
    for a in args:
        if not _concrete(a):
            labels, arch = uncertainty(a)
            return Unknown(labels or frozenset([label]), arch)
    return None


def _pure(fn):
    def run(interp, args, kwargs, label):
        if kwargs:
            return unknown(label)
        bad = _need_concrete(args, label)
        if bad is not None:
            return bad
        try:
            result = fn(*args)
        except Exception:
            return unknown(label)
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
            return Unknown(labels or frozenset([label]), arch)
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
        return Unknown(frozenset(labels) or frozenset([label]), arch)

    return run


def _tuple_like(interp, args, kwargs, label):
    if not args:
        return ()
    values = _iterable_values(args[0])
    if values is None:
        labels, arch = uncertainty(args[0])
        return Unknown(labels or frozenset([label]), arch)
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
        if found is not _MISSING:
            return True
        return unknown(label)
    if _concrete(obj):
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
    if isinstance(value, (FuncRef, PartialRef, ClassRef, Decorator, BoundBuiltin, _Builtin)):
        return True
    if value is None or _concrete(value):
        return False
    labels, arch = uncertainty(value)
    if isinstance(value, External):
        return unknown(f"{value.path} callable")
    return Unknown(labels or frozenset([label]), arch)


def _isinstance(interp, args, kwargs, label):
    return unknown(label)


def _bool(interp, args, kwargs, label):
    if not args:
        return False
    truth = truth_of(args[0])
    if truth is None:
        labels, arch = uncertainty(args[0])
        return Unknown(labels or frozenset([label]), arch)
    return truth


def _len(interp, args, kwargs, label):
    if len(args) == 1:
        values = _iterable_values(args[0])
        if values is not None:
            return len(values)
    return unknown(label)


_BUILTINS = {
    name: _Builtin(name, fn)
    for name, fn in {
        "int": _pure(int),
        "str": _pure(str),
        "float": _pure(float),
        "abs": _pure(abs),
        "min": _pure(min),
        "max": _pure(max),
        "sorted": _pure(sorted),
        "round": _pure(round),
        "divmod": _pure(divmod),
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
_BUILTINS["object"] = External("object")
_BUILTINS["NotImplemented"] = External("NotImplemented")
for _name in ("print", "range", "type", "id", "repr", "zip", "enumerate", "dict", "super", "iter", "next", "open", "vars", "globals", "issubclass", "sum", "reversed", "filter", "format", "hash", "ord", "chr", "bytes", "object", "property", "staticmethod", "classmethod", "Exception", "ValueError", "RuntimeError", "ImportError", "TypeError", "KeyError", "AttributeError", "NotImplementedError", "AssertionError", "OSError", "ModuleNotFoundError"):
    _BUILTINS.setdefault(_name, External(_name))
