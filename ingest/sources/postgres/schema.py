"""What the catalog says of a table's column types (I/O): the names the type contract is keyed by."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ingest.sources.contract import ColumnType
from ingest.sources.postgres.types import SESSION_SETTINGS, column_type


@dataclass(frozen=True)
class PgType:
    name: str
    """pg_type.typname of the type, or of a domain's base type."""
    element: str | None
    """An array's element typname (of its base type, for a domain)."""
    delimiter: str = ","
    """An array's element delimiter (the element's pg_type.typdelim: ';' for box)."""

    def contract(self, typmod: int = -1) -> ColumnType:
        return column_type(self.name, typmod, self.element, self.delimiter)


_TYPES_SQL = """
WITH RECURSIVE base(oid, root) AS (
    SELECT t.oid, t.oid FROM pg_type t WHERE t.oid = ANY(%s)
    UNION ALL
    SELECT b.oid, t.typbasetype FROM base b JOIN pg_type t ON t.oid = b.root WHERE t.typtype = 'd'
)
SELECT b.oid, t.typname, e.typname, coalesce(e.typdelim, ',')
FROM base b JOIN pg_type t ON t.oid = b.root LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.typtype <> 'd'
"""


def types_of(conn, oids: Iterable[int]) -> dict[int, PgType]:
    """The contract's names for type OIDs (a domain resolves to its base type)."""
    with conn.cursor() as cur:
        cur.execute(_TYPES_SQL, (sorted(set(oids)),))
        return {oid: PgType(name, element, delimiter) for oid, name, element, delimiter in cur.fetchall()}


def set_session(conn) -> None:
    """The settings the contract's text forms assume (types.SESSION_SETTINGS)."""
    with conn.cursor() as cur:
        for name, value in SESSION_SETTINGS.items():
            cur.execute("SELECT set_config(%s, %s, false)", (name, value))


@dataclass(frozen=True)
class PgColumn:
    name: str
    type_oid: int
    type_modifier: int
    sql_type: str = "text"
    """The type as SQL spells it (format_type): a key's text form is cast back to it."""


@dataclass(frozen=True)
class PgTable:
    """A table as the snapshot reads it: its columns in order and its primary key."""

    name: str
    """schema.table"""
    columns: tuple[PgColumn, ...]
    primary_key: tuple[str, ...]

    def key_types(self) -> tuple[str, ...]:
        by_name = {c.name: c.sql_type for c in self.columns}
        return tuple(by_name[k] for k in self.primary_key)

    def fingerprint(self) -> str:
        """Changes when a column is added, dropped or retyped, or the key changes: waves of a snapshot
        taken before and after such DDL cannot be mixed."""
        import hashlib

        shape = repr(([(c.name, c.type_oid, c.type_modifier) for c in self.columns], self.primary_key))
        return hashlib.sha1(shape.encode()).hexdigest()[:16]


class TableProblem(ValueError):
    """A table the source cannot land (missing, no primary key); the message names the fix."""


_COLUMNS_SQL = """
SELECT a.attname, a.atttypid, a.atttypmod, array_position(i.indkey::int2[], a.attnum),
       format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""


def describe_table(conn, table: str, source: str = "") -> PgTable:
    """The table's columns and primary key from the catalog (`table` as schema.table)."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)::oid", (quoted(table),))
        oid = cur.fetchone()[0]
        if oid is None:
            raise TableProblem(f"{source + ': ' if source else ''}table {table} does not exist. Fix: create it, or "
                               "take it out of the source's tables")
        cur.execute(_COLUMNS_SQL, (oid,))
        rows = cur.fetchall()
    key = tuple(r[0] for r in sorted((r for r in rows if r[3] is not None), key=lambda r: r[3]))
    if not key:
        raise TableProblem(f"{source + ': ' if source else ''}table {table} has no primary key: snapshot chunks and "
                           "the merge into silver go by it. Fix: ALTER TABLE ... ADD PRIMARY KEY, or take the table "
                           "out of the source's tables")
    return PgTable(table, tuple(PgColumn(n, oid_, mod, sql_type) for n, oid_, mod, _, sql_type in rows), key)


def contracts_of(conn, table: PgTable) -> list[ColumnType]:
    types = types_of(conn, [c.type_oid for c in table.columns])
    return [types[c.type_oid].contract(c.type_modifier) for c in table.columns]


def ident(name: str) -> str:
    """A name as SQL spells it exactly: double-quoted (names are case-sensitive, as in the stream's
    RELATION messages)."""
    return '"' + name.replace('"', '""') + '"'


def quoted(table: str) -> str:
    """schema.table as SQL names it exactly, each part double-quoted."""
    schema, _, name = table.partition(".")
    return f"{ident(schema)}.{ident(name)}"
