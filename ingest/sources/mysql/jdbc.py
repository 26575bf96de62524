"""The snapshot's chunks read by Spark's JDBC reader: the type contract as SQL on both ends (pure).

Rows then never pass through Python: the server turns each column into a form JDBC carries without loss
(`select`, e.g. a TIME as its text, a TIMESTAMP as epoch seconds, a DATETIME as microseconds since
year 1, which a zero date has none of, a BIT as hex) and a Spark SQL expression over that gives the
contract's value and type (`spark`). The CAST to timestamp_ntz reads the session's time zone, which
every session of the project sets to UTC (lake/connect.py), where the project's optimizer rule keeps
the microseconds as they are (jvm/src UtcTimestampCast). The contract itself stays in types.py: the
golden all-types test holds both readers and the binlog path to the same values.

Each Spark partition is one chunk, read by its own connection in its own `START TRANSACTION WITH
CONSISTENT SNAPSHOT` (the JDBC session's init statement), and the chunk's rows carry that snapshot's
binlog position, read inside it from SESSION_STATUS (BINLOG_SNAPSHOT_FILE / _POSITION are frozen at the
snapshot's start). The position comes from a one-row derived table joined to the table rather than from
subqueries in the select list, so that the server merges the query Spark wraps around it and the
chunk's key range reaches the primary key index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ingest.sources.contract import JdbcColumn
from ingest.sources.mysql.chunks import Chunk, quote_ident
from ingest.sources.mysql.positions import OFFSET_FACTOR, SEQ_FACTOR
from ingest.sources.mysql.types import SPATIAL, MySQLColumn, column_type

DRIVER = "org.mariadb.jdbc.Driver"
# Serializable is not wanted; REPEATABLE READ is what a consistent snapshot needs (the server's
# default, which a my.cnf may have changed).
# time_zone: a row filter's predicate sees TIMESTAMPs in UTC, as the binlog path's evaluation does
SESSION_INIT = ("SET SESSION time_zone = '+00:00'; SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
                "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
POSITION_COLUMN = "_pos"
EPOCH_TO_SECONDS = 719_528 * 86_400
"""TO_SECONDS('1970-01-01'): MariaDB counts 719,528 days from year 0 to the epoch."""


def jdbc_url(host: str, port: int, database: str) -> str:
    # jdbc:mysql with permitMysqlScheme: Spark picks its MySQL dialect (backtick quoting) and the MariaDB
    # driver takes the URL. allowMultiQueries: the init statement sets the isolation level first.
    # tinyInt1isBit / yearIsDateType off: TINYINT(1) and YEAR stay numbers. useServerPrepStmts: rows come
    # in the binary protocol, numbers as their bytes instead of text that the server formats and the
    # driver parses again (a 3M-row read took 3.1 s instead of 4.0 s here), and a FLOAT as the value
    # stored, which the binlog gives too, not its shortest decimal text.
    return (f"jdbc:mysql://{host}:{port}/{database}?permitMysqlScheme&allowMultiQueries=true"
            "&tinyInt1isBit=false&yearIsDateType=false&useServerPrepStmts=true")


def _cast(expr: str, spark_type: str) -> str:
    return f"CAST({expr} AS {spark_type})"


def jdbc_column(column: MySQLColumn, index: int, table: str = "?") -> JdbcColumn | None:
    """The column's two halves, or None where only the Python reader has its conversion."""
    ct = column_type(column, table)  # raises UnsupportedColumnType outside the contract
    kind = column.data_type.lower()
    col = f"`_t`.{quote_ident(column.name)}"
    a = f"c{index}"
    if kind == "vector":
        return None  # float32 arrays: no Spark SQL function unpacks them
    # text arrives in the connection's character set, UTF-8: read as its bytes (JdbcColumn.jdbc_type)
    text = ct.spark == "string" or kind in ("set", "bit") or kind in SPATIAL
    s = f"CAST({a} AS STRING)" if text else a
    select, spark = col, _cast(a, ct.spark)
    if kind == "bigint" and column.unsigned:
        select = f"CAST({col} AS DECIMAL(20,0))"
    elif kind in ("decimal", "numeric") and ct.spark == "string":
        select = f"CAST({col} AS CHAR)"  # the server's text: plain notation with `scale` decimals
    elif kind == "set":
        select = f"CAST({col} AS CHAR)"  # members in definition order, comma-separated
        spark = f"CASE WHEN {s} IS NULL THEN NULL WHEN {s} = '' THEN CAST(array() AS array<string>) " \
                f"ELSE split({s}, ',') END"
    elif kind == "bit":
        size = max(1, ((column.numeric_precision or 1) + 7) // 8)
        select = f"LPAD(HEX({col}), {2 * size}, '0')"
        spark = f"unhex({s})"
    elif kind == "datetime":
        # microseconds since the epoch (both sides count in the proleptic Gregorian calendar, so dates
        # before 1582 are not shifted as java.sql.Timestamp would); a zero or partial-zero value has no
        # such number and is NULL. A number over the wire and integer arithmetic, not text to parse.
        # TO_SECONDS gives what TIMESTAMPDIFF(MICROSECOND, ...) gives, zero and invalid dates included,
        # for less: 10M DATETIME(3) values cost the server 0.3 CPU-s above the bare column against 0.8.
        select = f"(TO_SECONDS({col}) - {EPOCH_TO_SECONDS}) * 1000000 + MICROSECOND({col})"
        spark = f"CAST(timestamp_micros({a}) AS timestamp_ntz)"
    elif kind == "date":
        select = f"DATEDIFF({col}, '1970-01-01')"  # days since the epoch; NULL for zero and partial-zero dates
        spark = f"date_from_unix_date(CAST({a} AS int))"
    elif kind in ("time", "uuid", "inet4", "inet6", "enum"):
        select = f"CAST({col} AS CHAR)"
    elif kind == "char":
        # a VARCHAR to JDBC: Spark reads a CHAR(n) column as char(n) and pads it to n on read, where
        # the server's clients and the binlog give the value without its trailing spaces
        select = f"CAST({col} AS CHAR)"
    elif kind == "timestamp":
        # epoch seconds: UNIX_TIMESTAMP of a TIMESTAMP column is its stored UTC instant, whatever the
        # session's time zone; 0 is the zero TIMESTAMP
        select = f"UNIX_TIMESTAMP({col})"
        spark = f"CASE WHEN {a} = 0 THEN NULL ELSE timestamp_micros(CAST({a} * 1000000 AS bigint)) END"
    elif kind == "year":
        select = f"CAST({col} AS SIGNED)"
        spark = f"CASE WHEN {a} = 0 THEN NULL ELSE CAST({a} AS smallint) END"
    elif kind in SPATIAL:
        # the stored form: a 4-byte little-endian SRID, then OGC WKB
        select = f"HEX({col})"
        srid = "conv(concat(substring({0}, 7, 2), substring({0}, 5, 2), substring({0}, 3, 2), " \
               "substring({0}, 1, 2)), 16, 10)".format(s)
        spark = f"CASE WHEN {s} IS NULL THEN NULL ELSE named_struct('wkb', unhex(substring({s}, 9)), " \
                f"'srid', CAST({srid} AS int)) END"
    elif kind == "binary" and column.char_length:
        pass  # the server keeps BINARY(n)'s zero padding
    return JdbcColumn(column.name, select, a, spark, "BINARY" if text else None)


def jdbc_columns(columns: Sequence[MySQLColumn], table: str = "?") -> list[JdbcColumn] | None:
    """Every column's halves, or None when a column needs the Python reader."""
    out = [jdbc_column(c, i, table) for i, c in enumerate(columns)]
    return None if any(c is None for c in out) else out  # type: ignore[return-value]


def chunk_table(database: str, table: str, columns: Sequence[JdbcColumn], key: Sequence[str],
                rows: str | None = None) -> str:
    """The derived table Spark reads (its `dbtable`): converted columns, raw key columns as k0.., `_pos`;
    `rows` a derived table to read instead of the table (a row filter's)."""
    # computed once, in the one-row table, so that each row only copies it
    file = ("(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
            "WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_FILE')")
    offset = ("(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
              "WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_POSITION')")
    snapshot = (f"(SELECT CAST(CAST(SUBSTRING_INDEX({file}, '.', -1) AS DECIMAL(38,0)) * {SEQ_FACTOR} "
                f"+ CAST({offset} AS DECIMAL(38,0)) * {OFFSET_FACTOR} AS DECIMAL(38,0)) AS `p`) AS `_s`")
    select = [f"{c.select} AS `{c.alias}`" for c in columns]
    keys = [f"`_t`.{quote_ident(k)} AS `k{i}`" for i, k in enumerate(key)]
    return (f"(SELECT {', '.join([*select, *keys])}, `_s`.`p` AS `{POSITION_COLUMN}` "
            f"FROM {rows or f'{quote_ident(database)}.{quote_ident(table)}'} AS `_t` CROSS JOIN {snapshot}) AS `_chunk`")


def sql_literal(value: Any) -> str:
    """A key value as a MySQL literal (bytes as _binary'..', dates quoted), for a JDBC predicate."""
    from pymysql.converters import escape_item

    return escape_item(value, "utf8mb4")


def chunk_predicate(key: Sequence[str], chunk: Chunk) -> str:
    """The chunk's key range [lo, hi) over the key aliases k0.., with literal values (JDBC predicates
    take no parameters)."""
    from ingest.sources.mysql.chunks import range_predicate

    aliases = [f"k{i}" for i in range(len(key))]
    sql, params = range_predicate(aliases, chunk.lo, chunk.hi)
    return sql.replace("%s", "{}").format(*(sql_literal(p) for p in params))
