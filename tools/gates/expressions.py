"""Expressions of the gate interpreter: constants, containers, operators, comparisons, subscripts,
comprehensions, and the dispatch of attributes and calls to their own mixins.

`Expressions` is a mixin of `interp.Interpreter`: its methods use the interpreter's effects
(`self.fx`), `lift`, `unknown`, and the names/attributes/calls mixins (`lookup`, `attribute`,
`call`, `bind_target`, `record_env`). Every value is an abstract value of `values` (`Alts` are
lifted over, so operators see one alternative at a time).
"""

from __future__ import annotations

import ast
from typing import Any

from tools.pyeval import operators
from tools.pyeval.binding import comprehension_values

from .effects import Frame
from .index import looks_arch
from .labels import failure, text
from .values import (
    Alts,
    ClassRef,
    External,
    FuncRef,
    Instance,
    ModuleRef,
    Unknown,
    concrete,
    freeze,
    hashable,
    join,
    refine_truth,
    truth_of,
    uncertainty,
    unknown,
)


class Expressions:
    """Evaluation of expression nodes (`ev` and its `ev_<NodeType>` handlers)."""

    def ev(self, node: ast.AST, frame: Frame) -> Any:
        """The abstract value of expression `node` in `frame`: dispatched on the node type to
        `ev_<Type>`; a node type without a handler is an unknown (not an error: the gates scan only
        needs the values conditions are made of)."""
        method = getattr(self, "ev_" + type(node).__name__, None)
        if method is None:
            return self.unknown(node, arch=False, reason=f"{type(node).__name__} is not evaluated")
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
            if not (concrete(key) and hashable(key)):
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
                if not concrete(v):
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
                    return Unknown(labels=labels, arch=arch)
                return not truth

            return self.lift(neg, value)

        def op(v):
            if not concrete(v):
                labels, arch = uncertainty(v)
                return Unknown(labels=labels or frozenset([text(node)]), arch=arch)
            try:
                return operators.unary(node.op, v)
            except operators.OPERATION_ERRORS as exc:
                return unknown(text(node), why=failure(exc))

        return self.lift(op, value)

    def binop(self, op, left, right, label):
        def apply(a, b):
            # `"%s" % x` is string formatting, not arithmetic: its result is not a gate value
            if type(op) not in operators.BINARY or not (concrete(a) and concrete(b)) or isinstance(a, str) and isinstance(op, ast.Mod):
                labels = uncertainty(a)[0] | uncertainty(b)[0]
                return Unknown(labels=labels or frozenset([label]), arch=uncertainty(a)[1] or uncertainty(b)[1])
            try:
                return operators.binary(op, a, b)
            except operators.OPERATION_ERRORS as exc:  # includes results too large to build from source
                return unknown(label, why=failure(exc))

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
                        return Unknown(labels=other.labels, arch=other.arch)
                    if isinstance(other, External):
                        return self.unknown(node, arch=False)
                    is_none = other is None
                    return is_none if isinstance(op, ast.Is) else not is_none
                if isinstance(a, (External,)) and isinstance(b, External):
                    same = a.path == b.path
                    return same if isinstance(op, ast.Is) else not same
                if concrete(a) and concrete(b) and isinstance(a, bool) and isinstance(b, bool):
                    return (a is b) if isinstance(op, ast.Is) else (a is not b)
                if isinstance(a, (FuncRef, ClassRef, ModuleRef)) and isinstance(b, (FuncRef, ClassRef, ModuleRef)):
                    same = a == b
                    return same if isinstance(op, ast.Is) else not same
                labels = uncertainty(a)[0] | uncertainty(b)[0]
                return Unknown(labels=labels or frozenset([text(node)]), arch=uncertainty(a)[1] or uncertainty(b)[1])
            if isinstance(a, External) and isinstance(b, External) and isinstance(op, (ast.Eq, ast.NotEq)):
                if a.path == b.path:
                    return isinstance(op, ast.Eq)
            comparable = (
                lambda v: concrete(v) or isinstance(v, dict) and all(concrete(k) for k in v)
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
                return Unknown(labels=labels or frozenset([text(node)]), arch=arch)
            try:
                return operators.compare(op, a, b)
            except operators.OPERATION_ERRORS as exc:
                return unknown(text(node), why=failure(exc))

        return self.lift(apply, left, right)

    def ev_Subscript(self, node, frame):
        value = self.ev(node.value, frame)
        if isinstance(node.slice, ast.Slice):
            parts = [self.ev(p, frame) if p is not None else None for p in (node.slice.lower, node.slice.upper, node.slice.step)]

            def cut(v, lo, hi, st):
                if isinstance(v, (tuple, str)) and all(p is None or isinstance(p, int) for p in (lo, hi, st)):
                    return v[slice(lo, hi, st)]
                labels, arch = uncertainty(v)
                return Unknown(labels=labels or frozenset([text(node)]), arch=arch)

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
                except IndexError as exc:
                    return unknown(text(node), why=failure(exc))
            if isinstance(v, dict) and concrete(i) and hashable(i):
                if i in v:
                    return v[i]
                return unknown(text(node), why=f"{i!r} is not among the keys")
            labels, arch = uncertainty(v)
            return Unknown(
                labels=labels or frozenset([text(node)]), arch=arch or looks_arch(text(node)) and isinstance(v, Unknown) and v.arch
            )

        return self.lift(item, value, index)

    def ev_Starred(self, node, frame):
        return self.unknown(node, arch=False)

    def comprehension(self, node, frame):
        """The elements of a one-generator comprehension over a short known iterable, in order, or
        None when they are not known (several generators, an async one, an unknown condition)."""
        if len(node.generators) != 1:
            return None
        gen = node.generators[0]
        if gen.is_async or not isinstance(gen.target, (ast.Name, ast.Tuple)):
            return None

        def items(iter_node, outer):
            iterable = self.ev(iter_node, outer)
            if isinstance(iterable, dict):
                iterable = tuple(iterable)
            if not isinstance(iterable, (tuple, str, frozenset)) or len(iterable) > 32:
                return None
            return sorted(iterable, key=repr) if isinstance(iterable, frozenset) else iterable

        def child(outer):
            return Frame(
                module=outer.module, mode="exec", chain=outer.chain, locals={}, cls=outer.cls,
                self_value=outer.self_value, site=outer,
            )

        return comprehension_values(
            node, frame, items=items, child=child,
            bind=lambda target, element, inner: self.bind_target(target, element, inner.locals),
            keep=lambda cond, inner: truth_of(self.ev(cond, inner)), value=self.ev,
        )

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
