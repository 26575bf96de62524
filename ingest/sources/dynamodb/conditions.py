"""DynamoDB condition expressions, parsed and evaluated on items as the service does (pure).

A DynamoDB table's row filter is a condition expression (the language of a Scan's FilterExpression): the
snapshot hands it to Scan, so DynamoDB itself filters; a change batch evaluates it here, on the stream
record's images in their typed form (`{"S": ...}`, `{"N": ...}`), with the service's rules: a comparison
needs operands of one type (N by value, S by UTF-8 bytes, B by bytes) and is false otherwise or when an
attribute is missing, but `<>` is true for operands of different types and for a missing attribute. ingest_tests compares this with
DynamoDB Local's Scan over random items.

Grammar (AWS's "Condition and filter expressions"): comparisons `= <> < <= > >=`, `BETWEEN .. AND ..`,
`IN (..)`, the functions attribute_exists, attribute_not_exists, attribute_type, begins_with, contains and
size, `NOT`, `AND`, `OR` (in that order of precedence) and parentheses; operands are attribute paths
(names, `#placeholders`, `.member`, `[index]`), `:values` and size(path).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

Typed = Mapping[str, Any]
"""A value in DynamoDB's typed form: {"S": "x"}, {"N": "1.5"}, {"M": {...}}, ..."""


class ConditionError(ValueError):
    pass


_TOKEN = re.compile(r"\s*(?:(<>|<=|>=|[=<>(),.\[\]])|(:[A-Za-z0-9_]+)|(#[A-Za-z0-9_]+)|(\d+)|([A-Za-z_][A-Za-z0-9_]*))")
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN"}
_FUNCTIONS = {"attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains", "size"}
_COMPARATORS = {"=", "<>", "<", "<=", ">", ">="}


@dataclass(frozen=True)
class Path:
    parts: tuple  # str member names and int list indexes


@dataclass(frozen=True)
class Value:
    name: str


@dataclass(frozen=True)
class Size:
    path: Path


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple


def tokens(text: str) -> list[str]:
    out, at = [], 0
    while at < len(text):
        m = _TOKEN.match(text, at)
        if not m or m.end() == at:
            if text[at:].strip() == "":
                break
            raise ConditionError(f"cannot read the expression at {text[at:at + 20]!r}")
        out.append(next(g for g in m.groups() if g is not None))
        at = m.end()
    return out


class _Parser:
    def __init__(self, text: str, names: Mapping[str, str], values: Mapping[str, Typed]) -> None:
        self.toks, self.i, self.names, self.values = tokens(text), 0, names, values

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok.upper() != want):
            raise ConditionError(f"expected {want or 'more'} but found {tok or 'the end'}")
        self.i += 1
        return tok

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.upper() == word:
            self.i += 1
            return True
        return False

    def parse(self) -> Node:
        node = self.disjunction()
        if self.peek() is not None:
            raise ConditionError(f"unexpected {self.peek()!r}")
        return node

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.keyword("OR"):
            node = Node("OR", (node, self.conjunction()))
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.keyword("AND"):
            node = Node("AND", (node, self.negation()))
        return node

    def negation(self) -> Node:
        if self.keyword("NOT"):
            return Node("NOT", (self.negation(),))
        return self.primary()

    def primary(self) -> Node:
        if self.peek() == "(":
            self.take()
            node = self.disjunction()
            self.take(")")
            return node
        tok = self.peek()
        if tok in _FUNCTIONS and tok != "size":
            self.take()
            args = self.operands()
            want = {"attribute_exists": 1, "attribute_not_exists": 1}.get(tok, 2)
            if len(args) != want or not isinstance(args[0], Path):
                raise ConditionError(f"{tok} takes an attribute path{' and an operand' if want == 2 else ''}")
            return Node(tok, tuple(args))
        left = self.operand()
        if self.keyword("BETWEEN"):
            low = self.operand()
            self.take("AND")
            return Node("BETWEEN", (left, low, self.operand()))
        if self.keyword("IN"):
            return Node("IN", (left, *self.operands()))
        op = self.take()
        if op not in _COMPARATORS:
            raise ConditionError(f"expected a comparison after an operand, found {op!r}")
        return Node(op, (left, self.operand()))

    def operands(self) -> list:
        """`( operand, operand ... )`: a function's arguments, IN's list."""
        self.take("(")
        out = [self.operand()]
        while self.peek() == ",":
            self.take()
            out.append(self.operand())
        self.take(")")
        return out

    def operand(self):
        tok = self.take()
        if tok.startswith(":"):
            if tok not in self.values:
                raise ConditionError(f"value {tok} is not defined (values)")
            return Value(tok)
        if tok == "size":
            self.take("(")
            path = self.operand()
            self.take(")")
            if not isinstance(path, Path):
                raise ConditionError("size takes an attribute path")
            return Size(path)
        if tok.upper() in _KEYWORDS or tok in _FUNCTIONS or not (tok.startswith("#") or tok[0].isalpha() or tok[0] == "_"):
            raise ConditionError(f"expected an attribute or a :value, found {tok!r}")
        parts: list = [self.name(tok)]
        while self.peek() in (".", "["):
            if self.take() == ".":
                parts.append(self.name(self.take()))
            else:
                index = self.take()
                if not index.isdigit():
                    raise ConditionError(f"a list index is a number, not {index!r}")
                parts.append(int(index))
                self.take("]")
        return Path(tuple(parts))

    def name(self, tok: str) -> str:
        if tok.startswith("#"):
            if tok not in self.names:
                raise ConditionError(f"name {tok} is not defined (names)")
            return self.names[tok]
        return tok


@dataclass(frozen=True)
class Condition:
    """A parsed condition expression with its names and values, evaluable on typed items."""

    expression: str
    names: Mapping[str, str]
    values: Mapping[str, Typed]
    tree: Node

    @classmethod
    def parse(cls, expression: str, names: Mapping[str, str], values: Mapping[str, Typed]) -> Condition:
        return cls(expression, dict(names), dict(values), _Parser(expression, names, values).parse())

    def holds(self, item: Mapping[str, Typed]) -> bool:
        return _holds(self.tree, item, self.values)


def _resolve(operand, item: Mapping[str, Typed], values: Mapping[str, Typed]) -> Typed | None:
    if isinstance(operand, Value):
        return values[operand.name]
    if isinstance(operand, Size):
        value = _resolve(operand.path, item, values)
        n = _size(value)
        return None if n is None else {"N": str(n)}
    current: Any = {"M": item}
    for part in operand.parts:
        if isinstance(part, int):
            if not current or "L" not in current or part >= len(current["L"]):
                return None
            current = current["L"][part]
        else:
            if not current or "M" not in current or part not in current["M"]:
                return None
            current = current["M"][part]
    return current


def _size(value: Typed | None) -> int | None:
    if value is None:
        return None
    (kind, v), = value.items()
    if kind == "S":  # in UTF-16 code units, as DynamoDB Local counts (a character outside the BMP is two)
        return len(v.encode("utf-16-le")) // 2
    if kind in ("B", "SS", "NS", "BS", "L", "M"):
        return len(v)
    return None


def _scalar(value: Typed) -> tuple[str, Any]:
    (kind, v), = value.items()
    if kind == "N":
        return kind, Decimal(v)
    if kind == "S":
        return kind, v.encode("utf-8")
    if kind == "B":
        return kind, bytes(v)
    return kind, v


def _equal(a: Typed, b: Typed) -> bool:
    (ka, va), = a.items()
    (kb, vb), = b.items()
    if ka != kb:
        return False
    if ka in ("N", "S", "B"):
        return _scalar(a) == _scalar(b)
    if ka == "NS":
        return {Decimal(x) for x in va} == {Decimal(x) for x in vb}
    if ka in ("SS", "BS"):
        return {bytes(x) if ka == "BS" else x for x in va} == {bytes(x) if ka == "BS" else x for x in vb}
    if ka == "L":
        return len(va) == len(vb) and all(_equal(x, y) for x, y in zip(va, vb))
    if ka == "M":
        return va.keys() == vb.keys() and all(_equal(va[k], vb[k]) for k in va)
    return va == vb


def _compare(op: str, a: Typed | None, b: Typed | None) -> bool:
    if a is None or b is None:
        return op == "<>"  # a missing attribute is unequal to anything, and neither less nor more
    if op == "=":
        return _equal(a, b)
    if op == "<>":
        return not _equal(a, b)
    (ka, va), (kb, vb) = _scalar(a), _scalar(b)
    if ka != kb or ka not in ("N", "S", "B"):
        return False
    return {"<": va < vb, "<=": va <= vb, ">": va > vb, ">=": va >= vb}[op]


def _holds(node: Node, item: Mapping[str, Typed], values: Mapping[str, Typed]) -> bool:
    op, args = node.op, node.args
    if op == "AND":
        return _holds(args[0], item, values) and _holds(args[1], item, values)
    if op == "OR":
        return _holds(args[0], item, values) or _holds(args[1], item, values)
    if op == "NOT":
        return not _holds(args[0], item, values)
    got = [_resolve(a, item, values) for a in args]
    if op in _COMPARATORS:
        return _compare(op, got[0], got[1])
    if op == "BETWEEN":
        return _compare(">=", got[0], got[1]) and _compare("<=", got[0], got[2])
    if op == "IN":
        return got[0] is not None and any(o is not None and _equal(got[0], o) for o in got[1:])
    if op == "attribute_exists":
        return got[0] is not None
    if op == "attribute_not_exists":
        return got[0] is None
    if op == "attribute_type":
        return got[0] is not None and got[1] is not None and "S" in got[1] and next(iter(got[0])) == got[1]["S"]
    if got[0] is None or got[1] is None:
        return False
    (kind, v), = got[0].items()
    (okind, ov), = got[1].items()
    if op == "begins_with":
        return kind == okind and kind in ("S", "B") and _scalar(got[0])[1].startswith(_scalar(got[1])[1])
    if op == "contains":
        if kind == "S":
            return okind == "S" and ov in v
        if kind in ("SS", "NS", "BS"):
            element = {"SS": "S", "NS": "N", "BS": "B"}[kind]
            return okind == element and any(_equal({element: x}, got[1]) for x in v)
        if kind == "L":
            return any(_equal(x, got[1]) for x in v)
        return False
    raise ConditionError(f"unknown operator {op}")  # pragma: no cover - the parser makes no other


_TYPE_CODES = {"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"}


def typed_value(value: Any) -> Typed:
    """A value of the sources file in DynamoDB's typed form: text S, numbers N, booleans BOOL, null NULL,
    lists L, mappings M; a mapping of one type code is that value as written (`{SS: [a, b]}`, `{B: <base64>}`)."""
    import base64

    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _TYPE_CODES:
        (kind, v), = value.items()
        if kind == "B":
            return {"B": base64.b64decode(v)}
        if kind == "BS":
            return {"BS": [base64.b64decode(x) for x in v]}
        if kind in ("N", "S"):
            return {kind: str(v)}
        if kind == "NS":
            return {"NS": [str(x) for x in v]}
        return {kind: v}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, float, Decimal)):
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if value is None:
        return {"NULL": True}
    if isinstance(value, list):
        return {"L": [typed_value(v) for v in value]}
    if isinstance(value, dict):
        return {"M": {k: typed_value(v) for k, v in value.items()}}
    raise ConditionError(f"{value!r} is not a value DynamoDB has")


def condition(spec: Mapping[str, Any]) -> Condition:
    """A row filter as the sources file writes it ({expression, names, values}), parsed."""
    return Condition.parse(spec["expression"], spec.get("names") or {},
                           {k: typed_value(v) for k, v in (spec.get("values") or {}).items()})


def check_with_scan(client, table: str, spec: Mapping[str, Any]) -> None:
    """Ask DynamoDB to take the filter (a Scan of one item): it refuses what this parser lets through, a
    reserved word used as an attribute name among them. ConditionError names the table and the fix."""
    try:
        client.scan(TableName=table, Limit=1, **scan_arguments(spec))
    except Exception as exc:  # noqa: BLE001 - botocore's ClientError, by its code
        error = getattr(exc, "response", {}).get("Error", {})
        if error.get("Code") != "ValidationException":
            raise
        raise ConditionError(f"table {table}: DynamoDB refused the row filter where.{table} "
                             f"({error.get('Message', '').strip()}). Fix: correct the expression; a reserved word "
                             "as an attribute name goes through names (#placeholder)") from None


def scan_arguments(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The filter as Scan's FilterExpression and its attribute names and values."""
    out: dict[str, Any] = {"FilterExpression": spec["expression"]}
    if spec.get("names"):
        out["ExpressionAttributeNames"] = dict(spec["names"])
    if spec.get("values"):
        out["ExpressionAttributeValues"] = {k: typed_value(v) for k, v in spec["values"].items()}
    return out
