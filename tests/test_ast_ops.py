"""The operator table both static evaluators share: Python's own results, and no huge value built
from one line of source."""

from __future__ import annotations

import ast

import pytest

from tools import ast_ops


def _op(expr: str):
    node = ast.parse(expr, mode="eval").body
    return node.op if not isinstance(node, ast.Compare) else node.ops[0]


@pytest.mark.parametrize("expr", ["7 + 3", "7 - 3", "7 * 3", "7 / 2", "7 // 2", "7 % 3", "2 ** 10", "1 << 5", "96 >> 2",
                                  "6 & 3", "6 | 3", "6 ^ 3", "'ab' * 3", "(1, 2) + (3,)", "-7 // 2", "2.0 ** -2"])
def test_binary_matches_python(expr):
    node = ast.parse(expr, mode="eval").body
    assert ast_ops.binary(node.op, ast.literal_eval(node.left), ast.literal_eval(node.right)) == eval(expr)


@pytest.mark.parametrize("expr", ["1 == 1", "1 != 1", "1 < 2", "2 <= 1", "3 > 2", "2 >= 3", "None is None", "1 is not None",
                                  "2 in (1, 2)", "'a' not in 'abc'"])
def test_compare_matches_python(expr):
    node = ast.parse(expr, mode="eval").body
    left, right = ast.literal_eval(node.left), ast.literal_eval(node.comparators[0])
    assert ast_ops.compare(node.ops[0], left, right) is eval(expr)


@pytest.mark.parametrize("expr", ["-5", "+5", "not 0", "~5"])
def test_unary_matches_python(expr):
    node = ast.parse(expr, mode="eval").body
    assert ast_ops.unary(node.op, ast.literal_eval(node.operand)) == eval(expr)


@pytest.mark.parametrize("expr, left, right", [
    ("a ** b", 2, 10**9), ("a << b", 1, 10**9), ("a * b", "x", 10**9), ("a * b", 10**9, (0,)), ("a + b", 1 << 5000, 1),
    ("a + b", "x" * 6000, "y" * 6000),
])
def test_values_too_large_to_build_raise(expr, left, right):
    # refused before computing: without the guards these build gigabytes (or never finish)
    with pytest.raises(OverflowError):
        ast_ops.binary(_op(expr), left, right)


def test_operators_outside_the_table_raise_type_error():
    with pytest.raises(TypeError, match="MatMult"):
        ast_ops.binary(_op("a @ b"), 1, 2)
