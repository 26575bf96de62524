"""A table's row filter evaluated by the MySQL/MariaDB server itself (see ingest/filters.py).

The snapshot puts the predicate in its chunks' WHERE. A change batch cannot: its rows are images out of
the binlog, not rows of the table. They go into a temporary table made from the table's own columns
(`CREATE TEMPORARY TABLE ... AS SELECT <columns> ... LIMIT 0` keeps each column's type, charset and
collation), and the same predicate selects from it. So both paths compare strings under the column's
collation, ENUMs by label or index, TIMESTAMPs in the same session time zone (UTC): the server's
semantics, not a re-implementation. A temporary table is the session's own and is not written to the
binlog (ROW format); the user needs the CREATE TEMPORARY TABLES privilege.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ingest.filters import Image, RowFilter, predicate
from ingest.sources.mysql.chunks import quote_ident
from ingest.sources.mysql.errors import MySQLSourceError
from ingest.sources.mysql.schema import TableSchema
from ingest.sources.mysql.types import SPATIAL, MySQLColumn

SCRATCH = "_ingest_filter_images"
IMAGE = "_ingest_image"
INSERT_ROWS = 500


class RowFilterError(MySQLSourceError):
    pass


def captured_rows(database: str, table: str, columns: Sequence[MySQLColumn]) -> str:
    """The table as the filter sees it: the captured columns only, so a predicate on an excluded column
    fails as an unknown column, on both paths."""
    cols = ", ".join(quote_ident(c.name) for c in columns)
    return f"(SELECT {cols} FROM {quote_ident(database)}.{quote_ident(table)})"


def check_filter(conn, database: str, table: str, columns: Sequence[MySQLColumn], row_filter: RowFilter,
                 excluded: Sequence[str] = ()) -> None:
    """Ask the server to plan the predicate over the captured columns (no row is read); RowFilterError
    names the table, what the server said and the fix."""
    import pymysql

    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {captured_rows(database, table, columns)} AS `_f` "
                        f"WHERE {predicate(row_filter.where)} LIMIT 0")
            cur.fetchall()
    except (pymysql.err.ProgrammingError, pymysql.err.OperationalError, pymysql.err.InternalError,
            pymysql.err.DataError) as exc:
        raise filter_error(table, exc, excluded) from None


def filter_error(table: str, exc: Exception, excluded: Sequence[str] = ()) -> RowFilterError:
    code, text = (exc.args + (None, ""))[:2] if exc.args else (None, str(exc))
    unknown = re.search(r"Unknown column '(?:[^'.]*\.)?([^']*)'", str(text))
    if unknown and unknown.group(1) in excluded:
        why = (f"it names column {unknown.group(1)!r}, which tables.columns.{table}.exclude leaves out. Fix: "
               "filter on a column that lands, or stop excluding it")
    elif unknown:
        why = f"it names column {unknown.group(1)!r}, which the table does not have. Fix: correct the predicate"
    else:
        why = f"the server refused it (error {code}: {text}). Fix: correct the predicate"
    return RowFilterError(f"table {table}: the row filter tables.where.{table} cannot be used: {why}")


def literal(value: Any, column: MySQLColumn) -> str:
    """An image's value (the type contract's, ingest/sources/mysql/types.py) as a literal the column
    takes back as the value the binlog held."""
    from pymysql.converters import escape_item

    if value is None:
        return "NULL"
    kind = column.data_type.lower()
    if kind in SPATIAL:
        return f"ST_GeomFromWKB({escape_item(bytes(value['wkb']), 'utf8mb4')}, {int(value['srid'] or 0)})"
    if kind == "vector":
        return f"Vec_FromText({escape_item(json.dumps(list(value)), 'utf8mb4')})"
    if kind == "set":
        return escape_item(",".join(value), "utf8mb4")
    if isinstance(value, dt.datetime) and value.tzinfo is not None:  # TIMESTAMP: the session is in UTC
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return escape_item(value, "utf8mb4")


def images_inside(conn, database: str, table: str, columns: Sequence[MySQLColumn], row_filter: RowFilter,
                  images: Sequence[Image]) -> list[bool | None]:
    """Which of `images` (rows of `table` as the binlog decoded them) the filter holds for."""
    import pymysql

    names = [c.name for c in columns]
    scratch = quote_ident(SCRATCH)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TEMPORARY TABLE IF EXISTS {scratch}")
            cur.execute(f"CREATE TEMPORARY TABLE {scratch} AS SELECT 0 AS {quote_ident(IMAGE)}, "
                        f"{', '.join(quote_ident(n) for n in names)} "
                        f"FROM {quote_ident(database)}.{quote_ident(table)} LIMIT 0")
            # as written, not as the server's mode would bend them: a zero date the binlog held (the
            # contract's NULL) goes back as the column's zero value, as it was
            cur.execute("SET @ingest_sql_mode = @@SESSION.sql_mode, SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'")
            try:
                for start in range(0, len(images), INSERT_ROWS):
                    rows = [f"({i}, {', '.join(literal(image.get(n), c) for n, c in zip(names, columns))})"
                            for i, image in enumerate(images[start:start + INSERT_ROWS], start)]
                    cur.execute(f"INSERT INTO {scratch} VALUES {', '.join(rows)}")
            finally:
                cur.execute("SET SESSION sql_mode = @ingest_sql_mode")
            cur.execute(f"SELECT {quote_ident(IMAGE)} FROM {scratch} WHERE {predicate(row_filter.where)}")
            held = {int(r[0]) for r in cur.fetchall()}
            cur.execute(f"DROP TEMPORARY TABLE {scratch}")
    except (pymysql.err.ProgrammingError, pymysql.err.InternalError, pymysql.err.DataError) as exc:
        raise filter_error(table, exc) from None
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] in (1044, 1142, 1227):  # no CREATE TEMPORARY TABLES privilege
            raise RowFilterError(
                f"table {table}: the row filter tables.where.{table} is evaluated on each change in a temporary "
                f"table, which {database}'s user may not create (error {exc.args[0]}). Fix: GRANT CREATE "
                f"TEMPORARY TABLES ON {database}.* to the source's user") from None
        if exc.args and exc.args[0] in (1054, 1064, 1305, 1582, 1583):
            raise filter_error(table, exc) from None
        raise
    return [i in held for i in range(len(images))]


def filter_batch(params, batch, schemas: Mapping[str, TableSchema], filters: Mapping[str, RowFilter]):
    """`batch` (a SourceBatch read in this process) with each filtered table's changes as
    ingest/filters.py lands them, judged by the server."""
    from dataclasses import replace

    from ingest.changes import ChangeOp

    tables = dict(batch.tables)
    wanted = [t for t in filters if t in tables and tables[t].records]
    if not wanted:
        return batch
    with params.connect() as conn:
        for t in wanted:
            changes, schema = tables[t], schemas.get(t)
            if schema is None:
                # dropped since: no table to judge its last changes by, and its DROP empties silver, so
                # only the emptying lands (no image of a row the filter might leave out)
                records = [r for r in changes.records if r.op is ChangeOp.TRUNCATE]
            else:
                records = filtered_records(conn, schema.database, schema.table, schema.columns, schema.primary_key,
                                           filters[t], changes.records)
            tables[t] = replace(changes, records=records)
    return replace(batch, tables=tables)


def filtered_records(conn, database: str, table: str, columns: Sequence[MySQLColumn], keys: Sequence[str],
                     row_filter: RowFilter, records: Sequence) -> list:
    """What `records` (one table's) land as under its filter, judged by the server (ingest/filters.py)."""
    from ingest.filters import filter_changes

    return filter_changes(records, lambda images: images_inside(conn, database, table, columns, row_filter, images),
                          keys)
