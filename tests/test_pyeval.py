"""The core both static evaluators share (tools/pyeval): the operator table gives Python's own
results and builds no huge value from one line of source; the syntax helpers, the binding walks and
the Unknown record behave as their contracts say."""

from __future__ import annotations

import ast

import pytest

from tools.pyeval import binding, builtins, operators, syntax
from tools.pyeval.values import Unknown


def _op(expr: str):
    node = ast.parse(expr, mode="eval").body
    return node.op if not isinstance(node, ast.Compare) else node.ops[0]


@pytest.mark.parametrize("expr", ["7 + 3", "7 - 3", "7 * 3", "7 / 2", "7 // 2", "7 % 3", "2 ** 10", "1 << 5", "96 >> 2",
                                  "6 & 3", "6 | 3", "6 ^ 3", "'ab' * 3", "(1, 2) + (3,)", "-7 // 2", "2.0 ** -2"])
def test_binary_matches_python(expr):
    node = ast.parse(expr, mode="eval").body
    assert operators.binary(node.op, ast.literal_eval(node.left), ast.literal_eval(node.right)) == eval(expr)


@pytest.mark.parametrize("expr", ["1 == 1", "1 != 1", "1 < 2", "2 <= 1", "3 > 2", "2 >= 3", "None is None", "1 is not None",
                                  "2 in (1, 2)", "'a' not in 'abc'"])
def test_compare_matches_python(expr):
    node = ast.parse(expr, mode="eval").body
    left, right = ast.literal_eval(node.left), ast.literal_eval(node.comparators[0])
    assert operators.compare(node.ops[0], left, right) is eval(expr)


@pytest.mark.parametrize("expr", ["-5", "+5", "not 0", "~5"])
def test_unary_matches_python(expr):
    node = ast.parse(expr, mode="eval").body
    assert operators.unary(node.op, ast.literal_eval(node.operand)) == eval(expr)


@pytest.mark.parametrize("expr, left, right", [
    ("a ** b", 2, 10**9), ("a << b", 1, 10**9), ("a * b", "x", 10**9), ("a * b", 10**9, (0,)), ("a + b", 1 << 5000, 1),
    ("a + b", "x" * 6000, "y" * 6000),
])
def test_values_too_large_to_build_raise(expr, left, right):
    # refused before computing: without the guards these build gigabytes (or never finish)
    with pytest.raises(OverflowError):
        operators.binary(_op(expr), left, right)


def test_operators_outside_the_table_raise_type_error():
    with pytest.raises(TypeError, match="MatMult"):
        operators.binary(_op("a @ b"), 1, 2)


def test_operation_errors_cover_what_operands_raise():
    for expr, left, right in [("a / b", 1, 0), ("a + b", "x", 1), ("a << b", 1, -1), ("a ** b", 2, 10**9)]:
        with pytest.raises(operators.OPERATION_ERRORS):
            operators.binary(_op(expr), left, right)


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def test_dotted_name():
    assert syntax.dotted_name(_expr("a.b.c")) == "a.b.c"
    assert syntax.dotted_name(_expr("f().g")) is None
    assert syntax.dotted_name(_expr("f().g"), through_calls=True) == "f().g"
    assert syntax.dotted_name(_expr("x[0].y")) is None


def test_bound_names_and_targets():
    stmt = ast.parse("a, (b, *c), d.e, f[0] = v").body[0]
    assert [n for t in syntax.assign_targets(stmt) for n in syntax.bound_names(t)] == ["a", "b", "c"]
    aug = ast.parse("x += 1").body[0]
    assert syntax.assign_targets(aug) == [aug.target]
    imp = ast.parse("import a.b, c.d as e").body[0]
    assert syntax.import_bindings(imp) == [("a", "a"), ("e", "c.d")]


def test_walk_no_defs_stays_out_of_definitions():
    tree = ast.parse("x = 1\ndef f():\n    y = 2\nz = lambda: w")
    names = {n.id for n in syntax.walk_no_defs(tree) if isinstance(n, ast.Name)}
    assert names == {"x", "z"}


def test_bind_target_with_python_unpacking():
    store: dict = {}
    target = ast.parse("a, *b, c = v").body[0].targets[0]
    binding.bind_target(target, (1, 2, 3, 4), store.__setitem__, lambda t, v: binding.split_sequence(t, v))
    assert store == {"a": 1, "b": [2, 3], "c": 4}
    assert binding.split_sequence(ast.parse("a, b = v").body[0].targets[0], (1, 2, 3)) is None


def test_bind_parameters_like_python():
    spec = ast.parse("def f(a, b=2, *rest, k, m=5, **kw): pass").body[0].args
    bound, rest, left = binding.bind_parameters(
        spec, [1, 7, 8], {"k": 3, "z": 9}, default=lambda node: ast.literal_eval(node), missing=lambda p, kw: None
    )
    assert bound == {"a": 1, "b": 7, "k": 3, "m": 5}
    assert rest == (8,) and left == {"z": 9}
    bound, _, _ = binding.bind_parameters(spec, [], {}, default=ast.literal_eval, missing=lambda p, kw: ("missing", p.arg, kw))
    assert bound["a"] == ("missing", "a", False) and bound["k"] == ("missing", "k", True) and bound["b"] == 2


def test_comprehension_values():
    node = _expr("[x * y for x in (1, 2) if x for y in (10, 20)]")
    env = {}
    out = binding.comprehension_values(
        node, env,
        items=lambda it, s: eval(compile(ast.Expression(it), "<t>", "eval"), {}, dict(s)),
        child=dict,
        bind=lambda t, item, s: s.__setitem__(t.id, item),
        keep=lambda cond, s: bool(eval(compile(ast.Expression(cond), "<t>", "eval"), {}, dict(s))),
        value=lambda elt, s: eval(compile(ast.Expression(elt), "<t>", "eval"), {}, dict(s)),
    )
    assert out == [10, 20, 20, 40]
    unknown_iterable = binding.comprehension_values(
        node, env, items=lambda it, s: None, child=dict, bind=None, keep=None, value=None
    )
    assert unknown_iterable is None


def test_unknown_reason_is_not_part_of_its_identity():
    a = Unknown("x", "not defined")
    b = Unknown("x", "ZeroDivisionError: division by zero")
    assert a == b and hash(a) == hash(b)
    assert a.because("other").why == "other" and a.because("other") == a
    assert repr(a) == "Unknown('x': not defined)"
    composite = Unknown(why="one of 13 values", labels=frozenset({"p"}))
    assert repr(composite) == "Unknown(labels=frozenset({'p'}), arch=False, truth=None, not_none=False)"
    assert Unknown(labels=frozenset({"p"})).with_truth(True).not_none


def test_bounded_range():
    assert builtins.PURE["range"](3) == (0, 1, 2)
    with pytest.raises(ValueError):
        builtins.bounded_range(10**9)
