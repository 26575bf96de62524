"""Reading what the source holds: tables, columns and primary keys.

Used at snapshot time. The binlog path never uses today's information_schema
for old events (it decodes with the table map of each event's own time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pymysql

from ingest.config import MySQLSource
from ingest.sources.mysql.errors import MySQLSourceError, NoPrimaryKey, SourceUnreachable, TableNotFound
from ingest.sources.mysql.events import CapturedTable
from ingest.sources.mysql.types import DECLARED_ONLY, ColumnType, MySQLColumn, column_type


@dataclass(frozen=True)
class ConnectionParams:
    """What a connection needs, picklable so Spark executors can open their own."""

    host: str
    port: int
    user: str
    password: str
    database: str
    connect_timeout: int = 10

    def __repr__(self) -> str:  # never print the password
        return f"ConnectionParams({self.user}@{self.host}:{self.port}/{self.database})"

    def connect(self, **kwargs) -> pymysql.connections.Connection:
        try:
            conn = pymysql.connect(
                host=self.host, port=self.port, user=self.user, password=self.password,
                database=self.database, connect_timeout=self.connect_timeout, charset="utf8mb4",
                autocommit=True, **kwargs,
            )
        except pymysql.err.OperationalError as exc:
            raise SourceUnreachable(
                f"cannot connect to {self.user}@{self.host}:{self.port}/{self.database}: {exc.args[-1]}. "
                "Fix: check that the server is up, and the host, port, user and password variable in the sources config",
                code=exc.args[0] if exc.args else None,
            ) from None
        with conn.cursor() as cur:
            # TIMESTAMP values are read as UTC wall clock (DESIGN principle 5).
            cur.execute("SET time_zone = '+00:00'")
        return conn


    def connect_streaming(self):
        """A mysqlclient (C) connection for bulk reads: it parses rows about 3x faster than PyMySQL.

        It hands back the same Python values PyMySQL does for every type of the
        contract (types.py) but SET, which it would make a Python set: kept as
        the server's text, as PyMySQL gives it. Errors are MySQLdb's, with the
        same codes.
        """
        import MySQLdb
        from MySQLdb.constants import FIELD_TYPE
        from MySQLdb.converters import conversions

        conv = {**conversions, FIELD_TYPE.SET: _text, FIELD_TYPE.DATETIME: _datetime, FIELD_TYPE.TIMESTAMP: _datetime,
                FIELD_TYPE.DATE: _date}
        try:
            return MySQLdb.connect(
                host=self.host, port=self.port, user=self.user, password=self.password, database=self.database,
                connect_timeout=self.connect_timeout, charset="utf8mb4", autocommit=True, conv=conv,
                # TIMESTAMP values are read as UTC wall clock (DESIGN principle 5).
                init_command="SET time_zone = '+00:00'",
            )
        except MySQLdb.OperationalError as exc:
            raise SourceUnreachable(
                f"cannot connect to {self.user}@{self.host}:{self.port}/{self.database}: {exc.args[-1]}. "
                "Fix: check that the server is up, and the host, port, user and password variable in the sources config",
                code=exc.args[0] if exc.args else None,
            ) from None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _datetime(value: bytes | str) -> dt.datetime | str:
    """DATETIME/TIMESTAMP text parsed in C (MySQLdb's own parser is Python and was 40 % of a chunk's
    read); zero and partial-zero values stay text, as PyMySQL leaves them, for the contract to null."""
    text = _text(value)
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return text


def _date(value: bytes | str) -> dt.date | str:
    text = _text(value)
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return text


def connection_params(source: MySQLSource) -> ConnectionParams:
    from ingest.config import secret

    password = secret(source.password_env, f"the password of {source.user}@{source.host}")
    return ConnectionParams(source.host, source.port, source.user, password, source.database,
                            source.connect_timeout)


@dataclass(frozen=True)
class TableSchema:
    database: str
    table: str
    columns: tuple[MySQLColumn, ...]
    primary_key: tuple[str, ...]
    excluded: tuple[str, ...] = ()
    """Columns the config leaves out (absent from `columns`; names the table lacks included)."""

    def captured(self) -> CapturedTable:
        """What the binlog path needs of this table (see events.CapturedTable)."""
        return CapturedTable(self.primary_key, frozenset(self.excluded),
                             {c.name: c.data_type for c in self.columns if c.data_type in DECLARED_ONLY})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def delta_types(self) -> list[ColumnType]:
        return [column_type(c, self.table) for c in self.columns]

    def lake_columns(self) -> list[tuple[str, str]]:
        """(name, Spark type) of each column as the type contract lands it."""
        return [(c.name, t.spark) for c, t in zip(self.columns, self.delta_types())]

    def fingerprint(self) -> str:
        """Columns, types and key; a snapshot cannot resume across a change of this."""
        return ";".join(f"{c.name}:{c.column_type}" for c in self.columns) + f";key:{','.join(self.primary_key)}"


def list_tables(conn, database: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE'",
            (database,),
        )
        return sorted(r[0] for r in cur.fetchall())


def describe_table(conn, database: str, table: str, config_ref: str = "",
                   exclude: frozenset[str] = frozenset()) -> TableSchema:
    """Columns and primary key of one table, less the `exclude`d columns; TableNotFound / NoPrimaryKey /
    UnsupportedColumnType name the config key and the fix."""
    described = describe_tables(conn, database, [table], lambda t: exclude, lambda t: config_ref)[table]
    if isinstance(described, MySQLSourceError):
        raise described
    return described


def describe_tables(conn, database: str, tables: Sequence[str],
                    exclude: Callable[[str], frozenset[str]] = lambda t: frozenset(),
                    config_ref: Callable[[str], str] = lambda t: "") -> dict[str, TableSchema | MySQLSourceError]:
    """Each table described as describe_table does, or the error describe_table would raise, in two
    queries whatever their number (a batch of a 500-table source asked 1,000)."""
    columns: dict[str, list[tuple]] = {t: [] for t in tables}
    keys: dict[str, list[str]] = {t: [] for t in tables}
    if tables:
        names = ", ".join(["%s"] * len(tables))
        with conn.cursor() as cur:
            # information_schema may compare names without case: rows are filed by their exact name
            cur.execute(
                "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
                "DATETIME_PRECISION, IS_NULLABLE, CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS "
                f"WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ({names}) ORDER BY TABLE_NAME, ORDINAL_POSITION",
                (database, *tables))
            for row in cur.fetchall():
                columns.get(row[0], []).append(row[1:])
            cur.execute(
                "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
                f"AND TABLE_NAME IN ({names}) AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY TABLE_NAME, ORDINAL_POSITION",
                (database, *tables))
            for table, column in cur.fetchall():
                keys.get(table, []).append(column)
    described: dict[str, TableSchema | MySQLSourceError] = {}
    for t in tables:
        try:
            described[t] = table_schema(database, t, columns[t], tuple(keys[t]), config_ref(t), exclude(t))
        except MySQLSourceError as exc:
            described[t] = exc
    return described


def table_schema(database: str, table: str, rows: Sequence[tuple], pk: tuple[str, ...], config_ref: str = "",
                 exclude: frozenset[str] = frozenset()) -> TableSchema:
    """The table's schema from its information_schema.COLUMNS rows (name, data type, column type,
    precision, scale, datetime precision, nullable, octet length) and primary key (pure)."""
    where = f"{config_ref}: " if config_ref else ""
    if not rows:
        raise TableNotFound(
            f"{where}table {database}.{table} does not exist (or the ingest user cannot see it). "
            "Fix: correct the name in tables.include, or grant SELECT on it"
        )
    if not pk:
        raise NoPrimaryKey(
            f"{where}table {database}.{table} has no primary key, so its changes cannot be merged by key. "
            "Fix: add a primary key to the table, or exclude it (tables.exclude)"
        )
    keyed_out = sorted(set(pk) & exclude)
    if keyed_out:
        raise NoPrimaryKey(
            f"{where}table {database}.{table}: the config excludes primary-key column(s) {', '.join(keyed_out)}, "
            "without which changes cannot be merged by key. Fix: remove them from "
            f"tables.columns.{table}.exclude"
        )
    columns = tuple(
        MySQLColumn(name=r[0], data_type=r[1].lower(), column_type=r[2], numeric_precision=r[3], numeric_scale=r[4],
                    datetime_precision=r[5], nullable=r[6] == "YES",
                    char_length=r[7] if r[1].lower() == "binary" else None)
        for r in rows if r[0] not in exclude
    )
    schema = TableSchema(database, table, columns, pk, tuple(sorted(exclude)))
    schema.delta_types()  # raise UnsupportedColumnType now, before anything is written
    return schema
