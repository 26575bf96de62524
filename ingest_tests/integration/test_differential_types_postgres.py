"""Differential, PostgreSQL: random values of its column types, edge values included, land the same
through both snapshot readers (Spark's JDBC reader, the Python data source over COPY) and through the
slot's changes (insert, update, delete, an update that leaves a TOASTed value unsent), decoded by the
run and by Spark's executors, and each equals what the server's client (psycopg) returns, as the type
contract (ingest/sources/postgres/types.py) lands it: a type the contract keeps as text, as the type's
output function writes it (issue 49).

Types: boolean, every integer width at its limits, real and double (NaN, infinities, -0), numeric with
and without a precision (NaN and infinities where the contract keeps text), money, char(n) (padded),
varchar, text (TOAST-sized too), bytea, date, timestamp, timestamptz, time, timetz, interval, uuid,
json, jsonb, inet, int4range, tstzrange, an enum, a domain, and arrays of integers, text and varchar."""

import datetime as dt
import json
import math
import random
import struct
from decimal import Decimal

import yaml
from dagster import DagsterInstance
from hypothesis import strategies as st

from ingest_tests.integration.cdc_harness import HARNESS_CDC, CdcHarness
from ingest_tests.integration.test_differential_types import ROWS, Column, _assert_equal, _draw, _edge_rows, _lake

UTC = dt.timezone.utc
TEXT = "text"
"""A Column's `read` marker here: the client's value is the output function's text (the contract's strings)."""


def typed(kind: str, values, edges=(), lake=lambda v: v, read="{}") -> Column:
    return Column(kind, values, edges=edges, placeholder=f"%s::{kind}", lake=lake, read=read)


def text(kind: str, values, edges=(), placeholder=None) -> Column:
    """A type the contract lands as its output function's text: the client's raw text is the value."""
    return Column(kind, values, edges=edges, placeholder=placeholder or f"%s::{kind}", lake=TEXT)


def _float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _utc_text(value: dt.datetime) -> str:
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")  # years < 1000 padded too


def _toast(seed: int) -> str:
    """Incompressible text past TOAST's 2 kB threshold, so the server stores it out of line."""
    return random.Random(seed).randbytes(12_000).hex()


_INT = {"smallint": 16, "integer": 32, "bigint": 64}
_instants = st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30), timezones=st.sampled_from(
    [UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(-dt.timedelta(hours=8))]))
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53) | st.text(alphabet="a \u00fc\"\\\n\U0001F600/"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet="k\u00e9 ", max_size=3), inner,
                                                                max_size=3),
    max_leaves=6).map(lambda v: json.dumps(v, ensure_ascii=False))
_array_text = st.text(alphabet='a ,"\\{}\u00fc', max_size=4)

COLUMNS = {
    "b": typed("boolean", st.booleans(), edges=(True, False)),
    **{f"i{bits // 8}": typed(kind, st.integers(-2 ** (bits - 1), 2 ** (bits - 1) - 1),
                              edges=(-2 ** (bits - 1), 2 ** (bits - 1) - 1, 0)) for kind, bits in _INT.items()},
    "f4": typed("real", st.floats(width=32), lake=_float32,
                edges=(math.nan, math.inf, -math.inf, -0.0, 3.4028234663852886e38, 1e-45)),
    "f8": typed("double precision", st.floats(), edges=(math.nan, -math.inf, 5e-324, 0.1)),
    "n": typed("numeric(12,3)", st.decimals(-Decimal("999999999.999"), Decimal("999999999.999"), places=3),
               edges=(Decimal("-999999999.999"), Decimal(0))),
    "nw": text("numeric", st.decimals(-10 ** 40, 10 ** 40, allow_nan=False, allow_infinity=False),
               edges=("NaN", "Infinity", "-Infinity", "0.000000000000000000000000000001",
                      "1234567890123456789012345678901234567890.000000000000000000001")),
    "m": text("money", st.decimals(-10 ** 7, 10 ** 7, places=2), placeholder="%s::numeric::money",
              edges=(Decimal("-0.01"), Decimal("1234567.89"))),
    "c": typed("char(5)", st.text(alphabet=" a\u00fc", max_size=5), edges=("", " ", "ab", "  a  ")),
    "vc": typed("varchar(10)", st.text(alphabet=" b\u00e9\t\U0001F600", max_size=10), edges=("", " ")),
    "t": typed("text", st.text(alphabet=" c\u00fc\n'\\,{}\"", max_size=30), edges=("", "quote ' and, comma {x}")),
    "tt": typed("text", st.integers(0, 2 ** 32).map(_toast), edges=(_toast(0),)),
    "by": typed("bytea", st.binary(max_size=8), edges=(b"", b"\x00", b"\\x00")),
    "d": typed("date", st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)), edges=(dt.date(1, 1, 1),)),
    "ts": typed("timestamp(6)", st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
                edges=(dt.datetime(1, 1, 1), dt.datetime(1582, 10, 10, 12))),
    "tz": typed("timestamptz", _instants, lake=_utc_text, read="date_format({}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')",
                edges=(dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1, 1, 2, 0, 0, 0, 1, tzinfo=UTC),
                       dt.datetime(1582, 10, 10, 12, tzinfo=UTC), dt.datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC))),
    "tm": text("time(3)", st.times().map(str), edges=("00:00", "23:59:59.999", "24:00:00")),
    "ttz": text("timetz", st.tuples(st.times(), st.integers(-12, 12)).map(lambda p: f"{p[0]}{p[1]:+03d}"),
                edges=("00:00+00", "23:59:59.5-0530")),
    "iv": text("interval", st.tuples(st.integers(-1200, 1200), st.integers(-1000, 1000),
                                     st.integers(-10 ** 12, 10 ** 12))
               .map(lambda p: f"{p[0]} mons {p[1]} days {p[2]} microseconds"),
               edges=("0", "1 year 2 mons 3 days 04:05:06.5", "-1 day", "-00:00:00.000001")),
    "u": text("uuid", st.uuids().map(str), edges=("00000000-0000-0000-0000-000000000000",)),
    "j": text("json", _json, edges=('{"b": [1, 2], "a": null}', "[]", ' { "k" : 1 } ')),
    "jb": text("jsonb", _json, edges=('{"b": [1, 2], "a": null, "a": 3}', '"\u00fc\U0001F600"')),
    "ip": text("inet", st.ip_addresses().map(str) | st.ip_addresses(v=4).map(lambda a: f"{a}/24"),
               edges=("10.0.0.1/32", "::ffff:1.2.3.4", "192.168.0.0/16")),
    "r": text("int4range", st.tuples(st.integers(-1000, 1000), st.integers(-1000, 1000))
              .map(lambda p: f"[{min(p)},{max(p)})"), edges=("empty", "(,)", "(1,2]")),
    "tr": text("tstzrange", _instants.map(lambda d: f"[{d.isoformat()},)"), edges=("(,)", "empty")),
    "e": text("mood", st.sampled_from(["sad", "happy", "\u00fc ok"]), edges=("\u00fc ok",)),
    "dm": typed("positive", st.integers(1, 2 ** 31 - 1), edges=(1, 2 ** 31 - 1)),
    "ai": typed("integer[]", st.lists(st.none() | st.integers(-2 ** 31, 2 ** 31 - 1), max_size=4),
                edges=([], [None], [1, None, 3])),
    "at": typed("text[]", st.lists(st.none() | _array_text, max_size=3), edges=([], ["a b", None, 'c,"d'], [""])),
    "al": typed("varchar[]", st.lists(st.none() | _array_text, max_size=3), edges=(["x", None, "yz"],)),
}


def _server(conn, table: str) -> list[dict]:
    """The rows as psycopg returns them, and a text type's value as the server's output function gives
    it (its raw text), landed by the type contract."""
    from ingest.sources.postgres.schema import set_session

    set_session(conn)
    names = ["id", *COLUMNS]
    # (a text type's typed value is not used: psycopg cannot load an interval in the ISO style)
    typed_rows = conn.execute(f"SELECT id, {', '.join(f'{c}::text' if col.lake == TEXT else c for c, col in COLUMNS.items())} "
                              f"FROM {table} ORDER BY id").fetchall()
    raw = conn.pgconn.exec_(f"SELECT {', '.join(names)} FROM {table} ORDER BY id".encode())
    out = []
    for r, row in enumerate(typed_rows):
        landed = {"id": row[0]}
        for i, (name, col) in enumerate(COLUMNS.items(), start=1):
            if row[i] is None:
                landed[name] = None
            elif col.lake == TEXT:
                landed[name] = raw.get_value(r, i).decode()
            else:
                landed[name] = col.lake(row[i])
        out.append(landed)
    return out


def _load(conn, table: str, rows: list[dict], first_id: int = 0) -> None:
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} (id, {', '.join(COLUMNS)}) "
                        f"VALUES (%s, {', '.join(col.placeholder for col in COLUMNS.values())})",
                        [(first_id + i, *(r[c] for c in COLUMNS)) for i, r in enumerate(rows)])


def _update(conn, table: str, new: dict, key: int) -> None:
    conn.execute(f"UPDATE {table} SET {', '.join(f'{c} = {col.placeholder}' for c, col in COLUMNS.items())} "
                 "WHERE id = %s", (*(new[c] for c in COLUMNS), key))


def _source(spark, pg, tmp_path, name: str, table: str, **cdc) -> CdcHarness:
    sources = tmp_path / f"{name}.yaml"
    sources.write_text(yaml.safe_dump({"sources": {name: {
        "kind": "postgres", "host": pg.host, "port": pg.port, "user": pg.user, "password_env": "INGEST_TEST_PG_PASSWORD",
        "database": "postgres", "publication": f"{table}_pub", "slot": f"{name}_slot", "tables": {"include": [table]},
        "snapshot": {"chunk_size": 100, "parallelism": 2, "chunks_per_commit": 2}, "cdc": {**HARNESS_CDC, **cdc}}}}))
    return CdcHarness(spark, sources, tmp_path / f"{name}_lake", DagsterInstance.ephemeral(), name=name)


def test_every_type_agrees_on_every_path_and_with_the_server(pg, spark, tmp_path, monkeypatch):
    import ingest.adapters.postgres as adapter
    import ingest.sources.postgres.jdbc as jdbc
    from ingest.adapters.postgres import PgParams, PgSnapshotWrite
    from ingest.lake.merge import live_rows

    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    edges = _edge_rows(COLUMNS)
    rows, changed = edges + _draw(COLUMNS, ROWS), _draw(COLUMNS, ROWS // 2)
    ddl = ", ".join(f"{c} {col.type}" for c, col in COLUMNS.items())
    with pg.connect() as conn:
        conn.execute("DO $$ BEGIN CREATE TYPE mood AS ENUM ('sad', 'happy', '\u00fc ok'); "
                     "CREATE DOMAIN positive AS integer CHECK (VALUE > 0); EXCEPTION WHEN duplicate_object THEN END $$")
        for table in ("diff_snap", "diff_stream"):
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, {ddl})")
            conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
        _load(conn, "diff_snap", rows)
        server = _server(conn, "diff_snap")

    used = []
    for name in ("chunks_df", "chunks_jdbc_df"):
        monkeypatch.setattr(adapter, name, lambda *a, _real=getattr(adapter, name), _name=name, **k:
                            used.append(_name) or _real(*a, **k))
    params = PgParams(pg.host, pg.port, pg.user, pg.password, "postgres")
    for reader in ("jdbc", "python"):
        with monkeypatch.context() as m:
            if reader == "python":
                m.setattr(jdbc, "jdbc_columns", lambda *a: None)
            path = str(tmp_path / reader)
            PgSnapshotWrite("shop", params, f"diff_{reader}_slot", "public.diff_snap", chunk_size=100,
                            parallelism=2, chunks_per_commit=4).apply(spark, path, print)
        with pg.connect() as conn:
            conn.execute(f"SELECT pg_drop_replication_slot('diff_{reader}_slot')")
        _assert_equal(f"{reader} snapshot", server, _lake(spark.read.format("delta").load(path), COLUMNS))
    assert set(used) == {"chunks_jdbc_df", "chunks_df"}  # each reader read its snapshot

    # the stream, decoded by the run and by Spark's executors: two sources with a slot each
    run_decoded, executors = (_source(spark, pg, tmp_path, "pgrun", "diff_stream"),
                              _source(spark, pg, tmp_path, "pgexec", "diff_stream", executor_min_bytes=0))
    for h in (run_decoded, executors):
        h.snapshot()  # empty: every row arrives through the slot
    with pg.connect() as conn:
        _load(conn, "diff_stream", rows)
        for i, new in enumerate(changed):  # the edge rows stay as inserted
            _update(conn, "diff_stream", new, len(edges) + 2 * i)
        conn.execute(f"DELETE FROM diff_stream WHERE id >= {len(edges)} AND id % 7 = 3")
        conn.execute("UPDATE diff_stream SET i2 = 7 WHERE id % 5 = 1")  # their TOASTed tt is not sent
        server = _server(conn, "diff_stream")
    try:
        for name, h in (("run", run_decoded), ("executors", executors)):
            while h.sync() is not None:
                pass
            _assert_equal(f"stream decoded by the {name}", server,
                          _lake(live_rows(spark.read.format("delta").load(h.silver_path("diff_stream"))), COLUMNS))
    finally:
        with pg.connect() as conn:
            for name in ("pgrun", "pgexec"):
                conn.execute(f"SELECT pg_drop_replication_slot('{name}_slot') FROM pg_replication_slots "
                             f"WHERE slot_name = '{name}_slot'")
