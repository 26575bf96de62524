"""The type contract of DynamoDB tables: attributes into Delta columns (pure).

A table's columns are its key attributes (typed from the key schema), the
attributes the sources file declares, and `_item`: the whole item as JSON, so
that attributes nobody declared stay readable. Undeclared types:

| DynamoDB      | column                 |
|---------------|------------------------|
| S             | string                 |
| N             | decimal(38,9) (exact)  |
| B             | binary                 |
| BOOL          | boolean                |
| NULL          | null in any column     |
| SS / NS / BS  | array of the element   |
| M / L         | JSON string            |

Declared types: `string`, `decimal(p,s)`, `bigint`, `int`, `double`,
`boolean`, `binary`, `json`, `array<T>`, `struct<name:T,...>` (from an M).
A value that does not fit its column raises ValueTypeError naming the item's
key and the attribute; nothing is rounded, truncated or guessed.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.images import item_json

ITEM_COLUMN = "_item"
DEFAULT_NUMBER = "decimal(38,9)"
KEY_TYPES = {"S": "string", "N": DEFAULT_NUMBER, "B": "binary"}
_SCALARS = {"string", "bigint", "int", "double", "boolean", "binary", "json"}
_INT_RANGE = {"bigint": 2**63, "int": 2**31}


class ValueTypeError(ValueError):
    """An attribute value that does not fit its column."""


@dataclass(frozen=True)
class ColumnType:
    """A parsed column type: `kind` is a scalar name, `decimal`, `array` or `struct`."""

    kind: str
    precision: int = 0
    scale: int = 0
    element: ColumnType | None = None
    fields: tuple[tuple[str, ColumnType], ...] = ()

    @property
    def spark(self) -> str:
        """The Spark SQL type (`json` is a string column)."""
        return self._render(spark=True)

    @property
    def declared(self) -> str:
        """The type as declared in the sources file: parse_type reads it back."""
        return self._render(spark=False)

    def _render(self, spark: bool) -> str:
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.kind == "json":
            return "string" if spark else "json"
        if self.kind == "array":
            return f"array<{self.element._render(spark)}>"
        if self.kind == "struct":
            name = (lambda n: f"`{n}`") if spark else (lambda n: n)
            return "struct<" + ",".join(f"{name(n)}:{t._render(spark)}" for n, t in self.fields) + ">"
        return self.kind


def parse_type(text: str) -> ColumnType:
    """Parse a declared type; raises ValueError naming what is wrong."""
    parsed, rest = _parse(text.strip(), text)
    if rest.strip():
        raise ValueError(f"unexpected {rest.strip()!r} after the type in {text!r}")
    return parsed


def _parse(s: str, whole: str) -> tuple[ColumnType, str]:
    s = s.lstrip()
    m = re.match(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)", s, re.I)
    if m:
        p, sc = int(m.group(1)), int(m.group(2))
        if not 1 <= p <= 38 or sc > p:
            raise ValueError(f"decimal({p},{sc}) in {whole!r}: precision must be 1..38 and scale at most precision")
        return ColumnType("decimal", p, sc), s[m.end():]
    if re.match(r"number\b", s, re.I):
        return parse_type(DEFAULT_NUMBER), s[len("number"):]
    m = re.match(r"(array|struct)\s*<", s, re.I)
    if m:
        rest = s[m.end():]
        if m.group(1).lower() == "array":
            element, rest = _parse(rest, whole)
            rest = rest.lstrip()
            if not rest.startswith(">"):
                raise ValueError(f"missing '>' closing array<...> in {whole!r}")
            return ColumnType("array", element=element), rest[1:]
        fields = []
        while True:
            fm = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*:", rest)
            if not fm:
                raise ValueError(f"expected 'name:type' inside struct<...> in {whole!r}")
            ftype, rest = _parse(rest[fm.end():], whole)
            fields.append((fm.group(1), ftype))
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:]
                continue
            if rest.startswith(">"):
                return ColumnType("struct", fields=tuple(fields)), rest[1:]
            raise ValueError(f"expected ',' or '>' inside struct<...> in {whole!r}")
    m = re.match(r"([a-z]+)", s, re.I)
    if m and m.group(1).lower() in _SCALARS:
        return ColumnType(m.group(1).lower()), s[m.end():]
    raise ValueError(f"unknown type {s.split('<')[0].split(',')[0].strip() or whole!r} in {whole!r}; "
                     f"use one of {sorted(_SCALARS | {'decimal(p,s)', 'array<T>', 'struct<name:T,...>'})}")


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, str):
        return "S"
    if isinstance(value, decimal.Decimal):
        return "N"
    if isinstance(value, (bytes, bytearray)):
        return "B"
    if isinstance(value, frozenset):
        return "set"
    if isinstance(value, Mapping):
        return "M"
    if isinstance(value, list):
        return "L"
    return type(value).__name__


def convert(value: Any, ctype: ColumnType, where: str) -> Any:
    """A Python value (see deserialize) as the column type wants it; `where` names it in errors."""
    if value is None:
        return None
    kind = ctype.kind

    def wrong() -> ValueTypeError:
        return ValueTypeError(f"{where}: a {_kind_of(value)} value does not fit the column type {ctype.spark}. "
                              "Fix: declare the attribute's type in the sources file (attributes), e.g. json")

    if kind == "json":
        return item_json(value)
    if kind == "string":
        if not isinstance(value, str):
            raise wrong()
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise wrong()
        return value
    if kind == "binary":
        if not isinstance(value, (bytes, bytearray)):
            raise wrong()
        return bytes(value)
    if kind in ("decimal", "bigint", "int", "double"):
        if not isinstance(value, decimal.Decimal) or isinstance(value, bool):
            raise wrong()
        if kind == "double":
            return float(value)
        if kind in _INT_RANGE:
            if value != value.to_integral_value() or not -_INT_RANGE[kind] <= value < _INT_RANGE[kind]:
                raise ValueTypeError(f"{where}: {value} is not a {kind}. Fix: declare it as decimal(p,s) or double")
            return int(value)
        exp = decimal.Decimal(1).scaleb(-ctype.scale)
        try:
            exact = value.quantize(exp, context=decimal.Context(prec=60, traps=[decimal.Inexact]))
        except decimal.Inexact:
            raise ValueTypeError(f"{where}: {value} has more than {ctype.scale} decimal places, which "
                                 f"{ctype.spark} cannot hold exactly. Fix: declare the attribute as a wider "
                                 "decimal(p,s), double or string") from None
        if exact.adjusted() >= ctype.precision - ctype.scale:
            raise ValueTypeError(f"{where}: {value} has more than {ctype.precision - ctype.scale} integer digits, "
                                 f"which {ctype.spark} cannot hold. Fix: declare a wider decimal(p,s) or double")
        return exact
    if kind == "array":
        if not isinstance(value, (frozenset, list)):
            raise wrong()
        items = sorted(value) if isinstance(value, frozenset) else value
        return [convert(v, ctype.element, f"{where}[{i}]") for i, v in enumerate(items)]
    if kind == "struct":
        if not isinstance(value, Mapping):
            raise wrong()
        names = {n for n, _ in ctype.fields}
        extra = sorted(set(value) - names)
        if extra:
            raise ValueTypeError(f"{where}: field(s) {extra} are not in the declared {ctype.spark}. Fix: add them "
                                 "to the declared struct, or declare the attribute as json")
        return {n: convert(value.get(n), t, f"{where}.{n}") for n, t in ctype.fields}
    raise AssertionError(kind)


@dataclass(frozen=True)
class TableTypes:
    """Columns of one DynamoDB table in the lake: keys, declared attributes, then `_item`."""

    table: str
    key_columns: tuple[str, ...]
    columns: tuple[tuple[str, ColumnType], ...]

    @classmethod
    def build(cls, table: str, key_schema: Sequence[Mapping[str, str]],
              attribute_definitions: Sequence[Mapping[str, str]], declared: Mapping[str, str]) -> TableTypes:
        defined = {a["AttributeName"]: a["AttributeType"] for a in attribute_definitions}
        keys = tuple(k["AttributeName"] for k in sorted(key_schema, key=lambda k: k["KeyType"] != "HASH"))
        columns = []
        for k in keys:
            columns.append((k, parse_type(declared.get(k) or KEY_TYPES[defined[k]])))
        columns += [(name, parse_type(t)) for name, t in declared.items() if name not in keys]
        columns.append((ITEM_COLUMN, ColumnType("json")))
        return cls(table, keys, tuple(columns))

    def spark_columns(self) -> list[tuple[str, str]]:
        return [(n, t.spark) for n, t in self.columns]

    def fingerprint(self) -> str:
        return "|".join(f"{n}:{t.spark}" for n, t in self.columns)

    def key_text(self, item: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={item.get(k)!r}" for k in self.key_columns)

    def row(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """One item (see deserialize.from_item) as a row of this table's columns."""
        out = {}
        for name, ctype in self.columns:
            if name == ITEM_COLUMN:
                out[name] = item_json(item)
                continue
            try:
                out[name] = convert(item.get(name), ctype, f"attribute {name!r}")
            except ValueTypeError as exc:  # the item's keys named only here: building them per row cost a tenth
                raise ValueTypeError(f"table {self.table}, item {{{self.key_text(item)}}}, {exc}") from None
        return out
