"""A PostgreSQL snapshot's chunks read by Spark's JDBC reader: the type contract as SQL on both ends (pure).

Rows then never pass through Python. The server turns each column into a form JDBC carries without loss
(`select`: a date as days since 1970, a timestamp as epoch microseconds, a type the contract keeps as
text as its output function's text), and a Spark SQL expression over that gives the contract's value
and type (`spark`). The contract itself stays in types.py; the golden-type test holds this reader, the
Python one (COPY text) and the stream to the same values.

A value the contract refuses (a NaN numeric, an infinite or BC date) fails the chunk's query with a
message naming the column and the value: SQL has no RAISE, so the refused branch casts that message to
the column's type, whose input function then quotes it in its error.

Each Spark partition is a run of a wave's contiguous chunks, read by its own connection in a
REPEATABLE READ transaction that adopts the slot's exported snapshot (the JDBC session's init
statement), so every chunk sees the table as of the slot's consistent point.
"""

from __future__ import annotations

from collections.abc import Sequence

from ingest.sources.contract import JdbcColumn
from ingest.sources.postgres.schema import PgColumn, PgType, ident, quoted
from ingest.sources.postgres.snapshot import snapshot_id
from ingest.sources.postgres.types import SESSION_SETTINGS, SPARK_MAX_DECIMAL_PRECISION, numeric_typmod

DRIVER = "org.postgresql.Driver"
# PostgreSQL types whose JDBC value is already the contract's (Spark's PostgreSQL dialect maps them)
NATIVE = {"bool": "boolean", "int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
          "float8": "double precision", "bytea": "bytea", "text": "text", "varchar": "text"}
NATIVE_ELEMENTS = {"bool", "int2", "int4", "int8", "float4", "float8", "text", "varchar"}


def jdbc_url(host: str, port: int, database: str) -> str:
    from urllib.parse import quote

    # prepareThreshold=-1: the driver's forceBinary mode, every result in the binary protocol from the first
    # execution (Spark runs each chunk's query once, so by default rows come as text the server formats and
    # the driver parses again). A 10M-row snapshot here: the Spark server's JVM 19.2-20.5 CPU-s instead of
    # 21.9-24.8, 15.6-15.8 s instead of 16.8-17.9.
    return (f"jdbc:postgresql://{host}:{port}/{quote(database, safe='')}?ApplicationName=ingest-snapshot"
            "&prepareThreshold=-1")


def session_init(snapshot: str) -> str:
    """The statement each chunk's connection runs before its query. Spark's PostgreSQL dialect turns
    autocommit off to fetch by cursor, so the driver has begun a transaction and the BEGIN only warns;
    where autocommit is on (Spark asks for the query's columns on a connection of its own), the BEGIN
    opens the block that SET TRANSACTION SNAPSHOT needs."""
    settings = "; ".join(f"SET {name} = '{value}'" for name, value in SESSION_SETTINGS.items())
    return ("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
            f"SET TRANSACTION SNAPSHOT '{snapshot_id(snapshot)}'; {settings}")


def literal(text: str) -> str:
    """A string literal (standard_conforming_strings, on since PostgreSQL 9.1: only quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def _refused(col: str, before: str, after: str, sql_type: str) -> str:
    """An expression of type `sql_type` that fails with the message `before` <the value's text> `after`."""
    return f"CAST({literal(before)} || {col}::text || {literal(after)} AS {sql_type})"


def epoch_micros(col: str) -> str:
    """A timestamp's (or, in the session's UTC, a timestamptz's) microseconds since 1970 as a bigint, in
    integer arithmetic but for the time of day: days times 86,400,000,000 plus the time's seconds, a
    float8 that holds its microseconds exactly (under 86,400 with six decimals). EXTRACT(epoch), numeric
    since PostgreSQL 14, took 1.40 against 1.28 s of server time for 5M rows."""
    return (f"(({col})::date - DATE '1970-01-01')::bigint * 86400000000 "
            f"+ (date_part('epoch', ({col})::time) * 1000000)::bigint")


def jdbc_column(column: PgColumn, pg_type: PgType, index: int, table: str) -> JdbcColumn | None:
    """The column's two halves, or None where only the Python reader has its conversion."""
    ct = pg_type.contract(column.type_modifier)
    col, a, kind = f"_t.{ident(column.name)}", f"c{index}", pg_type.name
    where = f"column {column.name} of {table}: "
    fix = ". Fix: change the value at the source (its change would stop the stream too)"
    select, spark = col, f"CAST({a} AS {ct.spark})"
    if pg_type.element is not None:
        if pg_type.element not in NATIVE_ELEMENTS:
            return None  # element text the contract converts one by one
        array = f"{NATIVE[pg_type.element]}[]"
        refused = _refused(col, where, " has more than one dimension: only one-dimensional arrays land" + fix,
                           array)
        select = f"CASE WHEN array_ndims({col}) > 1 THEN {refused} ELSE {col}::{array} END"
    elif kind in NATIVE:
        select = f"{col}::{NATIVE[kind]}"  # a domain as its base type, which the driver knows
    elif kind == "numeric" and ct.spark != "string":
        precision, scale = numeric_typmod(column.type_modifier)
        if not 0 <= scale <= precision <= SPARK_MAX_DECIMAL_PRECISION:
            return None
        numeric = f"numeric({precision},{scale})"
        refused = _refused(col, where + "numeric ", " has no decimal value" + fix, numeric)
        # NaN sorts above Infinity: two comparisons find all three (the IN list's three cost 0.15-0.3 s of
        # server time more for 5M rows)
        select = (f"CASE WHEN {col} > '-Infinity' AND {col} < 'Infinity' THEN {col} "
                  f"WHEN {col} IS NOT NULL THEN {refused} END::{numeric}")
    elif kind == "date":
        refused = _refused(col, where + "date ", " is outside what Delta's date holds (years 1-9999)" + fix,
                           "integer")
        select = (f"CASE WHEN {col} >= '0001-01-01' AND {col} < '10000-01-01' THEN {col} - DATE '1970-01-01' "
                  f"WHEN {col} IS NOT NULL THEN {refused} END")
        spark = f"date_from_unix_date({a})"
    elif kind in ("timestamp", "timestamptz"):
        zone = "+00" if kind == "timestamptz" else ""
        refused = _refused(col, f"{where}{kind} ", " is outside what Delta's timestamp holds (years 1-9999)" + fix,
                           "bigint")
        select = (f"CASE WHEN {col} >= '0001-01-01 00:00:00{zone}' AND {col} < '10000-01-01 00:00:00{zone}' "
                  f"THEN {epoch_micros(col)} WHEN {col} IS NOT NULL THEN {refused} END")
        # the session's time zone is UTC (lake/connect.py): the cast keeps a timestamp's wall clock
        spark = f"timestamp_micros({a})" if kind == "timestamptz" else f"CAST(timestamp_micros({a}) AS timestamp_ntz)"
    elif ct.spark == "string":
        # the type's output function, as COPY and pgoutput give it: a ::text cast is not always that
        # (boolean 'true', char(n) without its padding, inet with its netmask)
        select = f"CASE WHEN {col} IS NOT NULL THEN concat({col}) END"
    else:
        return None
    # text arrives in the driver's client encoding, UTF-8: read as its bytes (JdbcColumn.jdbc_type)
    text = pg_type.element is None and ct.spark == "string"
    return JdbcColumn(column.name, select, a, spark, "BINARY" if text else None)


def jdbc_columns(columns: Sequence[PgColumn], types: dict[int, PgType], table: str) -> list[JdbcColumn] | None:
    """Every column's halves, or None when a column needs the Python reader."""
    out = [jdbc_column(c, types[c.type_oid], i, table) for i, c in enumerate(columns)]
    return None if any(c is None for c in out) else out  # type: ignore[return-value]


def chunk_table(table: str, columns: Sequence[JdbcColumn], key: Sequence[str], row_filter: str | None = None) -> str:
    """The derived table Spark reads (its `dbtable`): converted columns, raw key columns as k0..; with
    `row_filter` (a predicate) only the rows it holds for."""
    from ingest.filters import predicate

    select = [f"{c.select} AS {c.alias}" for c in columns]
    keys = [f"_t.{ident(k)} AS k{i}" for i, k in enumerate(key)]
    rows = (f"(SELECT * FROM {quoted(table)} AS _f WHERE {predicate(row_filter)})" if row_filter
            else quoted(table))
    return f"(SELECT {', '.join([*select, *keys])} FROM {rows} AS _t) AS _chunk"


def chunk_predicate(key_types: Sequence[str], lo: Sequence[str] | None, hi: Sequence[str] | None) -> str:
    """The chunk's key range [lo, hi) over the key aliases k0.., its bounds the keys' text forms cast to
    the key columns' types (JDBC predicates take no parameters). TRUE for the whole table."""
    keys = "(" + ", ".join(f"k{i}" for i in range(len(key_types))) + ")"

    def row(values: Sequence[str]) -> str:
        return "(" + ", ".join(f"{literal(v)}::{t}" for v, t in zip(values, key_types)) + ")"

    parts = ([f"{keys} >= {row(lo)}"] if lo is not None else []) + ([f"{keys} < {row(hi)}"] if hi is not None else [])
    return " AND ".join(parts) or "TRUE"
