"""Attributes of the gate interpreter: of modules of the tree, of outside objects (`torch.version.cuda`
under the stated assumptions), of classes through their MRO (methods, properties, fields,
environment-variable registries) and of instances (what the methods assign to `self`).

`Attributes` is a mixin of `interp.Interpreter` (it uses `self.project`, `self.fx`, `guarded`,
`unknown`, `where`, `ev`, `call`, `global_value`, `annotated_instance`, `carries_value`).
"""

from __future__ import annotations

import ast
from typing import Any

from .effects import Frame
from .index import ENV_PRIMITIVES, is_property, looks_arch
from .labels import text
from .values import (
    MISSING,
    BoundBuiltin,
    Cap,
    ClassRef,
    EnvField,
    External,
    FuncRef,
    Instance,
    ModuleRef,
    PartialRef,
    Props,
    Unknown,
    hashable,
    join,
    unknown,
)

# Methods of plain values the interpreter applies (to concrete arguments only).
STR_METHODS = frozenset(
    "lower upper strip lstrip rstrip split rsplit startswith endswith replace join casefold isdigit isnumeric "
    "isalpha partition rpartition title capitalize count find index format removeprefix removesuffix".split()
)
TUPLE_METHODS = frozenset({"count", "index"})
DICT_METHODS = frozenset({"get", "keys", "values", "items"})


def _decorator_names(node: ast.AST) -> set:
    names = set()
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute):
            names.add(target.attr)
        elif isinstance(target, ast.Name):
            names.add(target.id)
    return names


def _literal(node: ast.AST) -> bool:
    return all(
        isinstance(sub, (ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.Set, ast.UnaryOp, ast.BinOp, ast.operator, ast.unaryop, ast.expr_context))
        for sub in ast.walk(node)
    )


class Attributes:
    """`base.attr` for every kind of abstract value."""

    def attribute(self, base: Any, attr: str, node: ast.AST) -> Any:
        """`base.attr` for one (non-Alts) value `base`; `node` is the Attribute node (labels)."""
        if isinstance(base, Unknown):
            if looks_arch(attr) and not base.arch:
                self.fx.unresolved.setdefault(
                    text(node), f"attribute {attr!r} of {text(node.value)}, which the scan cannot resolve"
                )
            return Unknown(
                why=base.why, labels=base.labels | {text(node)} if not base.labels else base.labels,
                arch=base.arch or looks_arch(attr),
            )
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
        if isinstance(base, str) and attr in STR_METHODS:
            return BoundBuiltin(base, attr)
        if isinstance(base, tuple) and attr in TUPLE_METHODS:
            return BoundBuiltin(base, attr)
        if isinstance(base, dict) and attr in DICT_METHODS:
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
        return MISSING

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
        if not hashable(default):
            default = unknown(text(default_node), why="default not a plain value")
        return EnvField(name, default, field_cls, self.where(owner.module, stmt))

    def instance_attr(self, inst: Instance, attr: str, node: ast.AST | None) -> Any:
        found = self.class_attr(inst.cls, attr, node, inst)
        if found is not MISSING:
            return found
        return self.guarded(
            self._instance_guard, (inst.cls.node_id, attr), lambda: self._instance_attr(inst, attr, node),
            refused=lambda: unknown(f"self.{attr}", why="defined in terms of itself"),
        )

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
                        values.append(unknown(f"self.{attr}", why="set from values that depend on neither the architecture nor the environment"))
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
