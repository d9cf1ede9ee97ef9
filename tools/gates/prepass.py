"""The syntactic pre-pass: per file, the top-level definitions, assignments, classes, dispatch
tables, import probes and imports, and every name and attribute mentioned; it runs over the whole
tree in worker processes, before anything is interpreted (relevance.py reads it).
"""

from __future__ import annotations

import ast
import gc
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

from .index import HELPER_MAX_LINES, ModuleFile, call_name, mentions, parse_file, probe_modules, resolve_relative, target_names


@dataclass
class DefInfo:
    qualname: str
    name: str
    line: int
    small: bool  # helper-sized: few statements
    returns_value: bool
    names: frozenset  # Name ids it mentions
    attrs: frozenset  # attribute names it mentions
    is_method: bool


@dataclass
class AssignInfo:
    targets: tuple  # names; "self.X" for instance attributes
    names: frozenset
    attrs: frozenset
    line: int
    scope: str  # "module", "class", "method"
    call_name: str | None  # name of the called function/class when the value is a call


@dataclass
class ClassInfo:
    name: str
    line: int
    bases: tuple
    methods: dict  # name -> names and attrs it mentions
    fields: list  # (name, call_name, line)


@dataclass
class ProbeInfo:
    line: int
    col: int
    modules: tuple
    function: str | None


@dataclass
class FileSummary:
    module: str
    rel: str
    names: frozenset = frozenset()
    attrs: frozenset = frozenset()
    defs: list = field(default_factory=list)
    assigns: list = field(default_factory=list)
    classes: list = field(default_factory=list)
    dicts: list = field(default_factory=list)  # (name, ((key, value-string), ...))
    probes: list = field(default_factory=list)
    imports: dict = field(default_factory=dict)  # local name -> module or module.name
    star_imports: list = field(default_factory=list)
    top_names: frozenset = frozenset()  # names bound at module level
    all_names: tuple | None = None  # __all__ when it is a literal
    is_package: bool = False
    ifexp_lines: frozenset = frozenset()
    error: str | None = None



class _Summarizer:
    """One recursive pass over a module collecting what the pre-pass needs."""

    def __init__(self, summary: FileSummary):
        self.summary = summary
        self.names: set = set()
        self.attrs: set = set()
        self.collectors: list = []  # (names, attrs) of enclosing helper-sized functions
        self.top: set = set()
        self.ifexp_lines: set = set()

    def run(self, tree: ast.Module) -> None:
        self.block(tree.body, scope="module", function=None, class_name=None)
        for stmt in tree.body:
            for sub in ast.walk(stmt) if isinstance(stmt, (ast.If, ast.Try)) else [stmt]:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.top.add(sub.name)
                elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                    for target in targets:
                        self.top.update(n for n in target_names(target) if not n.startswith("self."))
                        if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(sub.value, (ast.List, ast.Tuple)):
                            self.summary.all_names = tuple(
                                e.value for e in sub.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                            )
        self.summary.top_names = frozenset(self.top)
        self.summary.ifexp_lines = frozenset(self.ifexp_lines)
        self.summary.names = frozenset(self.names)
        self.summary.attrs = frozenset(self.attrs)

    def block(self, stmts, scope, function, class_name):
        for stmt in stmts:
            self.statement(stmt, scope, function, class_name)

    def statement(self, stmt, scope, function, class_name):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(stmt, scope, function, class_name)
        elif isinstance(stmt, ast.ClassDef):
            self.class_def(stmt, scope, function)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assignment(stmt, scope)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self.imported(stmt, scope)
        else:
            if isinstance(stmt, ast.Try):
                modules = probe_modules(stmt)
                if modules:
                    self.summary.probes.append(ProbeInfo(stmt.lineno, stmt.col_offset, modules, function))
            self.nested(stmt, scope, function, class_name)

    def class_def(self, stmt: ast.ClassDef, scope, function):
        for expr in stmt.bases + stmt.decorator_list + [k.value for k in stmt.keywords]:
            self.expr(expr)
        info = ClassInfo(stmt.name, stmt.lineno, tuple(ast.unparse(b) for b in stmt.bases), {}, [])
        if scope == "module":
            self.summary.classes.append(info)
        qual = f"{function}.{stmt.name}" if function else stmt.name
        for item in stmt.body:
            if isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None:
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                for target in targets:
                    for name in target_names(target):
                        info.fields.append((name, call_name(item.value), item.lineno))
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(item, "class", qual, stmt.name, info)
            else:
                self.statement(item, "class", qual, stmt.name)

    def assignment(self, stmt, scope):
        """Module constants, class fields and `self.X` attributes, and module dispatch tables of
        string keys to string values."""
        summary = self.summary
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            self.expr(target)
        if stmt.value is None:
            return
        names, attrs = mentions(stmt.value, self.ifexp_lines)
        self.add(names, attrs)
        flat = tuple(n for t in targets for n in target_names(t))
        if flat and (scope in ("module", "class") or any(n.startswith("self.") for n in flat)):
            kind = scope if scope in ("module", "class") else "method"
            kept = flat if kind != "method" else tuple(n for n in flat if n.startswith("self."))
            summary.assigns.append(
                AssignInfo(kept, frozenset(names), frozenset(attrs), stmt.lineno, kind, call_name(stmt.value))
            )
        if scope == "module" and isinstance(stmt.value, ast.Dict):
            pairs = tuple(
                (k.value, v.value)
                for k, v in zip(stmt.value.keys, stmt.value.values)
                if isinstance(k, ast.Constant)
                and isinstance(k.value, str)
                and isinstance(v, ast.Constant)
                and isinstance(v.value, str)
            )
            if pairs:
                for name in flat:
                    summary.dicts.append((name, pairs))

    def nested(self, stmt, scope, function, class_name):
        """Any other statement: the expressions inside, and its nested blocks in the same scope."""
        for _, value in ast.iter_fields(stmt):
            if isinstance(value, list):
                if value and isinstance(value[0], ast.stmt):
                    self.block(value, scope, function, class_name)
                else:
                    for item in value:
                        if isinstance(item, ast.excepthandler):
                            if item.type is not None:
                                self.expr(item.type)
                            self.block(item.body, scope, function, class_name)
                        elif isinstance(item, ast.match_case):
                            self.block(item.body, scope, function, class_name)
                        elif isinstance(item, ast.AST):
                            self.expr(item)
            elif isinstance(value, ast.AST):
                self.expr(value)

    def function(self, node, scope, function, class_name, class_info=None):
        for expr in node.decorator_list:
            self.expr(expr)
        qual = f"{function}.{node.name}" if function else node.name
        span = (node.end_lineno or node.lineno) - node.lineno
        small = span <= HELPER_MAX_LINES
        collector = (set(), set()) if small else None
        if collector is not None:
            self.collectors.append(collector)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.expr(default)
        self.block(node.body, "function", qual, class_name)
        returns_value = False
        if collector is not None:
            self.collectors.pop()
            returns_value = any(
                isinstance(sub, ast.Return)
                and sub.value is not None
                and not (isinstance(sub.value, ast.Constant) and sub.value.value is None)
                for sub in ast.walk(node)
            )
        is_method = scope == "class"
        if scope in ("module", "class"):
            self.summary.defs.append(
                DefInfo(
                    qualname=qual,
                    name=node.name,
                    line=node.lineno,
                    small=small,
                    returns_value=returns_value,
                    names=frozenset(collector[0]) if collector else frozenset(),
                    attrs=frozenset(collector[1]) if collector else frozenset(),
                    is_method=is_method,
                )
            )
        if class_info is not None:
            class_info.methods[node.name] = (
                (frozenset(collector[0]) | frozenset(collector[1])) if collector else frozenset()
            )

    def imported(self, stmt, scope):
        summary = self.summary
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    local, target = alias.asname, alias.name
                else:
                    local = target = alias.name.split(".")[0]
                summary.imports.setdefault(local, target)
                if scope == "module":
                    self.top.add(local)
            return
        base = resolve_relative(summary.module, summary.is_package, stmt.level, stmt.module)
        for alias in stmt.names:
            if alias.name == "*":
                if scope == "module":
                    summary.star_imports.append(base)
                continue
            local = alias.asname or alias.name
            summary.imports.setdefault(local, f"{base}.{alias.name}" if base else alias.name)
            if scope == "module":
                self.top.add(local)

    def add(self, names, attrs):
        self.names |= names
        self.attrs |= attrs
        for collector in self.collectors:
            collector[0].update(names)
            collector[1].update(attrs)

    def expr(self, node):
        names, attrs = mentions(node, self.ifexp_lines)
        self.add(names, attrs)


def summarize(module: str, rel: str, path: str, is_package: bool = False) -> FileSummary:
    """The pre-pass facts of one file (runs in a worker process)."""
    summary = FileSummary(module=module, rel=rel, is_package=is_package)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            tree = parse_file(Path(path))
        except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
            summary.error = f"{type(exc).__name__}: {exc}"
            return summary
        _Summarizer(summary).run(tree)
        return summary
    finally:
        if gc_was_enabled:
            gc.enable()


def summarize_all(files: list[ModuleFile], workers: int | None = None,
                  progress: Callable[[int, int], None] | None = None) -> list[FileSummary]:
    """Pre-pass over every file, in worker processes when there are many; ``progress(done, total)``
    after each file."""
    jobs = [(f.name, f.rel, str(f.path), f.is_package) for f in files]
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    if workers <= 1 or len(jobs) < 200:
        summaries = (summarize(*job) for job in jobs)
        return _counted(summaries, len(jobs), progress)
    chunk = max(8, len(jobs) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return _counted(pool.map(_summarize_job, jobs, chunksize=chunk), len(jobs), progress)


def _counted(summaries, total: int, progress: Callable[[int, int], None] | None) -> list[FileSummary]:
    done = []
    for summary in summaries:
        done.append(summary)
        if progress:
            progress(len(done), total)
    return done


def _summarize_job(job: tuple) -> FileSummary:
    return summarize(*job)

