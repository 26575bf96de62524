"""Named errors of the MySQL source. Each message says what to do next."""

from __future__ import annotations


class MySQLSourceError(Exception):
    """Base of every error the MySQL source raises on purpose."""


class UnsupportedColumnType(MySQLSourceError):
    def __init__(self, table: str, column: str, column_type: str) -> None:
        self.table, self.column, self.column_type = table, column, column_type
        super().__init__(
            f"table {table}: column {column!r} has type {column_type!r}, which the type contract "
            "does not cover (spatial, UUID, INET and VECTOR types are not supported). "
            "Fix: exclude the table in the sources config (tables.exclude), or change the column type."
        )


class TableNotFound(MySQLSourceError):
    pass


class NoPrimaryKey(MySQLSourceError):
    pass


class SourceUnreachable(MySQLSourceError):
    pass


class BinlogDisabled(MySQLSourceError):
    pass


class BinlogSettingsError(MySQLSourceError):
    """The server's binlog cannot feed CDC (format, row image, row metadata)."""


class BinlogGap(MySQLSourceError):
    """Changes the lake needs are no longer on the server (purged, RESET MASTER, another server)."""


class BatchBoundaryError(MySQLSourceError):
    pass
