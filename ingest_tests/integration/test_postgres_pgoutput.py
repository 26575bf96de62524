"""pgoutput from a real PostgreSQL 15, read through a slot by SQL and decoded (the PostgreSQL source's base)."""

import secrets

from ingest.sources.postgres.pgoutput import UNCHANGED, Delete, Insert, Truncate, Update, changes, transactions
from ingest.sources.postgres.slot import advance, current_lsn, peek
from ingest_tests.conftest import free_port


def test_a_slot_gives_whole_transactions_in_commit_order_and_keeps_them_until_advanced(pg):
    with pg.connect() as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text, doc text)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        big = secrets.token_hex(20_000)  # too random to compress inline: TOASTed, so an UPDATE that leaves
        # it alone does not send it
        conn.execute("INSERT INTO t VALUES (1, 'a', %s), (2, 'b', 'small')", (big,))
        with conn.transaction():  # one transaction, two statements
            conn.execute("UPDATE t SET note = 'a2' WHERE id = 1")
            conn.execute("UPDATE t SET id = 3 WHERE id = 2")
        conn.execute("DELETE FROM t WHERE id = 3")
        middle = current_lsn(conn)
        conn.execute("ALTER TABLE t ADD COLUMN added int")
        conn.execute("INSERT INTO t VALUES (4, 'd', NULL, 44)")
        conn.execute("TRUNCATE t")

        first = list(transactions(peek(conn, "s", "pub", middle)))
        assert [len(t.changes) for t in first] == [2, 2, 1]  # nothing that commits after `middle`
        commits = [t.commit.commit_lsn for t in first]
        assert commits == sorted(commits) and all(c < middle for c in commits)
        (rel, ins1), (_, ins2) = first[0].changes
        assert (rel.name, [c.name for c in rel.columns], [c.key for c in rel.columns]) == (
            "t", ["id", "note", "doc"], [True, False, False])
        assert ins1 == Insert(rel.oid, ("1", "a", big)) and ins2 == Insert(rel.oid, ("2", "b", "small"))
        (_, upd), (_, moved) = first[1].changes
        assert upd == Update(rel.oid, ("1", "a2", UNCHANGED))  # silver must keep the old doc
        assert moved == Update(rel.oid, ("3", "b", "small"), ("2", None, None))  # the old key, then the row
        assert first[2].changes[0][1] == Delete(rel.oid, ("3", None, None))

        again = list(transactions(peek(conn, "s", "pub", middle)))  # a peek consumes nothing
        assert [t.commit for t in again] == [t.commit for t in first]

        advance(conn, "s", first[-1].commit.end_lsn)
        rest = list(transactions(peek(conn, "s", "pub")))
        assert [type(c).__name__ for t in rest for _, c in t.changes] == ["Insert", "Truncate"]
        (rel2, ins4), (_, trunc) = rest[0].changes + rest[1].changes
        assert [c.name for c in rel2.columns] == ["id", "note", "doc", "added"]  # the new column list came
        assert ins4.new == ("4", "d", None, "44") and trunc == Truncate((rel.oid,), False, False)
        conn.execute("SELECT pg_drop_replication_slot('s')")


GOLDEN = [  # column, type, values (one per row; the first row is the edge cases)
    ("b", "boolean", ["true", "false"]),
    ("i2", "smallint", ["-32768", "7"]),
    ("i8", "bigint", ["9223372036854775807", "-1"]),
    ("f4", "real", ["'NaN'", "1.5"]),
    ("f8", "double precision", ["'-Infinity'", "0.1"]),
    ("n", "numeric(12,3)", ["-123456789.125", "0"]),
    ("wide", "numeric", ["1234567890123456789012345678901234567890.000000000000000000001", "'NaN'"]),
    ("t", "text", ["'quote '' and, comma {x}'", "''"]),
    ("c", "char(4)", ["'ab'", "'abcd'"]),
    ("by", "bytea", ["'\\x00ff10'::bytea", "''::bytea"]),
    ("d", "date", ["'0001-01-01'", "'9999-12-31'"]),
    ("ts", "timestamp(6)", ["'2024-02-29 23:59:59.999999'", "'1970-01-01 00:00:00'"]),
    ("tz", "timestamptz", ["'2024-06-01 12:00:00+05:30'", "'1999-12-31 23:00:00-08'"]),
    ("tm", "time(3)", ["'23:59:59.123'", "'00:00'"]),
    ("iv", "interval", ["'1 year 2 mons 3 days 04:05:06.5'", "'0'"]),
    ("u", "uuid", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "NULL"]),
    ("j", "jsonb", ["'{\"b\": [1, 2], \"a\": null}'", "'[]'"]),
    ("e", "mood", ["'happy'", "'sad'"]),
    ("dm", "positive", ["5", "NULL"]),
    ("ai", "integer[]", ["'{1,NULL,3}'", "'{}'"]),
    ("at", "text[]", ["ARRAY['a b', NULL, 'c,\"d']", "NULL"]),
    ("al", "varchar[]", ["'{x,NULL,yz}'", "NULL"]),  # no quoted element: Arrow splits the column
    ("an", "numeric(5,2)[]", ["'{1.5,NULL,-2}'", "'{}'"]),
    ("bx", "box[]", ["ARRAY[box '((0,0),(1,1))', NULL, box '(2,3),(4,5)']", "'{}'"]),  # ';' separates boxes
]


def arrow_schema(columns, contracts):
    """What Spark's schema gives the executors for these types."""
    import pyarrow as pa

    arrow = {"int": pa.int32(), "boolean": pa.bool_(), "smallint": pa.int16(), "bigint": pa.int64(),
             "float": pa.float32(), "double": pa.float64(), "decimal(12,3)": pa.decimal128(12, 3),
             "string": pa.string(), "binary": pa.binary(), "date": pa.date32(), "timestamp_ntz": pa.timestamp("us"),
             "timestamp": pa.timestamp("us", tz="UTC"), "array<int>": pa.list_(pa.int32()),
             "array<string>": pa.list_(pa.string()), "array<decimal(5,2)>": pa.list_(pa.decimal128(5, 2))}
    return pa.schema([(c, arrow[ct.spark]) for c, ct in zip(columns, contracts)])


def stream_column_values(messages, columns, contracts) -> list[tuple]:
    """The golden table's changes as executors land a batch: in columns of text (changes.TextChanges),
    each column to its Delta type at once, back as Python values."""
    from ingest.sources.postgres.changes import change_columns
    from ingest.sources.postgres.pgoutput import changes
    from ingest.sources.postgres.types import column_array

    schema = arrow_schema(columns, contracts)
    (chunk,) = change_columns(changes(messages, sent=True), "public.golden", columns, lambda _rel: contracts)
    arrays = [column_array(ct, texts, schema.field(i).type).to_pylist()
              for i, (ct, texts) in enumerate(zip(chunk.types, chunk.columns()))]
    return sorted(zip(*arrays), key=lambda r: r[0])


def chunk_values(pg, columns, contracts) -> list[tuple]:
    """The golden table as the snapshot's executors land it: COPY at an exported snapshot, then each
    column to its Delta type (types.column_array), back as Python values."""
    from ingest.sources.postgres.snapshot import copy_chunk
    from ingest.sources.postgres.types import column_array

    schema = arrow_schema(columns, contracts)
    with pg.connect() as holder, pg.connect() as reader:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot = holder.execute("SELECT pg_export_snapshot()").fetchone()[0]
        texts = copy_chunk(reader, snapshot, "public.golden", columns, ["id"], None, None, ["integer"])
        holder.execute("COMMIT")
    arrays = [column_array(ct, texts.column(i), schema.field(i).type).to_pylist() for i, ct in enumerate(contracts)]
    return sorted(zip(*arrays), key=lambda r: r[0])


def test_golden_types_give_the_same_values_through_the_snapshot_text_and_the_stream(pg):
    from ingest.adapters.postgres import PgParams
    from ingest.sources.postgres.schema import types_of

    # the project's own connection: its session settings are the ones the stream's text is written in
    # (a session in the server's defaults gave intervals as '00:00:00' where the snapshot has 'PT0S')
    with PgParams(pg.host, pg.port, pg.user, pg.password, "postgres").connect() as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')")
        conn.execute("CREATE DOMAIN positive AS integer CHECK (VALUE > 0)")
        conn.execute("CREATE TABLE golden (id int PRIMARY KEY, "
                     + ", ".join(f"{c} {t}" for c, t, _ in GOLDEN) + ")")
        conn.execute("CREATE PUBLICATION golden_pub FOR TABLE golden")
        conn.execute("SELECT pg_create_logical_replication_slot('golden_slot', 'pgoutput')")
        for row in range(2):
            conn.execute(f"INSERT INTO golden VALUES ({row}, " + ", ".join(v[row] for _, _, v in GOLDEN) + ")")

        streamed = list(transactions(peek(conn, "golden_slot", "golden_pub")))
        relation = streamed[0].changes[0][0]
        types = types_of(conn, [c.type_oid for c in relation.columns])
        contracts = [types[c.type_oid].contract(c.type_modifier) for c in relation.columns]

        def land(texts):
            return tuple(None if v is None else (ct.convert(v) if ct.convert else v) for ct, v in zip(contracts, texts))

        from_stream = [land(change.new) for t in streamed for _, change in t.changes]
        names = [c.name for c in relation.columns]
        from_stream_columns = stream_column_values(peek(conn, "golden_slot", "golden_pub"), names, contracts)
        # the snapshot's text: each type's output function, as pgoutput uses (not a ::text cast: 'true' vs 't')
        result = conn.pgconn.exec_(b"SELECT * FROM golden ORDER BY id")
        rows = [[None if result.get_value(r, c) is None else result.get_value(r, c).decode()
                 for c in range(result.nfields)] for r in range(result.ntuples)]
        from_snapshot = [land(r) for r in rows]
        from_chunks = chunk_values(pg, [c.name for c in relation.columns], contracts)
        conn.execute("SELECT pg_drop_replication_slot('golden_slot')")

    import datetime as dt
    import math
    from decimal import Decimal

    assert [ct.spark for ct in contracts] == [
        "int", "boolean", "smallint", "bigint", "float", "double", "decimal(12,3)", "string", "string", "string",
        "binary", "date", "timestamp_ntz", "timestamp", "string", "string", "string", "string", "string", "int",
        "array<int>", "array<string>", "array<string>", "array<decimal(5,2)>", "array<string>"]

    def nan_safe(rows):
        return [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows]

    assert nan_safe(from_stream) == nan_safe(from_snapshot) == nan_safe(from_chunks) == nan_safe(from_stream_columns)
    first = dict(zip([c.name for c in relation.columns], from_stream[0]))
    assert first["n"] == Decimal("-123456789.125") and first["f8"] == -math.inf
    assert first["wide"] == "1234567890123456789012345678901234567890.000000000000000000001"
    assert first["c"] == "ab  " and first["by"] == b"\x00\xff\x10" and first["d"] == dt.date(1, 1, 1)
    assert first["ts"] == dt.datetime(2024, 2, 29, 23, 59, 59, 999999)
    assert first["tz"] == dt.datetime(2024, 6, 1, 6, 30, tzinfo=dt.timezone.utc)
    assert (first["tm"], first["iv"]) == ("23:59:59.123", "P1Y2M3DT4H5M6.5S")
    assert first["j"] == '{"a": null, "b": [1, 2]}' and first["e"] == "happy" and first["dm"] == 5
    assert first["ai"] == [1, None, 3] and first["at"] == ["a b", None, 'c,"d']
    assert first["al"] == ["x", None, "yz"] and first["an"] == [Decimal("1.50"), None, Decimal("-2.00")]
    assert first["bx"] == ["(1,1),(0,0)", None, "(4,5),(2,3)"]
    second = dict(zip([c.name for c in relation.columns], from_stream[1]))
    assert second["wide"] == "NaN" and second["iv"] == "PT0S"


def test_preflight_names_each_missing_setting_right_and_table_with_its_fix(pg):
    import psycopg

    from ingest.localdev.postgres import PostgresServer
    from ingest.sources.findings import failed
    from ingest.sources.postgres.preflight import findings, gather

    with pg.connect() as conn:
        conn.execute("CREATE ROLE reader LOGIN PASSWORD 'r'")
        conn.execute("CREATE TABLE keyed (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE keyless (v int)")
        conn.execute("CREATE TABLE unpublished (id int PRIMARY KEY)")
        conn.execute("GRANT SELECT ON keyed, keyless TO reader")
        conn.execute("CREATE PUBLICATION shop FOR TABLE keyed, keyless")
        tables = ["public.keyed", "public.keyless", "public.unpublished", "public.gone"]
        ok = findings("shop", "shop", *gather(conn, "shop", ["public.keyed"]))
        assert [f.level for f in ok] == ["ok"], ok
    with psycopg.connect(host=pg.host, port=pg.port, user="reader", password="r", dbname="postgres") as conn:
        lines = [f.line() for f in failed(findings("shop", "shop", *gather(conn, "shop", tables)))]
        missing_pub = [f.line() for f in findings("shop", "nopub", *gather(conn, "nopub", ["public.keyed"]))]
    assert any("may not use replication slots" in line and "ALTER ROLE" in line for line in lines), lines
    assert any(line.startswith("FAIL  public.keyless: no primary key") for line in lines), lines
    assert any("public.unpublished: not in publication 'shop'" in line and "ADD TABLE" in line for line in lines)
    assert any("public.unpublished: the role may not SELECT" in line for line in lines), lines
    assert any(line.startswith("FAIL  public.gone: no such table") for line in lines), lines
    assert not any(line.startswith("FAIL  public.keyed") for line in lines), lines
    assert any("publication 'nopub' does not exist" in line for line in missing_pub), missing_pub

    replica = PostgresServer(free_port(), settings={"wal_level": "replica"}).start()
    try:
        with replica.connect() as conn:
            assert any("wal_level is 'replica'" in f.message and "ALTER SYSTEM SET wal_level = logical" in f.message
                       for f in findings("shop", "shop", *gather(conn, "shop", [])))
    finally:
        replica.stop()


def test_chunks_read_at_the_slots_snapshot_and_its_stream_give_the_table_as_it_is_now(pg):
    """The hand-off: rows read at the exported snapshot (position: the consistent point, index 0) and
    the changes the slot streams (after it) applied in position order equal the table, although
    writes ran between the slot's creation and the chunk reads, and a transaction was open when the
    slot was asked for (the server waits for it: it is in the snapshot, not in the stream)."""
    import threading

    from ingest.changes import ChangeOp
    from ingest.sources.postgres.changes import change_records
    from ingest.sources.postgres.schema import types_of
    from ingest.sources.postgres.slot import exported_snapshot
    from ingest.sources.postgres.snapshot import read_chunk

    params = dict(host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname="postgres")
    with pg.connect() as conn, pg.connect() as early, pg.connect() as reader:
        conn.execute("CREATE TABLE h (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO h SELECT g, 'v' || g FROM generate_series(1, 100) g")
        conn.execute("CREATE PUBLICATION h_pub FOR TABLE h")
        early.execute("BEGIN")
        early.execute("UPDATE h SET v = 'early' WHERE id = 50")
        committer = threading.Timer(1.0, early.execute, ("COMMIT",))
        committer.start()
        with exported_snapshot(params, "h_slot") as start:
            committer.join()
            conn.execute("INSERT INTO h VALUES (101, 'new'), (7, 'x') ON CONFLICT (id) DO UPDATE SET v = 'seven'")
            conn.execute("DELETE FROM h WHERE id BETWEEN 10 AND 19")
            conn.execute("UPDATE h SET id = 1000 WHERE id = 99")
            chunks = [read_chunk(reader, start.snapshot, "public.h", ["id", "v"], ["id"], lo, hi)
                      for lo, hi in ((None, (40,)), ((40,), (80,)), ((80,), None))]
        snapshot = {int(i): v for c in chunks for i, v in c}
        assert len(snapshot) == 100 and snapshot[50] == "early" and snapshot[7] == "v7"

        state = {i: (v, start.consistent_point.row_pos()) for i, v in snapshot.items()}
        types = types_of(conn, [23, 25])
        records = change_records(changes(peek(conn, "h_slot", "h_pub")), {"public.h"},
                                 lambda rel: [types[c.type_oid].contract(c.type_modifier) for c in rel.columns])
        for r in sorted(records, key=lambda r: r.pos):
            assert r.pos > start.consistent_point.row_pos()  # everything streamed is newer than the snapshot
            if r.op == ChangeOp.DELETE:
                state.pop(r.row["id"], None)
            else:
                state[r.row["id"]] = (r.row["v"], r.pos)
        now = dict(conn.execute("SELECT id, v FROM h").fetchall())
        assert {k: v for k, (v, _) in state.items()} == now and now[7] == "seven" and now[1000] == "v99"
        conn.execute("SELECT pg_drop_replication_slot('h_slot')")
