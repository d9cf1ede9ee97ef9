"""The scanned tree's modules as scopes the interpreter can look names up in: top-level bindings
(with the `if` guards and `try` blocks they sit in), classes (methods, fields, instance attributes),
and function-local bindings. ASTs are parsed on demand and cached."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tools.pyeval.syntax import assign_targets, import_bindings

from .index import ModuleFile, parse_file, resolve_relative, target_names
from .prepass import FileSummary
from .relevance import Relevance, Resolver


@dataclass
class Binding:
    """One statement that binds a name: `node` is the statement (Assign, FunctionDef, ImportFrom...),
    `guards` the enclosing module-level conditions as (test, taken-branch) pairs, where a test of
    None stands for a try body (True) or its handler (False)."""

    node: ast.AST
    guards: tuple
    order: int


@dataclass
class ModuleScope:
    name: str
    file: ModuleFile
    tree: ast.Module
    bindings: dict  # name -> [Binding]
    star_imports: list
    all_names: tuple | None
    has_getattr: bool


@dataclass
class ClassScope:
    module: str
    node: ast.ClassDef
    methods: dict  # name -> FunctionDef
    fields: dict  # name -> [Assign/AnnAssign]
    instance: dict  # name -> [(method FunctionDef, value expr or None, annotation or None)]


@dataclass
class FunctionScope:
    node: ast.AST
    locals: dict  # name -> [binding node]
    params: set


@dataclass
class Project:
    """Everything about the tree that does not depend on the architecture being evaluated."""

    root: Path
    files: dict  # module name -> ModuleFile
    summaries: dict  # module name -> FileSummary
    relevance: Relevance
    _trees: dict = field(default_factory=dict)
    _scopes: dict = field(default_factory=dict)
    _classes: dict = field(default_factory=dict)
    _functions: dict = field(default_factory=dict)
    parse_errors: dict = field(default_factory=dict)
    _method_index: dict | None = None
    shared: dict = field(default_factory=dict)  # interpreter caches that hold for every SM

    @property
    def resolver(self) -> Resolver:
        return self.relevance.resolver

    def tree(self, module: str) -> ast.Module | None:
        if module in self._trees:
            return self._trees[module]
        file = self.files.get(module)
        tree = None
        if file is not None:
            try:
                tree = parse_file(file.path)
            except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
                self.parse_errors[module] = f"{type(exc).__name__}: {exc}"
        self._trees[module] = tree
        return tree

    def scope(self, module: str) -> ModuleScope | None:
        if module in self._scopes:
            return self._scopes[module]
        tree = self.tree(module)
        scope = None
        if tree is not None:
            bindings: dict = {}
            star: list = []
            order = [0]
            file = self.files[module]

            def add(name, node, guards):
                order[0] += 1
                bindings.setdefault(name, []).append(Binding(node, guards, order[0]))

            def visit(stmts, guards):
                for stmt in stmts:
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        add(stmt.name, stmt, guards)
                    elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                        for target in assign_targets(stmt):
                            for name in target_names(target):
                                if not name.startswith("self."):
                                    add(name, stmt, guards)
                    elif isinstance(stmt, ast.Import):
                        for bound, _ in import_bindings(stmt):
                            add(bound, stmt, guards)
                    elif isinstance(stmt, ast.ImportFrom):
                        for alias in stmt.names:
                            if alias.name == "*":
                                star.append(resolve_from(file, stmt))
                            else:
                                add(alias.asname or alias.name, stmt, guards)
                    elif isinstance(stmt, ast.If):
                        visit(stmt.body, guards + ((stmt.test, True),))
                        visit(stmt.orelse, guards + ((stmt.test, False),))
                    elif isinstance(stmt, ast.Try):
                        visit(stmt.body + stmt.orelse, guards + ((stmt, True),))
                        for handler in stmt.handlers:
                            visit(handler.body, guards + ((stmt, False),))
                        visit(stmt.finalbody, guards)
                    elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.AsyncWith, ast.AsyncFor)):
                        if isinstance(stmt, (ast.For, ast.AsyncFor)):
                            for name in target_names(stmt.target):
                                add(name, stmt, guards)
                        visit(stmt.body, guards + ((None, None),))
                        visit(getattr(stmt, "orelse", []), guards + ((None, None),))

            visit(tree.body, ())
            summary = self.summaries.get(module)
            scope = ModuleScope(
                name=module,
                file=file,
                tree=tree,
                bindings=bindings,
                star_imports=star,
                all_names=summary.all_names if summary else None,
                has_getattr="__getattr__" in bindings,
            )
        self._scopes[module] = scope
        return scope

    def class_scope(self, module: str, node: ast.ClassDef) -> ClassScope:
        key = id(node)
        if key in self._classes:
            return self._classes[key]
        methods: dict = {}
        fields: dict = {}
        instance: dict = {}
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods[item.name] = item
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                for target in assign_targets(item):
                    for name in target_names(target):
                        fields.setdefault(name, []).append(item)
        for method in methods.values():
            for sub in ast.walk(method):
                if isinstance(sub, (ast.Assign, ast.AnnAssign)):
                    for target in assign_targets(sub):
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            annotation = sub.annotation if isinstance(sub, ast.AnnAssign) else None
                            instance.setdefault(target.attr, []).append((method, sub.value, annotation))
                elif (
                    isinstance(sub, ast.Call)
                    and len(sub.args) == 3
                    and isinstance(sub.args[1], ast.Constant)
                    and isinstance(sub.args[1].value, str)
                    and isinstance(sub.args[0], ast.Name)
                    and sub.args[0].id == "self"
                    and (
                        isinstance(sub.func, ast.Name) and sub.func.id == "setattr"
                        or isinstance(sub.func, ast.Attribute) and sub.func.attr == "__setattr__"
                    )
                ):
                    # object.__setattr__(self, "name", value) / setattr(self, "name", value)
                    instance.setdefault(sub.args[1].value, []).append((method, sub.args[2], None))
        scope = ClassScope(module, node, methods, fields, instance)
        self._classes[key] = scope
        return scope

    def function_scope(self, node: ast.AST) -> FunctionScope:
        key = id(node)
        if key in self._functions:
            return self._functions[key]
        local: dict = {}
        params: set = set()
        args = node.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            params.add(arg.arg)
            local.setdefault(arg.arg, []).append(arg)
        for arg in (args.vararg, args.kwarg):
            if arg is not None:
                params.add(arg.arg)
                local.setdefault(arg.arg, []).append(arg)
        declared_global: set = set()

        def visit(stmts):
            for stmt in stmts:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    local.setdefault(stmt.name, []).append(stmt)
                    continue
                if isinstance(stmt, (ast.Global, ast.Nonlocal)):
                    declared_global.update(stmt.names)
                if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    for target in assign_targets(stmt):
                        for name in target_names(target):
                            if not name.startswith("self."):
                                local.setdefault(name, []).append(stmt)
                elif isinstance(stmt, ast.Import):
                    for bound, _ in import_bindings(stmt):
                        local.setdefault(bound, []).append(stmt)
                elif isinstance(stmt, ast.ImportFrom):
                    for alias in stmt.names:
                        if alias.name != "*":
                            local.setdefault(alias.asname or alias.name, []).append(stmt)
                elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                    for name in target_names(stmt.target):
                        local.setdefault(name, []).append(stmt)
                elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                    for item in stmt.items:
                        if item.optional_vars is not None:
                            for name in target_names(item.optional_vars):
                                local.setdefault(name, []).append(stmt)
                for sub in ast.iter_child_nodes(stmt):
                    if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                        local.setdefault(sub.target.id, []).append(sub)
                for name, value in ast.iter_fields(stmt):
                    if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                        visit(value)
                    elif isinstance(value, list):
                        for item in value:
                            if isinstance(item, ast.excepthandler):
                                if item.name:
                                    local.setdefault(item.name, []).append(item)
                                visit(item.body)
                            elif isinstance(item, ast.match_case):
                                visit(item.body)

        visit(node.body)
        for name in declared_global:
            local.pop(name, None)
        scope = FunctionScope(node, local, params)
        self._functions[key] = scope
        return scope

    def method_definitions(self, name: str) -> list:
        """(module, class name) of every top-level class defining a method or property `name`."""
        if self._method_index is None:
            index: dict = {}
            for module, summary in self.summaries.items():
                for info in summary.classes:
                    for method in info.methods:
                        index.setdefault(method, []).append((module, info.name))
            self._method_index = index
        return self._method_index.get(name, [])


def resolve_from(file: ModuleFile, node: ast.ImportFrom) -> str:
    """The absolute module an `from ... import` in `file` imports from."""
    return resolve_relative(file.name, file.is_package, node.level, node.module)


def build_project(root: Path, files: list, summaries: list[FileSummary], relevance: Relevance) -> Project:
    return Project(
        root=root,
        files={f.name: f for f in files},
        summaries={s.module: s for s in summaries},
        relevance=relevance,
    )
