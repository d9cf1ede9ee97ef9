"""Calls of the gate interpreter: in-tree functions run path by path on abstract arguments,
classes constructed, outside functions answered under the stated assumptions (the device's
capability, the platform, the environment), methods of plain values, and environment reads.

`Calls` is a mixin of `interp.Interpreter` (it uses `self.fx`, `self.sm`, `self.env`, `guarded`,
`unknown`, `ev`, `exec_block`, `class_attr`, `instance_attr`, `mro`).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from tools.pyeval.binding import bind_parameters
from tools.pyeval.operators import OPERATION_ERRORS
from tools.pyeval.values import Builtin

from .effects import Budget, EnvRead, Frame
from .index import HELPER_MAX_LINES, looks_arch
from .labels import failure, text
from .model import capability_of
from .values import (
    BoundBuiltin,
    Cap,
    ClassRef,
    Decorator,
    EnvField,
    External,
    FuncRef,
    Instance,
    PartialRef,
    Props,
    Unknown,
    concrete,
    freeze,
    hashable,
    join,
    unknown,
)

DECORATORS = frozenset({"lru_cache", "cache", "wraps", "cached", "cache_once", "functools_cache"})
ASSUMED_TRUE = frozenset({"torch.cuda.is_available"})


class Calls:
    """Calling abstract values."""

    def call(self, func: Any, args: list, kwargs: dict, node: ast.AST | None, label: str) -> Any:
        """The result of calling the abstract value `func`; `label` names the call in unknowns."""
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
        if isinstance(func, Builtin):
            return func.fn(self, args, kwargs, label)
        if isinstance(func, Instance):
            call = self.class_attr(func.cls, "__call__", node, func)
            if isinstance(call, FuncRef):
                return self.call_function(call, args, kwargs, node, label)
            return unknown(label, why=f"{func.cls.qualname} instances are not callable in the tree")
        if isinstance(func, Unknown):
            return Unknown(why=func.why, labels=func.labels or frozenset([label]), arch=func.arch or looks_arch(label))
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
            if all(concrete(a) for a in args):
                if fields[:2] == ["major", "minor"]:
                    return Cap(args)
                return tuple(args)
        return Instance(cls)

    def call_function(self, ref: FuncRef, args: list, kwargs: dict, node, label: str) -> Any:
        fn = ref.node
        """Run an in-tree function on abstract arguments (memoised by its arguments)."""
        fn = ref.node
        if isinstance(fn, ast.Lambda):
            return unknown(label, why="lambdas are not run")
        if not self.worth_running(ref):
            # A long function the pre-pass found unrelated to the architecture and the environment:
            # its result is a condition, not something to run.
            return unknown(label, why="long and unrelated to the architecture or the environment")
        frozen_args = tuple(freeze(a) for a in args)
        frozen_kwargs = tuple(sorted((k, freeze(v)) for k, v in kwargs.items()))
        key = (ref.node_id, ref.self_value, frozen_args, frozen_kwargs)
        memo_ok = hashable(key)

        def compute():
            try:
                return self._run_function(ref, args, kwargs, label)
            except Budget:
                if looks_arch(label):
                    self.fx.unresolved.setdefault(label, f"{ref.qualname} too long to evaluate")
                return unknown(f"{label} (budget)", why=f"{ref.qualname} too long to evaluate")

        return self.guarded(
            self._calls_guard, key, compute, refused=lambda: unknown(label, why="recursive or too deeply nested call"),
            memo=memo_ok, entry=None if memo_ok else (ref.node_id, id(args)),
        )

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
        given = list(args)
        if ref.self_value is not None and (params.posonlyargs or params.args):
            given.insert(0, ref.self_value)
        module_frame = Frame(module=ref.module, mode="global")
        local, rest, _ = bind_parameters(
            params, given, kwargs, default=lambda node: self.ev(node, module_frame),
            missing=lambda param, keyword_only: unknown(param.arg, why=f"argument of {ref.qualname} not given"),
        )
        if params.vararg is not None:
            local[params.vararg.arg] = rest if all(hashable(g) for g in rest) else unknown(params.vararg.arg, why="*args not plain values")
        if params.kwarg is not None:
            local[params.kwarg.arg] = unknown(params.kwarg.arg, why="**kwargs are not tracked")
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
            return unknown(f"{label} (never returns)", why="every path raises")
        return join(returns)

    def external_call(self, path: str, args: list, kwargs: dict, node, label: str) -> Any:
        last = path.rsplit(".", 1)[-1]
        if last in ("get_device_capability", "nvmlDeviceGetCudaComputeCapability"):
            self.fx.touched_arch = True
            return Cap(capability_of(self.sm))
        if last == "get_device_properties":
            return Props(*capability_of(self.sm))
        if path in ASSUMED_TRUE:
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
        if last in DECORATORS:
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
        if not all(concrete(a) or isinstance(a, dict) for a in args) or not all(concrete(v) for v in kwargs.values()):
            return unknown(label, why="arguments not all known")
        try:
            result = getattr(receiver, bound.name)(*args, **kwargs)
        except OPERATION_ERRORS as exc:
            return unknown(label, why=failure(exc))
        if isinstance(result, list):
            return tuple(result)
        if isinstance(result, (dict, str, int, float, bool, tuple)) or result is None:
            if type(result).__name__ in ("dict_keys", "dict_values", "dict_items"):
                return tuple(result)
            return result
        return tuple(result) if isinstance(result, type({}.keys())) else unknown(label, why=f"{type(result).__name__} results are not modelled")

    def record_env(self, name: str, default: Any, defined_at: str | None) -> None:
        previous = self.fx.env_reads.get(name)
        if previous is None or previous.defined_at is None and defined_at is not None:
            self.fx.env_reads[name] = EnvRead(name, default if concrete(default) else None, defined_at)

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
