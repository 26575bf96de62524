"""The type contract (DESIGN principle 5): MySQL/MariaDB columns to Delta.

A row read by the snapshot and the same row decoded from the binlog must give
identical Delta values, so both paths end in `ColumnType.convert`.

| MySQL                          | Delta (Spark)          | value                                  |
|--------------------------------|------------------------|----------------------------------------|
| TINYINT / SMALLINT / MEDIUMINT | tinyint/smallint/int   | signed; UNSIGNED widens one step       |
| INT                            | int (UNSIGNED: bigint) |                                        |
| BIGINT                         | bigint                 | UNSIGNED: decimal(20,0), no overflow   |
| DECIMAL(p,s), p <= 38          | decimal(p,s)           | exact                                  |
| DECIMAL(p,s), p > 38           | string                 | exact, plain notation with s decimals  |
| FLOAT / DOUBLE                 | float / double         |                                        |
| CHAR, VARCHAR, *TEXT, JSON     | string                 | JSON as the text stored                |
| BINARY(n), VARBINARY, *BLOB    | binary                 | BINARY(n) zero-padded to n bytes       |
| ENUM                           | string                 | the label                              |
| SET                            | array<string>          | members in definition order, empty -> [] |
| BIT(n)                         | binary                 | ceil(n/8) bytes, big-endian            |
| DATE                           | date                   | zero or partial-zero date -> NULL      |
| DATETIME(fsp)                  | timestamp_ntz          | wall clock, zero -> NULL               |
| TIMESTAMP(fsp)                 | timestamp              | instant (session time zone UTC), zero -> NULL |
| TIME(fsp)                      | string                 | '[-]HH:MM:SS[.f*fsp]' (range +-838h)   |
| YEAR                           | smallint               | 0000 -> NULL (YEAR(2) no longer exists) |
| GEOMETRY, POINT, LINESTRING, POLYGON, MULTI*, GEOMETRYCOLLECTION | struct<wkb:binary,srid:int> | OGC WKB and the SRID, as Debezium |
| UUID (MariaDB)                 | string                 | 'xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' |
| INET4 / INET6 (MariaDB)        | string                 | the server's text form ('::ffff:1.2.3.4') |
| VECTOR(n) (MariaDB 11.7, MySQL 9) | array<float>        | n float32 values                       |

Anything else raises UnsupportedColumnType with the table, the column and the
way out (exclude the column: `tables.columns.<table>.exclude`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

from ingest.sources.contract import ColumnType, convert_column  # noqa: F401 (convert_column: re-exported)
from ingest.sources.mysql.errors import UnsupportedColumnType

SPARK_MAX_DECIMAL_PRECISION = 38


@dataclass(frozen=True)
class MySQLColumn:
    """One column as information_schema.COLUMNS describes it."""

    name: str
    data_type: str
    column_type: str
    numeric_precision: int | None = None
    numeric_scale: int | None = None
    datetime_precision: int | None = None
    nullable: bool = True
    char_length: int | None = None
    """Byte length of BINARY(n): the binlog strips its zero padding, the snapshot keeps it."""
    members: tuple[str, ...] | None = None
    """A SET's members in definition order, when the binlog's table map gives them."""

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type.lower()


# DECIMAL(65,30) has more digits than the default context's 28: quantize in a
# context wide enough for any MySQL decimal, or it raises (or rounds).
_WIDE = Context(prec=100)


def decimal_text(scale: int) -> Callable[[Any], str | None]:
    quantum = Decimal(1).scaleb(-scale)

    def convert(value: Any) -> str | None:
        if value is None:
            return None
        return format(Decimal(value).quantize(quantum, context=_WIDE), "f")

    return convert


def to_decimal(value: Any) -> Decimal | None:
    return None if value is None else Decimal(value)


def set_members(members: Sequence[str] | None) -> Callable[[Any], list[str] | None]:
    """A SET value as its members in definition order: the order the server's own text uses, which
    the snapshot reads; the binlog decoder hands back an unordered Python set instead."""
    order = {m: i for i, m in enumerate(members or ())}

    def convert(value: Any) -> list[str] | None:
        if value is None:
            return None
        if isinstance(value, (set, frozenset, list, tuple)):
            return sorted(value, key=lambda m: (order.get(m, len(order)), m))
        return value.split(",") if value else []

    return convert


def bit_bytes(width: int) -> Callable[[Any], bytes | None]:
    size = max(1, (width + 7) // 8)

    def convert(value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray)):
            number = int.from_bytes(value, "big")
        elif isinstance(value, str):  # python-mysql-replication gives a string of '0'/'1'
            number = int(value, 2) if value else 0
        else:
            number = int(value)
        return number.to_bytes(size, "big")

    return convert


def as_bytes(value: Any) -> bytes:
    # the binlog decoder hands back an empty binary value as ''
    return value.encode("latin-1") if isinstance(value, str) else bytes(value)


def padded_bytes(length: int) -> Callable[[Any], bytes]:
    def convert(value: Any) -> bytes:
        return as_bytes(value).ljust(length, b"\x00")

    return convert


def spatial_value(value: Any) -> dict[str, Any]:
    """MySQL's internal geometry (a 4-byte little-endian SRID, then OGC WKB), as Debezium gives it."""
    data = as_bytes(value)
    return {"wkb": data[4:], "srid": int.from_bytes(data[:4], "little")}


def uuid_text(value: Any) -> str:
    # The binlog holds the 16 bytes in text order with trailing zero bytes stripped; the snapshot, text.
    if isinstance(value, str) and len(value) == 36:
        return value
    return str(uuid.UUID(bytes=as_bytes(value).ljust(16, b"\x00")))


def inet4_text(value: Any) -> str:
    if isinstance(value, str) and "." in value:
        return value
    return str(ipaddress.IPv4Address(as_bytes(value).ljust(4, b"\x00")))


def inet6_text(value: Any) -> str:
    """INET6 as MariaDB writes it (Inet6::to_string): the first longest run of zero words as '::', even
    a lone one (Python's ipaddress keeps a lone zero word, as RFC 5952 asks), and an IPv4-compatible
    or -mapped address with its last 32 bits dotted."""
    if isinstance(value, str) and ":" in value:
        return value
    data = as_bytes(value).ljust(16, b"\x00")
    words = struct.unpack(">8H", data)
    gap, gap_length, run = -1, 0, -1
    for i, word in enumerate((*words, 1)):  # the 1 closes a run that reaches the end
        if word == 0 and i < 8:
            run = i if run < 0 else run
        elif run >= 0:
            if i - run > gap_length:
                gap, gap_length = run, i - run
            run = -1
    if gap == 0 and (gap_length == 6 or (gap_length == 5 and words[5] == 0xFFFF)):
        return ("::" if gap_length == 6 else "::ffff:") + str(ipaddress.IPv4Address(data[12:]))
    text, i = "", 0
    while i < 8:
        if i == gap:
            text += "::" if i == 0 else ":"
            i += gap_length
        else:
            text += f"{words[i]:x}" + (":" if i < 7 else "")
            i += 1
    return text


def vector_floats(value: Any) -> list[float]:
    """VECTOR(n): n little-endian float32 values (MariaDB 11.7+, MySQL 9)."""
    data = as_bytes(value)
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def valid_date(value: Any) -> dt.date | None:
    # Drivers hand back zero and partial-zero dates ('0000-00-00', '2020-00-01')
    # as strings or None: no Delta date can hold them.
    return value if isinstance(value, dt.date) and not isinstance(value, dt.datetime) else None


def valid_datetime(value: Any) -> dt.datetime | None:
    return value if isinstance(value, dt.datetime) else None


_EPOCH = dt.datetime(1970, 1, 1)


def utc_instant(value: Any) -> dt.datetime | None:
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if value == _EPOCH:
        # TIMESTAMP starts at 1970-01-01 00:00:01 UTC; the binlog stores the zero
        # TIMESTAMP '0000-00-00 00:00:00' as epoch second 0.
        return None
    return value.replace(tzinfo=dt.timezone.utc)  # the session time zone is UTC


def time_text(fsp: int) -> Callable[[Any], str | None]:
    def convert(value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, dt.time):
            value = dt.timedelta(hours=value.hour, minutes=value.minute, seconds=value.second,
                                 microseconds=value.microsecond)
        if isinstance(value, str):
            return value
        micros = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
        sign = "-" if micros < 0 else ""
        micros = abs(micros)
        seconds, frac = divmod(micros, 1_000_000)
        hours, rest = divmod(seconds, 3600)
        minutes, secs = divmod(rest, 60)
        text = f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"
        if fsp:
            text += "." + f"{frac:06d}"[:fsp]
        return text

    return convert


def year_value(value: Any) -> int | None:
    if value is None:
        return None
    number = int(value)
    # YEAR holds 1901..2155 and 0000; the binlog decoder reports 0000 as 1900.
    return None if number in (0, 1900) else number


_INTEGERS = {
    # data_type: (signed spark type, unsigned spark type)
    "tinyint": ("tinyint", "smallint"),
    "smallint": ("smallint", "int"),
    "mediumint": ("int", "int"),
    "int": ("int", "bigint"),
    "integer": ("int", "bigint"),
}
_STRINGS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json", "enum"}
_BINARIES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
SPATIAL = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
           "geometrycollection", "geomcollection"}
SPATIAL_TYPE = "struct<wkb:binary,srid:int>"
DECLARED_ONLY = {"uuid", "inet4", "inet6", "vector"}
"""Types the binlog's table map shows as BINARY/VARBINARY: the binlog path learns them from today's
information_schema (see events.CapturedTable)."""


# Kinds whose contract does not depend on the column's size, precision or sign.
_FIXED = {
    "date": ColumnType("date", valid_date),
    "datetime": ColumnType("timestamp_ntz", valid_datetime),
    "timestamp": ColumnType("timestamp", utc_instant),
    "year": ColumnType("smallint", year_value),
    "uuid": ColumnType("string", uuid_text),
    "inet4": ColumnType("string", inet4_text),
    "inet6": ColumnType("string", inet6_text),
    "vector": ColumnType("array<float>", vector_floats),
}


def column_type(column: MySQLColumn, table: str = "?") -> ColumnType:
    """The contract for one column; raises UnsupportedColumnType for anything outside it."""
    kind = column.data_type.lower()
    if kind in _INTEGERS:
        signed, unsigned = _INTEGERS[kind]
        return ColumnType(unsigned if column.unsigned else signed, None)
    if kind == "bigint":
        return ColumnType("decimal(20,0)", to_decimal) if column.unsigned else ColumnType("bigint", None)
    if kind in ("decimal", "numeric"):
        precision, scale = column.numeric_precision or 10, column.numeric_scale or 0
        if precision > SPARK_MAX_DECIMAL_PRECISION:
            return ColumnType("string", decimal_text(scale))
        return ColumnType(f"decimal({precision},{scale})", to_decimal)
    if kind == "float":
        return ColumnType("float", None)
    if kind in ("double", "real"):
        return ColumnType("double", None)
    if kind in _STRINGS:
        return ColumnType("string", None)
    if kind == "binary" and column.char_length:
        return ColumnType("binary", padded_bytes(column.char_length))
    if kind in _BINARIES:
        return ColumnType("binary", as_bytes)
    if kind == "set":
        return ColumnType("array<string>", set_members(column.members))
    if kind == "bit":
        return ColumnType("binary", bit_bytes(column.numeric_precision or 1))
    if kind == "time":
        return ColumnType("string", time_text(column.datetime_precision or 0))
    if kind in SPATIAL:
        return ColumnType(SPATIAL_TYPE, spatial_value)
    if kind in _FIXED:
        return _FIXED[kind]
    raise UnsupportedColumnType(table, column.name, column.column_type)
