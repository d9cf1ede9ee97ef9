"""The gate interpreter never turns its own failures into a silent "unknown": an operation on values
read from the source that fails gives an unknown whose reason names the exception, and a bug in the
interpreter (an exception outside what operations on source values raise) propagates out of the
evaluation and out of the scan."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tools.gates import scan
from tools.gates.expressions import Expressions
from tools.pyeval import operators
from tools.pyeval.values import Unknown

TREE = Path(__file__).resolve().parents[1] / "tests" / "data" / "gates-synthetic" / "fakeengine"


@pytest.fixture(scope="module")
def state():
    return scan(TREE).state


def _evaluate(state, source: str, sm: int = 120):
    node = ast.parse(source, mode="eval").body
    return state.interpreter(sm).evaluate(node, "fakeengine.attention")


def test_a_failing_operation_on_source_values_says_why(state):
    value, _ = _evaluate(state, "(1 // 0) > 2")
    assert isinstance(value, Unknown)
    assert value.labels == frozenset({"1 // 0"})
    left, _ = _evaluate(state, "1 // 0")
    assert left.why.startswith("ZeroDivisionError")
    too_big, _ = _evaluate(state, "2 ** 4096")
    assert too_big.why == "OverflowError: exponent too large to evaluate from source"


def test_a_failing_builtin_says_why(state):
    value, _ = _evaluate(state, "int('x')")
    assert isinstance(value, Unknown) and value.why.startswith("ValueError: invalid literal")


def test_an_operation_error_inside_the_operator_table_is_recorded_with_its_reason(state, monkeypatch):
    def broken(op, a, b):
        raise KeyError("planted in the operator table")

    monkeypatch.setattr(operators, "binary", broken)
    value, _ = _evaluate(state, "3 + 4")
    assert isinstance(value, Unknown) and value.why == "KeyError: 'planted in the operator table'"


def test_a_bug_in_a_handler_propagates_out_of_the_evaluation(state, monkeypatch):
    def buggy(self, node, frame):
        raise RuntimeError("planted interpreter bug")

    monkeypatch.setattr(Expressions, "ev_BinOp", buggy)
    with pytest.raises(RuntimeError, match="planted interpreter bug"):
        _evaluate(state, "3 + 4")


def test_a_bug_in_a_handler_propagates_out_of_the_scan(monkeypatch):
    def buggy(self, node, frame):
        raise AssertionError("planted interpreter bug")

    monkeypatch.setattr(Expressions, "ev_Compare", buggy)
    with pytest.raises(AssertionError, match="planted interpreter bug"):
        scan(TREE, workers=1)
