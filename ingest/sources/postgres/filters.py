"""A table's row filter evaluated by PostgreSQL itself (see ingest/filters.py).

The snapshot puts the predicate in its chunks' WHERE. A change batch hands the images it decoded back to
the server as rows of the table's own row type (`jsonb_populate_recordset(NULL::schema.table, ...)`:
each value through its column type's input function, the column's collation kept) and selects them with
the same predicate, so both paths have the server's semantics.

A filtered table needs REPLICA IDENTITY FULL: without it an update logs no old row (and a TOASTed value
it left alone is not sent), and a delete only the key, so whether a change moved a row out of the filter
could not be told.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from ingest.changes import UNCHANGED
from ingest.filters import Image, RowFilter, predicate
from ingest.sources.postgres.schema import PgTable, quoted


class RowFilterError(ValueError):
    pass


def filter_error(table: str, exc: Exception) -> RowFilterError:
    diag = getattr(exc, "diag", None)
    text = (getattr(diag, "message_primary", None) or str(exc)).strip()
    state = getattr(exc, "sqlstate", None)
    why = (f"it names a column the table does not have ({text})" if state == "42703"
           else f"the server refused it ({state}: {text})")
    return RowFilterError(f"table {table}: the row filter tables.where.{table.partition('.')[2]} cannot be "
                          f"used: {why}. Fix: correct the predicate")


def check_filter(conn, table: str, row_filter: RowFilter) -> None:
    """Plan the predicate over the table (no row read) and check the table logs whole old rows;
    RowFilterError names the table, the problem and the fix."""
    import psycopg

    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {quoted(table)} AS _f WHERE {predicate(row_filter.where)} LIMIT 0"
                        .replace("%", "%%"), ())
            cur.execute("SELECT relreplident FROM pg_class WHERE oid = to_regclass(%s)", (quoted(table),))
            (identity,) = cur.fetchone()
    except psycopg.Error as exc:
        raise filter_error(table, exc) from None
    if identity != "f":
        raise RowFilterError(
            f"table {table}: a row filter (tables.where) needs the table's REPLICA IDENTITY FULL, so that an "
            f"update logs the row it changed and a change that moves a row out of the filter can be told. Fix: "
            f"ALTER TABLE {quoted(table)} REPLICA IDENTITY FULL")


def json_value(value: Any) -> Any:
    """A contract value (ingest/sources/postgres/types.py) as JSON the column's input function takes
    back: its text form, arrays as JSON arrays."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else (
            "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    raise TypeError(f"no text form for a {type(value).__name__}")


def images_inside(conn, table: PgTable, json_columns: frozenset[str], row_filter: RowFilter,
                  images: Sequence[Image]) -> list[bool | None]:
    """Which of `images` (rows of `table` as a batch decoded them, UNCHANGED filled in) the filter holds
    for. `json_columns`: json/jsonb columns, whose text goes in as the JSON it is."""
    import psycopg

    rows = [{c.name: (json.loads(v) if c.name in json_columns and isinstance(v, str) else json_value(v))
             for c in table.columns if (v := image.get(c.name)) is not UNCHANGED} for image in images]
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT ordinality - 1 FROM jsonb_populate_recordset(NULL::{quoted(table.name)}, %s::jsonb) "
                        f"WITH ORDINALITY AS _f WHERE {predicate(row_filter.where).replace('%', '%%')}",
                        (json.dumps(rows),))
            held = {int(r[0]) for r in cur.fetchall()}
    except psycopg.Error as exc:
        raise filter_error(table.name, exc) from None
    return [i in held for i in range(len(images))]


def complete(after: Image, before: Image | None) -> Image:
    """An update's new image with the values it did not send (UNCHANGED) taken from its old one."""
    if before is None:
        return after
    return {k: before.get(k) if v is UNCHANGED else v for k, v in after.items()}


def described(conn, qualified: str) -> tuple[PgTable, frozenset[str]]:
    """The table (schema.table) and its json/jsonb columns, as images_inside needs them."""
    from ingest.sources.postgres.schema import describe_table, types_of

    table = describe_table(conn, qualified)
    types = types_of(conn, [c.type_oid for c in table.columns])
    return table, frozenset(c.name for c in table.columns if types[c.type_oid].name in ("json", "jsonb"))


def filtered_records(conn, table: PgTable, json_columns: frozenset[str], row_filter: RowFilter,
                     records: Sequence) -> list:
    """What one table's `records` land as under its filter, judged by the server (ingest/filters.py). An
    update's images are completed first (a TOASTed value it left alone comes from its old row): judged
    whole, and a row that moves into the filter lands whole."""
    from dataclasses import replace

    from ingest.changes import ChangeOp
    from ingest.filters import filter_changes

    return filter_changes(
        [replace(r, row=complete(r.row, r.before)) if r.op is ChangeOp.UPDATE else r for r in records],
        lambda images: images_inside(conn, table, json_columns, row_filter, images), table.primary_key)


def filter_batch(conn, batch, tables: Mapping[str, tuple[PgTable, frozenset[str]]], filters: Mapping[str, RowFilter]):
    """`batch` (a SourceBatch read in this process, tables by schema.table) with each filtered table's
    changes as ingest/filters.py lands them; `tables`: each filtered table `described`."""
    from dataclasses import replace

    out = dict(batch.tables)
    for name, row_filter in filters.items():
        changes = out.get(name)
        if changes is not None and changes.records:
            out[name] = replace(changes, records=filtered_records(conn, *tables[name], row_filter, changes.records))
    return replace(batch, tables=out)

