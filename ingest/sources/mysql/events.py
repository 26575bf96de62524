"""Binlog row events to ChangeRecords, in the type contract (pure).

Each event is decoded with the table map of its own time: the column types
come from the TABLE_MAP event that precedes the rows (with FULL row metadata it
carries names, signedness, charsets, ENUM and SET labels), never from today's
information_schema. They are turned into the same MySQLColumn the snapshot
uses, so both paths end in the same converters.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from ingest.changes import ChangeOp, ChangeRecord
from ingest.sources.mysql.positions import BinlogPosition
from ingest.sources.mysql.types import DECLARED_ONLY, ColumnType, MySQLColumn, column_type

# MySQL protocol field type codes (include/mysql_com.h), as the table map gives them.
_FIELD_TYPES = {
    0: "decimal", 1: "tinyint", 2: "smallint", 3: "int", 4: "float", 5: "double", 7: "timestamp",
    8: "bigint", 9: "mediumint", 10: "date", 11: "time", 12: "datetime", 13: "year", 15: "varchar",
    16: "bit", 17: "timestamp", 18: "datetime", 19: "time", 245: "json", 246: "decimal", 247: "enum",
    248: "set", 249: "blob", 250: "blob", 251: "blob", 252: "blob", 253: "varchar", 254: "char",
    255: "geometry",
}


@dataclass(frozen=True)
class MappedColumn:
    """What a table map says of one column, in the library-neutral form events.py needs."""

    name: str
    type_code: int
    unsigned: bool = False
    binary: bool = False
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    bits: int | None = None
    length: int | None = None
    """Byte length of a fixed BINARY(n) column, so stripped padding can be restored."""
    members: tuple[str, ...] | None = None
    """A SET's members in definition order."""


@dataclass(frozen=True)
class CapturedTable:
    """What a batch needs to know of a table beyond its table maps (read from the source at batch time)."""

    keys: tuple[str, ...]
    """The primary key silver merges on."""
    excluded: frozenset[str] = frozenset()
    """Columns the config leaves out (`tables.columns.<table>.exclude`): dropped on decode."""
    declared: Mapping[str, str] = field(default_factory=dict)
    """Today's data type of columns whose table map says only BINARY/VARBINARY (types.DECLARED_ONLY)."""

    @classmethod
    def of(cls, value: CapturedTable | Sequence[str]) -> CapturedTable:
        """A bare key list is a table with nothing excluded and no declared-only types."""
        return value if isinstance(value, CapturedTable) else cls(tuple(value))


def to_mysql_column(col: MappedColumn, declared: str | None = None) -> MySQLColumn:
    kind = _FIELD_TYPES.get(col.type_code, f"type#{col.type_code}")
    if kind in ("varchar", "char") and col.binary:
        kind = "varbinary" if kind == "varchar" else "binary"
    if kind == "blob" and not col.binary:
        kind = "longtext"
    if kind in ("binary", "varbinary") and declared in DECLARED_ONLY:
        kind = declared
    column_type_text = kind + (" unsigned" if col.unsigned else "")
    precision = col.bits if kind == "bit" else col.precision
    return MySQLColumn(col.name, kind, column_type_text, numeric_precision=precision, numeric_scale=col.scale,
                       datetime_precision=col.fsp, char_length=col.length if kind == "binary" else None,
                       members=col.members)


@dataclass(frozen=True)
class TableDecoder:
    """Converts one table map's rows to contract values."""

    columns: tuple[MySQLColumn, ...]
    types: tuple[ColumnType, ...]

    @classmethod
    def from_table_map(cls, table: str, mapped: Sequence[MappedColumn],
                       captured: CapturedTable | None = None) -> TableDecoder:
        captured = captured or CapturedTable(())
        columns = tuple(to_mysql_column(c, captured.declared.get(c.name)) for c in mapped
                        if c.name not in captured.excluded)
        return cls(columns, tuple(column_type(c, table) for c in columns))

    @property
    def signature(self) -> tuple[tuple[str, str], ...]:
        return tuple((c.name, t.spark) for c, t in zip(self.columns, self.types))

    def row(self, values: dict[str, Any], none_sources: dict[str, str] | None = None) -> dict[str, Any]:
        out = {}
        for name, convert, is_set in self._plan:
            value = values.get(name)
            if value is None:
                # python-mysql-replication gives an empty SET as None, and says so in none_sources
                out[name] = [] if is_set and (none_sources or {}).get(name) == "empty set" else None
            else:
                out[name] = value if convert is None else convert(value)
        return out

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The columns a row holds, in the order of the values `library_rows` and rows.py give."""
        return tuple(name for name, _, _ in self._plan)

    def key_index(self, keys: Sequence[str]) -> list[int]:
        """Where the primary key's columns are in a row (a key column the rows lack is left out)."""
        names = self.names
        return [names.index(k) for k in keys if k in names]

    @property
    def converts(self) -> dict[str, Any]:
        """Each column's contract conversion by name (None: the library's value is the contract's)."""
        return {name: convert for name, convert, _ in self._plan}

    def library_rows(self, rows: Iterable[dict[str, Any]], update: bool) -> list[Any]:
        """python-mysql-replication's rows of one event as rows.py gives them: a list of contract values
        per row (`names` order), for an update a (before, after) pair."""
        if update:
            return [(list(self.row(r["before_values"], r.get("before_none_sources")).values()),
                     list(self.row(r["after_values"], r.get("after_none_sources")).values())) for r in rows]
        return [list(self.row(r["values"], r.get("none_sources")).values()) for r in rows]

    @property
    def _plan(self) -> tuple[tuple[str, Any, bool], ...]:
        """Per column what `row` asks: name, conversion, whether a SET (computed once per decoder)."""
        plan = self.__dict__.get("_row_plan")
        if plan is None:
            plan = tuple((c.name, t.convert, c.data_type == "set") for c, t in zip(self.columns, self.types))
            object.__setattr__(self, "_row_plan", plan)
        return plan


Change = tuple[ChangeOp, int, list[Any], "list[Any] | None"]
"""One row change of an event: its op, `_pos`, values and (an update's) values before, in the
decoder's column order."""


class EventChanges(NamedTuple):
    """The changes of one rows event (or one TRUNCATE) of a table, as the scan reads them; `records`
    makes the source-agnostic ChangeRecords of them, an executor's bronze writer takes `changes` as they are."""

    table: str
    names: tuple[str, ...]
    """The columns of the values in `changes`."""
    changes: list[Change]
    committed_at: dt.datetime | None
    txid: str | None

    def records(self) -> list[ChangeRecord]:
        names = self.names
        return [ChangeRecord(self.table, op, pos, dict(zip(names, values)),
                             None if before is None else dict(zip(names, before)), self.committed_at, self.txid)
                for op, pos, values, before in self.changes]


def change_rows(kind: str, rows: Sequence[Any], key_index: Sequence[int], event_end: BinlogPosition) -> list[Change]:
    """The changes of one rows event's rows (lists of values; an update's are (before, after) pairs),
    row i of the event at `_pos` row i+1 (0 is the snapshot's). `key_index`: where the primary key's
    columns are in a row.

    An update that changes the primary key becomes a delete of the old key and
    an insert of the new one, so the old key cannot linger in silver.
    """
    out: list[Change] = []
    index = 1
    base = event_end.row_pos(1) - 1  # the event's part of `_pos`, once: row_pos parses the file name
    if kind == "update":
        for before, after in rows:
            if any(before[i] != after[i] for i in key_index):
                out.append((ChangeOp.DELETE, base + index, before, None))
                index += 1
                out.append((ChangeOp.INSERT, base + index, after, None))
            else:
                out.append((ChangeOp.UPDATE, base + index, after, before))
            index += 1
    else:
        op = ChangeOp.INSERT if kind == "insert" else ChangeOp.DELETE
        for values in rows:
            out.append((op, base + index, values, None))
            index += 1
    if out:
        event_end.row_pos(index - 1)  # the last row index is in range (raises as for every row before)
    return out


IDENTIFIER = r"(?:`((?:[^`]|``)+)`|([A-Za-z0-9_$]+))"
"""A MySQL identifier, backquoted (group 1, backticks doubled) or bare (group 2)."""
QUALIFIED_NAME = re.compile(rf"{IDENTIFIER}(?:\s*\.\s*{IDENTIFIER})?")
_EMPTYING = re.compile(r"^\s*(?:/\*.*?\*/\s*)?(TRUNCATE(?:\s+TABLE)?|DROP\s+(?:TEMPORARY\s+)?TABLE(?:\s+IF\s+EXISTS)?)\s+(.*)$",
                       re.IGNORECASE | re.DOTALL)


def identifier(match: re.Match, group: int = 1) -> str:
    """The identifier an IDENTIFIER pattern matched at `group` (backquoted) or `group + 1` (bare)."""
    return (match.group(group) or "").replace("``", "`") or match.group(group + 1)


def schema_and_table(name: re.Match, default_schema: str | None) -> tuple[str | None, str]:
    """(schema, table) of a QUALIFIED_NAME match; `default_schema` where the name has none."""
    first, second = identifier(name, 1), identifier(name, 3)
    return (first, second) if second else (default_schema, first)


def emptied_tables(query: str, default_schema: str | None, database: str) -> list[str]:
    """Tables of `database` a TRUNCATE or DROP TABLE statement empties (pure)."""
    match = _EMPTYING.match(query)
    if not match:
        return []
    if match.group(1).upper().startswith("DROP") and "TEMPORARY" in match.group(1).upper():
        return []
    out = []
    rest = re.sub(r"/\*.*?\*/", "", match.group(2), flags=re.DOTALL)
    for name in QUALIFIED_NAME.finditer(rest):
        schema, table = schema_and_table(name, default_schema)
        if table and table.upper() not in ("CASCADE", "RESTRICT") and schema == database:
            out.append(table)
    return out

