"""The trigger and score language: anything outside the grammar is one ``ExpressionError`` (never another
exception, never evaluated), and what parses evaluates as a reference evaluator of the same tree says."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_iceberg_maint.health.expressions import BOOLEAN, MAX_DEPTH, NUMBER, ExpressionError, parse
from airflow_iceberg_maint.health.names import EXPRESSION_NAMES

NAMES = ("small_files", "expirable_bytes", "score", "days_since_last_run")
#: Characters and words of the grammar, so random text reaches deep into the parser, and some that are not.
PIECES = [
    *NAMES,
    "and",
    "or",
    "not",
    "(",
    ")",
    "<",
    "<=",
    ">",
    ">=",
    "==",
    "!=",
    "+",
    "-",
    "*",
    "/",
    "1",
    "2.5",
    "1e3",
    "GiB",
    "MB",
    " ",
    "x",
    "__import__",
    "'",
    ".",
    ",",
    "=",
    "\n",
    "é",
    "True",
    "1e999",
]


def _refuses_or_parses(text: str) -> None:
    for type_ in (BOOLEAN, NUMBER):
        try:
            expression = parse(text, NAMES, type_=type_)
        except ExpressionError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith("trigger ")
        else:
            value = expression.evaluate(dict.fromkeys(NAMES, 1.0))
            assert isinstance(value, bool) if type_ == BOOLEAN else isinstance(value, float)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_random_text_parses_or_is_refused_with_the_typed_error(text: str) -> None:
    _refuses_or_parses(text)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=25))
def test_random_token_sequences_parse_or_are_refused_with_the_typed_error(pieces: list[str]) -> None:
    _refuses_or_parses(" ".join(pieces))
    _refuses_or_parses("".join(pieces))


# A reference: trees built here, rendered to text, and evaluated here with Python's own operators.


@dataclass(frozen=True)
class Ref:
    op: str  # num, name, not, neg, or a binary operator
    args: tuple[object, ...]


_PRECEDENCE = {"or": 1, "and": 2, "not": 3, "+": 5, "-": 5, "*": 6, "neg": 7, "num": 8, "name": 8}
for _op in ("<", "<=", ">", ">=", "==", "!="):
    _PRECEDENCE[_op] = 4
_UNITS = {"": 1, " KiB": 1024, " MB": 10**6, " GiB": 2**30}


def render(node: Ref, minimal: bool) -> str:
    mine = _PRECEDENCE[node.op]

    def sub(child: object, strict: bool) -> str:
        assert isinstance(child, Ref)
        text = render(child, minimal)
        theirs = _PRECEDENCE[child.op]
        wrap = not minimal or theirs < mine or (strict and theirs == mine)
        return f"({text})" if wrap and theirs < 8 else text

    if node.op == "num":
        value, unit = node.args
        return f"{value}{unit}"
    if node.op == "name":
        return str(node.args[0])
    if node.op == "not":
        return f"not {sub(node.args[0], False)}"
    if node.op == "neg":
        return f"-{sub(node.args[0], False)}"
    left, right = node.args
    return f"{sub(left, False)} {node.op} {sub(right, True)}"


def _children(node: Ref) -> list[Ref]:
    children = [x for x in node.args if isinstance(x, Ref)]
    assert len(children) == len(node.args), node
    return children


def reference(node: Ref, values: dict[str, float]) -> float | bool:
    op, a = node.op, node.args
    if op == "num":
        value = a[0]
        assert isinstance(value, int | str), node
        return float(value) * _UNITS[str(a[1])]
    if op == "name":
        return values[str(a[0])]
    if op == "not":
        return not reference(_children(node)[0], values)
    if op == "neg":
        return -reference(_children(node)[0], values)
    left, right = (reference(x, values) for x in _children(node))
    table = {
        "or": lambda x, y: bool(x) or bool(y),
        "and": lambda x, y: bool(x) and bool(y),
        "+": lambda x, y: x + y,
        "-": lambda x, y: x - y,
        "*": lambda x, y: x * y,
        "<": lambda x, y: x < y,
        "<=": lambda x, y: x <= y,
        ">": lambda x, y: x > y,
        ">=": lambda x, y: x >= y,
        "==": lambda x, y: x == y,
        "!=": lambda x, y: x != y,
    }
    return table[op](left, right)


numbers = st.recursive(
    st.one_of(
        st.builds(lambda v, u: Ref("num", (v, u)), st.integers(0, 1000), st.sampled_from(list(_UNITS))),
        st.builds(lambda v: Ref("num", (v, "")), st.sampled_from(["0.5", "2.25", "1e3", "7"])),
        st.builds(lambda n: Ref("name", (n,)), st.sampled_from(NAMES)),
    ),
    lambda inner: st.one_of(
        st.builds(lambda x: Ref("neg", (x,)), inner),
        st.builds(lambda op, x, y: Ref(op, (x, y)), st.sampled_from(["+", "-", "*"]), inner, inner),
    ),
    max_leaves=8,
)
comparisons = st.builds(
    lambda op, x, y: Ref(op, (x, y)), st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), numbers, numbers
)
truths = st.recursive(
    comparisons,
    lambda inner: st.one_of(
        st.builds(lambda x: Ref("not", (x,)), inner),
        st.builds(lambda op, x, y: Ref(op, (x, y)), st.sampled_from(["and", "or"]), inner, inner),
    ),
    max_leaves=6,
)
values = st.fixed_dictionaries({n: st.integers(-(10**12), 10**12).map(float) for n in NAMES})


@settings(max_examples=400, deadline=None)
@given(truths, values, st.booleans())
def test_triggers_evaluate_as_the_reference_says(tree: Ref, named: dict[str, float], minimal: bool) -> None:
    text = render(tree, minimal)
    assert parse(text, NAMES).evaluate(named) == reference(tree, named), text


@settings(max_examples=300, deadline=None)
@given(numbers, values, st.booleans())
def test_scores_evaluate_as_the_reference_says(tree: Ref, named: dict[str, float], minimal: bool) -> None:
    text = render(tree, minimal)
    got, expected = parse(text, NAMES, type_=NUMBER).evaluate(named), reference(tree, named)
    assert got == expected or (math.isnan(got) and math.isnan(expected)), text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("expirable_bytes > 10 GiB or days_since_last_run >= 7", True),
        ("expirable_bytes > 10 gib", False),
        ("small_files > 100 and days_since_last_run >= 1", False),
        ("not small_files > 100 and score < 50", True),  # not binds tighter than and
        ("2 + 3 * 4 == 14", True),
        ("-small_files < 0", True),
        ("500 MB == 500000000", True),
        ("1 KiB == 1024 and 1 TB == 1000000000000", True),
    ],
)
def test_examples(text: str, value: bool) -> None:
    named = {"expirable_bytes": 10 * 2**30 - 1, "days_since_last_run": 8.0, "small_files": 5.0, "score": 40.0}
    assert parse(text, NAMES).evaluate(named) is value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("small_filez > 3", "unknown name 'small_filez' (known: days_since_last_run, expirable_bytes, score, small_f"),
        ("__import__('os').system('x') > 1", 'unexpected character "\'" at column 12'),
        ("__import__ > 1", "unknown name '__import__'"),
        ("score >", "expected a number, a name or '(' at the end at column 8"),
        ("score > 1 > 0", "comparisons cannot be chained (use 'and') at column 11"),
        ("score and 1", "'and' needs a truth value, got a number at column 1"),
        ("not score", "'not' needs a truth value, got a number at column 5"),
        ("(score > 1) + 2 > 0", "'+' needs a number, got a truth value at column 1"),
        ("score", "must be a truth value (a comparison), got a number at column 1"),
        ("score > 1;", "unexpected character ';' at column 10"),
        ("score / 2 > 1", "unexpected character '/' at column 7"),
        ("(score > 1", "expected ')' at the end at column 11"),
        ("  ", "is empty at column 1"),
        ("1e999 > score", "number 1e999 is too large at column 1"),
        ("(" * (MAX_DEPTH + 1) + "score > 1" + ")" * (MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} deep"),
    ],
)
def test_refusals_name_the_expression_what_was_expected_and_where(text: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        parse(text, NAMES)
    assert str(caught.value).startswith(f"trigger {text!r}: ") and message in str(caught.value)


def test_a_long_chain_evaluates_without_deep_recursion() -> None:
    text = " + ".join(["1"] * 450) + " > 449"  # 1,800 characters, under the limit of 2,000
    assert parse(text, NAMES).evaluate({}) is True


def test_the_policy_vocabulary_is_the_health_keys_and_the_clocks() -> None:
    assert {"small_files", "expirable_bytes", "score", "days_since_last_run", "days_since_last_expiry"} <= (
        EXPRESSION_NAMES
    )
    assert parse("delete_files > 0 and metadata_files > 100", EXPRESSION_NAMES).names == {
        "delete_files",
        "metadata_files",
    }
