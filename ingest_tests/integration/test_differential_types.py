"""Differential: random values of MariaDB's column types, edge values included, land the same through
both snapshot readers (Spark's JDBC reader, the Python data source) and through the binlog (insert,
update, delete), and each equals what the server's own client (PyMySQL) returns, as the type contract
(ingest/sources/mysql/types.py) lands it (issue 49).

Strings and binaries: empty and all-space strings, leading and trailing spaces, NUL bytes, tabs,
characters outside the BMP. The other types: every integer width signed and unsigned at its limits,
DECIMAL up to 65 digits, FLOAT and DOUBLE, DATETIME/TIMESTAMP/TIME with and without fractions (zero
and negative times, dates before 1582), YEAR, ENUM and SET with empty and odd members, BIT(1..64),
JSON with unicode, geometry, UUID, INET4 and INET6."""

import datetime as dt
import ipaddress
import itertools
import json
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from dagster import instance_for_test
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from ingest_tests.integration.cdc_harness import CdcHarness, write_sources
from ingest_tests.integration.conftest import snapshot
from ingest_tests.integration.test_snapshot_types import comparable

ROWS = 200
_examples = itertools.count()


def _same(value):
    return value


@dataclass(frozen=True)
class Column:
    type: str
    values: st.SearchStrategy
    edges: tuple = ()
    """Values every run writes, one per edge row, before the random ones."""
    placeholder: str = "%s"
    """How a value is written (geometry goes in as WKB)."""
    lake: Callable = _same
    """The client's value as the type contract lands it."""
    read: str = "{}"
    """The SQL that reads the lake column for comparison (a TIMESTAMP as UTC text)."""


_TEXT_EDGES = ("", " ", "  a", "\x00", " \u00fc ")


def _text(kind: str, alphabet: str, size: int) -> Column:
    return Column(kind, st.text(alphabet=alphabet, max_size=size), edges=_TEXT_EDGES)


def _binary(kind: str, size: int) -> Column:
    return Column(kind, st.binary(max_size=size), edges=tuple(e.encode() for e in _TEXT_EDGES))


STRINGS = {
    "ch": _text("CHAR(8) CHARACTER SET utf8mb4", " a\u00fc\t\U0001F600", 8),
    "nch": _text("NCHAR(3)", " b\u00e9", 3),
    "vc": _text("VARCHAR(12) CHARACTER SET utf8mb4", " c\u00fc\t\x00\U0001F680", 12),
    "tx": _text("TEXT CHARACTER SET utf8mb4", " d\u00fc\n\U0001F600", 40),
    "bn": _binary("BINARY(4)", 4),
    "vb": _binary("VARBINARY(6)", 6),
}


def _integer(kind: str, bits: int, unsigned: bool = False) -> Column:
    low, high = (0, 2 ** bits - 1) if unsigned else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return Column(f"{kind}{' UNSIGNED' if unsigned else ''}", st.integers(low, high), edges=(low, high, 0))


def exact_decimals(precision: int, scale: int):
    """Decimals of `precision` digits, `scale` of them decimals, and the largest one. Built from digit
    strings: hypothesis's decimals and Decimal arithmetic round to the default context's 28 digits
    (a DECIMAL(38,9) bound came out as 1E+29, past the column's largest value)."""
    top = Decimal("9" * (precision - scale) + ("." + "9" * scale if scale else ""))
    return st.integers(-(10 ** precision - 1), 10 ** precision - 1).map(lambda n: Decimal(f"{n}E-{scale}")), top


def _decimal(precision: int, scale: int, lake=_same) -> Column:
    values, top = exact_decimals(precision, scale)
    return Column(f"DECIMAL({precision},{scale})", values, edges=(top, -top, 0), lake=lake)


def _time_text(delta: dt.timedelta, digits: int) -> str:
    """TIME as the contract lands it: '[-]HH:MM:SS[.f*digits]', hours past 24 as they are."""
    micros = delta // dt.timedelta(microseconds=1)
    sign, micros = ("-" if micros < 0 else ""), abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}"[:digits + 1] if digits else "")


def _time(digits: int) -> Column:
    top = (838 * 3600 + 59 * 60 + 59) * 1_000_000
    step = 10 ** (6 - digits)
    micros = st.integers(-top // step, top // step).map(lambda n: n * step)
    return Column(f"TIME({digits})", micros.map(lambda n: _time_text(dt.timedelta(microseconds=n), digits)),
                  edges=("838:59:59", "-838:59:59", "00:00:00", "-00:00:01" + (".5" if digits else "")),
                  lake=lambda v: _time_text(v, digits))


def _zero_date_is_null(value):
    # PyMySQL hands a zero or partial-zero date back as the server's text; the contract lands NULL
    return None if isinstance(value, str) else value


def _wkb_point(xy) -> bytes:
    return struct.pack("<bIdd", 1, 1, *xy)


def _wkb_line(points) -> bytes:
    return struct.pack("<bII", 1, 2, len(points)) + b"".join(struct.pack("<dd", *p) for p in points)


def _geometry(value: bytes) -> dict:
    # the client's geometry is MariaDB's internal form: a 4-byte little-endian SRID, then WKB
    return {"wkb": value[4:], "srid": int.from_bytes(value[:4], "little")}


_coordinate = st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53) | st.text(alphabet="a \u00fc\"\\\n\U0001F600/"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet="k\u00e9 ", max_size=3), inner,
                                                                max_size=3),
    max_leaves=6).map(lambda v: json.dumps(v, ensure_ascii=False))
_SET = ("a", "b c", "\u00fc", "Behind the Scenes")
# a DATETIME's text, with microseconds where the column keeps them (dates before 1582 included)
_datetimes = st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
_stamps = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18, 23, 59, 59, 999999))

OTHERS = {
    "ti": _integer("TINYINT", 8), "uti": _integer("TINYINT", 8, True),
    "sm": _integer("SMALLINT", 16), "usm": _integer("SMALLINT", 16, True),
    "md": _integer("MEDIUMINT", 24), "umd": _integer("MEDIUMINT", 24, True),
    "i": _integer("INT", 32), "ui": _integer("INT", 32, True),
    "bi": _integer("BIGINT", 64),
    "ubi": Column("BIGINT UNSIGNED", st.integers(0, 2 ** 64 - 1), edges=(2 ** 64 - 1, 0), lake=Decimal),
    "d12": _decimal(12, 4), "d38": _decimal(38, 10),
    "d65": _decimal(65, 30, lake=lambda v: format(v, "f")),
    # FLOAT: values the server's text (6 significant digits) gives back exactly
    "f": Column("FLOAT", st.integers(-9999, 9999).map(lambda n: n / 4), edges=(0.0, -0.5, 2499.75)),
    "db": Column("DOUBLE", st.floats(allow_nan=False, allow_infinity=False),
                 edges=(0.0, 1.7976931348623157e308, -2.2250738585072014e-308, 0.1)),
    "dt6": Column("DATETIME(6)", _datetimes.map(lambda d: d.isoformat(" ")),
                  edges=("0000-00-00 00:00:00", "1000-01-01 00:00:00", "1582-10-10 12:00:00.5",
                         "9999-12-31 23:59:59.999999", "2020-00-00 00:00:00"), lake=_zero_date_is_null),
    "dt0": Column("DATETIME", _datetimes.map(lambda d: d.isoformat(" ")), edges=("0000-00-00 00:00:00",),
                  lake=_zero_date_is_null),
    "ts6": Column("TIMESTAMP(6) NULL DEFAULT NULL", _stamps.map(lambda d: d.isoformat(" ")),
                  edges=("1970-01-01 00:00:01", "2038-01-19 03:14:07.999999", "0000-00-00 00:00:00"),
                  lake=lambda v: None if v is None or isinstance(v, str) else v.strftime("%Y-%m-%d %H:%M:%S.%f"),
                  read="date_format({}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"),
    "t0": _time(0), "t3": _time(3), "t6": _time(6),
    "y": Column("YEAR", st.integers(1901, 2155), edges=(0, 1901, 2155), lake=lambda v: v or None),
    "d": Column("DATE", st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31)).map(str),
                edges=("0000-00-00", "1582-10-10", "2024-00-10"), lake=_zero_date_is_null),
    "e": Column("ENUM('x','y z','\u00fc','')", st.sampled_from(["x", "y z", "\u00fc", ""]), edges=("bogus",)),
    "s": Column("SET('a','b c','\u00fc','Behind the Scenes')",
                st.lists(st.sampled_from(_SET), unique=True).map(",".join), edges=("", ",".join(reversed(_SET))),
                lake=lambda v: [] if v == "" else v.split(",")),
    "b1": Column("BIT(1)", st.integers(0, 1), edges=(0, 1)),
    "b10": Column("BIT(10)", st.integers(0, 2 ** 10 - 1), edges=(0, 2 ** 10 - 1)),
    "b64": Column("BIT(64)", st.integers(0, 2 ** 64 - 1), edges=(0, 2 ** 64 - 1, 2 ** 63)),
    "j": Column("JSON", _json, edges=("[]", "{}", '"\u00fc\U0001F600"', "null")),
    "g": Column("GEOMETRY", st.tuples(_coordinate, _coordinate).map(_wkb_point)
                | st.lists(st.tuples(_coordinate, _coordinate), min_size=2, max_size=4).map(_wkb_line),
                edges=(_wkb_point((0, 0)), _wkb_point((-0.0, 1e300))), placeholder="ST_GeomFromWKB(%s)",
                lake=_geometry),
    "pt": Column("POINT REF_SYSTEM_ID=4326", st.tuples(_coordinate, _coordinate).map(_wkb_point),
                 edges=(_wkb_point((1, 2)),), placeholder="ST_GeomFromWKB(%s, 4326)", lake=_geometry),
    "u": Column("UUID", st.uuids().map(str) | st.binary(min_size=16, max_size=16).map(lambda b: str(uuid.UUID(bytes=b))),
                edges=("00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
                       "123e4567-e89b-12d3-a456-426614174000")),
    "i4": Column("INET4", st.ip_addresses(v=4).map(str), edges=("0.0.0.0", "255.255.255.255")),
    "i6": Column("INET6", st.ip_addresses(v=6).map(str)
                 | st.binary(min_size=16, max_size=16).map(lambda b: str(ipaddress.IPv6Address(b))),
                 edges=("::", "::1", "::ffff:1.2.3.4", "::1.2.3.4", "1:0:2:3:4:5:6:7", "1::", "::ffff:0:0",
                        "1:0:0:2:0:0:3:4", "1:0:0:2:0:0:0:3", "::1:0")),
}


def _rows(columns: dict[str, Column]):
    return st.fixed_dictionaries({c: st.none() | col.values for c, col in columns.items()})


def _edge_rows(columns: dict[str, Column]) -> list[dict]:
    """Every column's edge values, row by row (NULL where a column has fewer), then a row of NULLs."""
    depth = max(len(col.edges) for col in columns.values())
    return [{c: col.edges[k] if k < len(col.edges) else None for c, col in columns.items()}
            for k in range(depth)] + [dict.fromkeys(columns)]


def _session(cur) -> None:
    # UTC, so the client's TIMESTAMP is the instant the lake holds; a permissive mode takes zero dates
    # and an ENUM value that is no member (stored as index 0, read back as '')
    cur.execute("SET time_zone = '+00:00', sql_mode = ''")


def _load(cur, table: str, columns: dict[str, Column], rows: list[dict]) -> None:
    cur.executemany(f"INSERT INTO {table} (id, {', '.join(columns)}) "
                    f"VALUES (%s, {', '.join(col.placeholder for col in columns.values())})",
                    [(i, *(r[c] for c in columns)) for i, r in enumerate(rows)])


def _update(cur, table: str, columns: dict[str, Column], new: dict, key: int) -> None:
    cur.execute(f"UPDATE {table} SET {', '.join(f'{c} = {col.placeholder}' for c, col in columns.items())} "
                f"WHERE id = %s", (*(new[c] for c in columns), key))


def _server(cur, table: str, columns: dict[str, Column]) -> list[dict]:
    """The rows as the server's client returns them, landed by the type contract."""
    cur.execute(f"SELECT id, {', '.join(columns)} FROM {table} ORDER BY id")
    return [{"id": r[0], **{c: None if v is None else col.lake(v) for (c, col), v in zip(columns.items(), r[1:])}}
            for r in cur.fetchall()]


def _lake(df, columns: dict[str, Column]) -> list[dict]:
    return comparable(df.selectExpr("id", *(f"{col.read.format(c)} AS {c}" for c, col in columns.items())))


def _nan_safe(value):
    """NaN as a marker that equals itself, in lists too (a PostgreSQL float may be NaN)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    return [_nan_safe(v) for v in value] if isinstance(value, list) else value


def _assert_equal(path: str, server: list[dict], lake: list[dict]) -> None:
    assert [r["id"] for r in lake] == [r["id"] for r in server], f"{path}: not the server's rows"
    for want, have in zip(server, lake):
        wrong = {c: (have[c], want[c]) for c in want if _nan_safe(have[c]) != _nan_safe(want[c])}
        assert not wrong, f"{path}, row {want['id']}: column: (lake, server's client) {wrong}"


def _every_path_agrees(spark, mariadb, database, root, params, tmp, columns, drawn, changed):
    import ingest.sources.mysql.jdbc as jdbc
    from ingest.lake.merge import live_rows

    n = next(_examples)
    snap, stream = f"snap{n}", f"stream{n}"
    edges = _edge_rows(columns)
    rows = edges + drawn
    ddl = ", ".join(f"{c} {col.type}" for c, col in columns.items())
    with root.cursor() as cur:
        _session(cur)
        for table in (snap, stream):
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, {ddl})")
        _load(cur, snap, columns, rows)
        server = _server(cur, snap, columns)
    snapshot(spark, params, snap, str(tmp / "jdbc"))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(jdbc, "jdbc_columns", lambda columns, table="?": None)  # the Python data source reads it
        snapshot(spark, params, snap, str(tmp / "python"))
    for reader in ("jdbc", "python"):
        _assert_equal(f"{reader} snapshot", server, _lake(spark.read.format("delta").load(str(tmp / reader)), columns))

    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp, mariadb.port, database, [stream]), tmp / "lake", instance)
        h.snapshot()  # empty: every row arrives through the binlog, inserted, then random ones updated
        h.sync()
        with root.cursor() as cur:  # (the edge rows stay as inserted)
            _session(cur)
            _load(cur, stream, columns, rows)
            for i, new in enumerate(changed):
                _update(cur, stream, columns, new, len(edges) + 2 * i)
            cur.execute(f"DELETE FROM {stream} WHERE id >= {len(edges)} AND id % 7 = 3")
            server = _server(cur, stream, columns)
        h.sync()
        _assert_equal("binlog", server, _lake(live_rows(spark.read.format("delta").load(h.silver_path(stream))), columns))


def _draw(columns: dict[str, Column], rows: int) -> list[dict]:
    """`rows` random rows, ten per hypothesis example: one example of a whole table's rows would outgrow
    the data hypothesis draws per example. Not shrunk: a failure names its row and values already."""
    drawn: list[dict] = []

    @settings(max_examples=rows // 10, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @given(st.lists(_rows(columns), min_size=10, max_size=10))
    def collect(ten):
        drawn.extend(ten)

    collect()
    return drawn


def test_string_and_binary_values_agree_on_every_path_and_with_the_server(
        spark, mariadb, database, root, params, tmp_path_factory):
    _every_path_agrees(spark, mariadb, database, root, params, tmp_path_factory.mktemp("diff"), STRINGS,
                       _draw(STRINGS, ROWS), _draw(STRINGS, ROWS // 2))


def test_number_time_enum_bit_json_geometry_and_address_values_agree_on_every_path_and_with_the_server(
        spark, mariadb, database, root, params, tmp_path_factory):
    _every_path_agrees(spark, mariadb, database, root, params, tmp_path_factory.mktemp("diff"), OTHERS,
                       _draw(OTHERS, ROWS), _draw(OTHERS, ROWS // 2))
