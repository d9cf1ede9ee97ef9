"""The kernel-source evaluator on small snippets: what Python refuses on known values is an Unknown that
names the exception, and a bug of the evaluator itself surfaces as an exception instead of hiding
behind an "unknown" (issue #12)."""

from __future__ import annotations

import ast

import pytest

from tools.kernel_source import expressions
from tools.kernel_source.scope import BUILTINS, Context, Notes, Scope
from tools.kernel_source.statements import module_scope
from tools.pyeval import operators
from tools.pyeval.values import Builtin, Unknown


def _run(source: str, **pinned) -> Scope:
    return module_scope(ast.parse(source), Context(source=source, pinned=pinned, notes=Notes()))


@pytest.mark.parametrize(("source", "reason"), [
    ("x = 1 // 0", "cannot compute (ZeroDivisionError: integer division or modulo by zero)"),
    ("x = 1\nx += 'a'", "cannot compute (TypeError: unsupported operand type(s) for +: 'int' and 'str')"),
    ("x = -'a'", "cannot compute (TypeError: bad operand type for unary -: 'str')"),
    ("x = 1 < 'a'", "cannot compare (TypeError: '<' not supported between instances of 'int' and 'str')"),
    ("x = int('a')", "int() failed statically (ValueError: invalid literal for int() with base 10: 'a')"),
    ("import math\nx = math.log2(-1)", "math.log2 failed statically (ValueError: math domain error)"),
    ("x = (1, 2)[5]", "subscript not evaluated (IndexError: tuple index out of range)"),
    ("x = {1: 2}[[1]]", "subscript not evaluated (TypeError: unhashable type: 'list')"),
    ("x = {[1]: 2}", "cannot build the dict (TypeError: unhashable type: 'list')"),
    ("x = {1: 2}.get([1])", ".get() not evaluated (TypeError: unhashable type: 'list')"),
])
def test_what_python_refuses_is_an_unknown_naming_the_exception(source, reason):
    value = _run(source).values["x"]
    assert isinstance(value, Unknown) and value.why == reason


def test_an_operator_bug_surfaces(monkeypatch):
    def buggy(op, a, b):
        raise NameError("a bug in the evaluator")

    monkeypatch.setattr(operators, "binary", buggy)
    with pytest.raises(NameError, match="a bug in the evaluator"):
        _run("x = 1 + 2")


def test_a_builtin_bug_surfaces(monkeypatch):
    def buggy(*args):
        raise RuntimeError("a bug in a builtin")

    monkeypatch.setitem(BUILTINS, "len", Builtin("len", buggy))
    with pytest.raises(RuntimeError, match="a bug in a builtin"):
        _run("x = len((1, 2))")


def test_a_bug_in_a_call_model_surfaces(monkeypatch):
    """torch factories are modelled by dtype; an AttributeError there is the evaluator's, not the source's."""
    def buggy(name, args, kwargs, text):
        return None.dtype

    monkeypatch.setattr(expressions, "torch_call", buggy)
    with pytest.raises(AttributeError):
        _run("import torch\nx = torch.empty(4, dtype=torch.bfloat16)")


def test_branches_merge_into_unknowns_that_say_why():
    scope = _run("if flag:\n    x = 1\n    y = 2\nelse:\n    x = 3\n    y = 2\n")
    assert scope.values["y"] == 2
    assert scope.values["x"].why == "differs between the branches of `flag` (line 1)"


def test_unknowns_with_different_reasons_differ_between_branches():
    """Unknown's equality ignores the reason; a merge does not: one branch knowing less is no agreement."""
    scope = _run("if flag:\n    n = 'a'\n    x = int(n)\nelse:\n    n = 'b'\n    x = int(n)\n")
    assert scope.values["x"].why == "differs between the branches of `flag` (line 1)"


def test_pinned_names_and_unpacking():
    scope = _run("B, H = q.shape\nn = B * H\nfirst, *rest = (1, 2, 3)", **{"q.shape[0]": 4, "q.shape[1]": 8})
    assert scope.values["n"] == 32 and scope.values["first"] == 1 and scope.values["rest"] == [2, 3]
