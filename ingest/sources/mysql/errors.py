"""Named errors of the MySQL source. Each message says what to do next."""

from __future__ import annotations

import re


class MySQLSourceError(Exception):
    """Base of every error the MySQL source raises on purpose."""


class UnsupportedColumnType(MySQLSourceError):
    def __init__(self, table: str, column: str, column_type: str) -> None:
        self.table, self.column, self.column_type = table, column, column_type
        super().__init__(
            f"table {table}: column {column!r} has type {column_type!r}, which the type contract "
            f"does not cover. Fix: leave the column out (tables.columns.{table}.exclude: [{column}] in the "
            "sources config), or change its type; then materialize the table's snapshot"
        )


class TableNotFound(MySQLSourceError):
    pass


class NoPrimaryKey(MySQLSourceError):
    pass


class SourceUnreachable(MySQLSourceError):
    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        """The client error code (2003: refused, 1045: access denied, ...)."""


# Client and server codes of a connection that went away or could not be made for now:
# 2003 cannot connect, 2006 server has gone away, 2013 lost connection during query,
# 2055 lost connection at reading, 1053 server shutdown in progress, 1927 connection killed.
TRANSIENT_CODES = frozenset({2003, 2006, 2013, 2055, 1053, 1927})


# How a driver error raised in a Spark executor reads in the driver's exception text
# (PyMySQL elsewhere, mysqlclient's MySQLdb in the snapshot's chunk reader).
_EXECUTOR_ERROR = re.compile(r"(?:pymysql\.err|MySQLdb)\.(?:OperationalError|InterfaceError): \((\d+),")


def is_transient(exc: BaseException) -> bool:
    import pymysql

    if isinstance(exc, SourceUnreachable):
        return exc.code in TRANSIENT_CODES
    import MySQLdb

    if isinstance(exc, (pymysql.err.OperationalError, pymysql.err.InterfaceError,
                        MySQLdb.OperationalError, MySQLdb.InterfaceError)):
        return bool(exc.args) and exc.args[0] in TRANSIENT_CODES
    return executor_error_code(str(exc)) in TRANSIENT_CODES


# MariaDB Connector/J (the snapshot's JDBC reader) names no error code for a connection that could not be
# made or went away, only the exception class; they stand for 2003 and 2013.
_JDBC_CONNECTION = re.compile(r"java\.sql\.SQL(?:Non)?TransientConnectionException: (.*)")
_JDBC_REFUSED = re.compile(r"fail to connect|Connection refused", re.IGNORECASE)


def executor_error_code(text: str) -> int | None:
    """The code of the driver error a Spark job failed with, from its message (pure)."""
    codes = _EXECUTOR_ERROR.findall(text)
    if codes:
        return int(codes[-1])
    jdbc = _JDBC_CONNECTION.findall(text)
    if jdbc:
        return 2003 if _JDBC_REFUSED.search(jdbc[-1]) else 2013
    return None


class BinlogDisabled(MySQLSourceError):
    pass


class BinlogSettingsError(MySQLSourceError):
    """The server's binlog cannot feed CDC (format, row image, row metadata)."""


class BinlogGap(MySQLSourceError):
    """Changes the lake needs are no longer on the server (purged, RESET MASTER, another server)."""


class BatchBoundaryError(MySQLSourceError):
    pass
