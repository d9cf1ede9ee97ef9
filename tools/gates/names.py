"""Names of the gate interpreter: locals of the function being run or of the functions a test sits
in, module globals (with the `if`/`try` guards they are bound under), imports, and the binding of
values to assignment targets.

`Names` is a mixin of `interp.Interpreter` (it uses `self.project`, `self.fx`, `guarded`, `lift`,
`unknown`, `ev`); the attribute and call mixins reach module globals through `global_value`.
"""

from __future__ import annotations

import ast
from typing import Any

from tools.pyeval.binding import bind_target
from tools.pyeval.syntax import import_bindings

from .builtin_calls import BUILTINS
from .effects import Frame
from .index import looks_arch, mentions
from .labels import failure, text
from .project import resolve_from
from .statements import try_imports
from .values import (
    MISSING,
    ClassRef,
    External,
    FuncRef,
    Instance,
    ModuleRef,
    PartialRef,
    Props,
    Unknown,
    join,
    truth_of,
    uncertainty,
    unknown,
)

MAX_LOCAL_CHAIN = 4
MAX_LOCAL_BINDINGS = 6


class Names:
    """Looking names up and binding them."""

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

        def shortcut():
            if name == "self" and frame.self_value is not None and fn is frame.chain[0]:
                return frame.self_value
            if name == "cls" and frame.cls is not None and fn is frame.chain[0]:
                return frame.cls
            if not any(self.carries(b, frame.module) for b in bindings):
                return unknown(name, why="bound only to values that depend on neither the architecture nor the environment")
            return MISSING

        def compute():
            chain = frame.chain[: frame.chain.index(fn) + 1] if fn in frame.chain else (fn,)
            site = Frame(module=frame.module, mode="site", chain=chain, cls=frame.cls, self_value=frame.self_value)
            return join([self.binding_value(binding, name, site) for binding in bindings])

        return self.guarded(
            self._locals_guard, key, compute,
            refused=lambda: unknown(name, why="a chain of locals too long or circular to follow"),
            shortcut=shortcut, refuse=len(bindings) > MAX_LOCAL_BINDINGS,
        )

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
                if found is not MISSING:
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
            for bound, module in import_bindings(stmt):
                if bound == name:
                    return self.module_value(module)
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
            return value if target.id == name else MISSING
        if isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    if self.extract(elt.value, name, None) is not MISSING:
                        return unknown(name)
                    continue
                sub = self.lift(lambda v, i=i: self.element(v, i, len(target.elts), name), value)
                found = self.extract(elt, name, sub)
                if found is not MISSING:
                    return found
        return MISSING

    def element(self, value: Any, i: int, n: int, label: str) -> Any:
        if isinstance(value, (tuple,)) and len(value) == n:
            return value[i]
        if isinstance(value, Props):
            return unknown(label)
        labels, arch = uncertainty(value)
        return Unknown(labels=labels or frozenset([label]), arch=arch)

    def bind_target(self, target: ast.AST, value: Any, locals_: dict) -> None:
        """Bind `value` to an assignment target in `locals_`; a tuple target takes each element of
        each alternative, a starred element is unknown."""

        def split(tuple_target, whole):
            n = len(tuple_target.elts)
            return [
                unknown(text(elt), why="starred unpacking") if isinstance(elt, ast.Starred)
                else self.lift(lambda v, i=i, elt=elt: self.element(v, i, n, text(elt)), whole)
                for i, elt in enumerate(tuple_target.elts)
            ]

        bind_target(target, value, locals_.__setitem__, split)

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
            except SyntaxError as exc:
                return unknown(text(annotation), why=f"annotation not parsed: {failure(exc)}")
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            value = self.ev(annotation, Frame(module=module, mode="global"))
            if isinstance(value, ClassRef):
                return Instance(value)
        return unknown(text(annotation))

    def global_value(self, module: str, name: str, node: ast.AST | None) -> Any:
        """The value of module-level `name` in `module` (a module outside the tree: External)."""
        scope = self.project.scope(module)

        def compute():
            value = self._global_value(scope, name, node)
            self._name_callable(scope, name, value)
            return value

        return self.guarded(
            self._globals_guard, (module, name), compute,
            refused=lambda: unknown(name, why="defined in terms of itself"),
            shortcut=lambda: External(f"{module}.{name}") if scope is None else MISSING,
        )

    def _name_callable(self, scope, name: str, value: Any) -> None:
        """Remember the name and place a callable is bound at, for reporting it as a helper."""
        if isinstance(value, (FuncRef, PartialRef)) and value not in self._binding_of:
            bindings = scope.bindings.get(name) or ()
            if bindings:
                # The name the binding statement gives first, whichever alias led here (deterministic).
                stmt = bindings[-1].node
                first = name
                if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                    first = stmt.targets[0].id
                if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    self._binding_of[value] = (first, f"{scope.file.rel}:{stmt.lineno}", scope.name)

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
            if name in BUILTINS:
                return BUILTINS[name]
            if name in ("__name__", "__file__", "__doc__", "__package__", "__spec__"):
                return unknown(name, why="a module attribute set at import time")
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
                    for module_name in try_imports(test):
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
            return unknown(name, why="no binding possible under the conditions it sits in")
        return join(values, frozenset(why))

    def _in_tree(self, dotted: str) -> bool:
        return dotted in self.project.files or any(
            m == dotted or m.startswith(dotted + ".") for m in (dotted.rsplit(".", 1)[0],) if m in self.project.files
        )


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
