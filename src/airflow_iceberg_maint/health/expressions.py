"""The ``trigger`` and ``score`` expressions of a policy: a small language parsed here, never ``eval``.

Grammar (docs/health.md, "Triggers")::

    expr       := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | comparison
    comparison := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
    sum        := product (("+" | "-") product)*
    product    := unary ("*" unary)*
    unary      := "-" unary | atom
    atom       := NUMBER [UNIT] | NAME | "(" expr ")"

Every node has a type, checked when parsing: ``and``, ``or`` and ``not`` take truth values,
comparisons and arithmetic take numbers. A trigger must be a truth value and a score a number, so
an expression that parses always evaluates (a name's value is a number). Units are sizes: ``B``,
``KB``/``MB``/``GB``/``TB`` (powers of 1000) and ``KiB``/``MiB``/``GiB``/``TiB`` (of 1024), any case.
Anything else is an ``ExpressionError`` naming the expression, what was expected and where.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from airflow_iceberg_maint.errors import InvalidInputError

NUMBER, BOOLEAN = "number", "truth value"
MAX_LENGTH = 2000  # characters of one expression
MAX_DEPTH = 32  # nested parentheses, "not" and unary minus

UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
COMPARISONS = ("<=", ">=", "==", "!=", "<", ">")
KEYWORDS = frozenset({"and", "or", "not"})
_TOKEN = re.compile(
    r"\s*(?:(?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op><=|>=|==|!=|<|>|\(|\)|\+|-|\*))"
)


class ExpressionError(InvalidInputError):
    """A trigger or score expression outside the grammar, or naming an unknown value."""


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class Negative:
    operand: Node


@dataclass(frozen=True)
class Chain:
    """``first op1 x1 op2 x2 ...`` evaluated left to right: and/or, or + - * (n-ary, so no deep recursion)."""

    first: Node
    rest: tuple[tuple[str, Node], ...]


@dataclass(frozen=True)
class Compare:
    op: str
    left: Node
    right: Node


Node = Number | Name | Not | Negative | Chain | Compare


@dataclass(frozen=True)
class Token:
    kind: str  # number, name, op, end
    text: str
    column: int  # 1-based


def _tokens(text: str, fail: _Fail) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.lastgroup is None:
            column = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            fail(f"unexpected character {text[column - 1]!r}", column)
            break  # not reached: fail raises
        kind = match.lastgroup
        tokens.append(Token(kind, match.group(kind), match.start(kind) + 1))
        pos = match.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


class _Fail:
    def __init__(self, what: str, text: str) -> None:
        self.what, self.text = what, text

    def __call__(self, problem: str, column: int) -> None:
        raise ExpressionError(f"{self.what} {self.text!r}: {problem} at column {column}")


@dataclass(frozen=True)
class Expression:
    """A parsed expression: its text, its tree and its type (``NUMBER`` or ``BOOLEAN``)."""

    text: str
    tree: Node
    type: str

    @property
    def names(self) -> frozenset[str]:
        return _names(self.tree)

    def evaluate(self, values: Mapping[str, float]) -> float | bool:
        return evaluate(self.tree, values)


class _Parser:
    def __init__(self, text: str, names: Collection[str], fail: _Fail) -> None:
        self.fail, self.names = fail, names
        self.tokens = _tokens(text, fail)
        self.pos = 0
        self.depth = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.pos]

    def take(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def at(self, *texts: str) -> bool:
        return self.token.kind in ("op", "name") and self.token.text in texts

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"nested more than {MAX_DEPTH} deep", self.token.column)

    def expect(self, node: tuple[Node, str], wanted: str, column: int, what: str) -> Node:
        if node[1] != wanted:
            self.fail(f"{what} needs a {wanted}, got a {node[1]}", column)
        return node[0]

    def chain(self, ops: tuple[str, ...], operand: str, part: str) -> tuple[Node, str]:
        column = self.token.column
        first: tuple[Node, str] = getattr(self, part)()
        if not self.at(*ops):
            return first
        rest: list[tuple[str, Node]] = []
        head = self.expect(first, operand, column, f"{self.token.text!r}")
        while self.at(*ops):
            op = self.take().text
            column = self.token.column
            rest.append((op, self.expect(getattr(self, part)(), operand, column, f"{op!r}")))
        return Chain(head, tuple(rest)), operand

    def or_expr(self) -> tuple[Node, str]:
        return self.chain(("or",), BOOLEAN, "and_expr")

    def and_expr(self) -> tuple[Node, str]:
        return self.chain(("and",), BOOLEAN, "not_expr")

    def not_expr(self) -> tuple[Node, str]:
        return self.prefixed("not", BOOLEAN, self.not_expr, Not) if self.at("not") else self.comparison()

    def prefixed(self, op: str, wanted: str, operand: Callable[[], tuple[Node, str]], build: type) -> tuple[Node, str]:
        """``op`` (taken here) applied to what ``operand`` parses, which must be of type ``wanted``."""
        self.take()
        self.deeper()
        column = self.token.column
        node = build(self.expect(operand(), wanted, column, repr(op)))
        self.depth -= 1
        return node, wanted

    def comparison(self) -> tuple[Node, str]:
        column = self.token.column
        left = self.sum()
        if not self.at(*COMPARISONS):
            return left
        op = self.take().text
        right_column = self.token.column
        right = self.sum()
        node = Compare(
            op,
            self.expect(left, NUMBER, column, f"{op!r}"),
            self.expect(right, NUMBER, right_column, f"{op!r}"),
        )
        if self.at(*COMPARISONS):
            self.fail("comparisons cannot be chained (use 'and')", self.token.column)
        return node, BOOLEAN

    def sum(self) -> tuple[Node, str]:
        return self.chain(("+", "-"), NUMBER, "product")

    def product(self) -> tuple[Node, str]:
        return self.chain(("*",), NUMBER, "unary")

    def unary(self) -> tuple[Node, str]:
        return self.prefixed("-", NUMBER, self.unary, Negative) if self.at("-") else self.atom()

    def atom(self) -> tuple[Node, str]:
        token = self.take()
        if token.kind == "number":
            value = float(token.text)
            if self.token.kind == "name" and self.token.text.lower() in UNITS:
                value *= UNITS[self.take().text.lower()]
            if not math.isfinite(value):
                self.fail(f"number {token.text} is too large", token.column)
            return Number(value), NUMBER
        if token.kind == "name" and token.text not in KEYWORDS:
            if token.text not in self.names:
                known = ", ".join(sorted(self.names))
                self.fail(f"unknown name {token.text!r} (known: {known})", token.column)
            return Name(token.text), NUMBER
        if token.text == "(" and token.kind == "op":
            self.deeper()
            inner = self.or_expr()
            if not self.at(")"):
                self.fail(f"expected ')' {_found(self.token)}", self.token.column)
            self.take()
            self.depth -= 1
            return inner
        self.fail(f"expected a number, a name or '(' {_found(token)}", token.column)
        raise AssertionError  # not reached


def _found(token: Token) -> str:
    return "at the end" if token.kind == "end" else f"but found {token.text!r}"


def parse(text: object, names: Collection[str], *, what: str = "trigger", type_: str = BOOLEAN) -> Expression:
    """Parse ``text`` over the value ``names``; it must be of ``type_``. Raises ``ExpressionError`` only."""
    if not isinstance(text, str):
        raise ExpressionError(f"{what}: expected an expression as a string, got {text!r}")
    fail = _Fail(what, text)
    if not text.strip():
        fail("is empty", 1)
    if len(text) > MAX_LENGTH:
        fail(f"is longer than {MAX_LENGTH} characters", MAX_LENGTH + 1)
    parser = _Parser(text, names, fail)
    tree, kind = parser.or_expr()
    if parser.token.kind != "end":
        fail(f"unexpected {parser.token.text!r}", parser.token.column)
    if kind != type_:
        fail(f"must be a {type_} ({'a comparison' if type_ == BOOLEAN else 'not a comparison'}), got a {kind}", 1)
    return Expression(text, tree, kind)


_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def evaluate(node: Node, values: Mapping[str, float]) -> float | bool:
    """The value of a parsed tree; ``values`` holds every name it uses."""
    if isinstance(node, Number):
        return node.value
    if isinstance(node, Name):
        return float(values[node.name])
    if isinstance(node, Not):
        return not evaluate(node.operand, values)
    if isinstance(node, Negative):
        return -evaluate(node.operand, values)
    if isinstance(node, Compare):
        return bool(_COMPARE[node.op](evaluate(node.left, values), evaluate(node.right, values)))
    result = evaluate(node.first, values)
    for op, operand in node.rest:
        if op == "or":
            result = bool(result) or bool(evaluate(operand, values))
        elif op == "and":
            result = bool(result) and bool(evaluate(operand, values))
        elif op == "+":
            result = result + evaluate(operand, values)
        elif op == "-":
            result = result - evaluate(operand, values)
        else:
            result = result * evaluate(operand, values)
    return result


def _names(node: Node) -> frozenset[str]:
    if isinstance(node, Name):
        return frozenset({node.name})
    if isinstance(node, Not | Negative):
        return _names(node.operand)
    if isinstance(node, Compare):
        return _names(node.left) | _names(node.right)
    if isinstance(node, Chain):
        return _names(node.first).union(*(_names(n) for _, n in node.rest))
    return frozenset()
