"""PostgreSQL change batches from a real PostgreSQL 15 slot into real Delta bronze and silver tables:
whole transactions per batch, the slot confirmed only when asked, TOASTed values an UPDATE did not
send kept in silver, columns added and dropped, and a slot that is gone or invalidated named."""

import secrets
import time

import pytest

from ingest.changes import UNCHANGED
from ingest.lake.bronze import bronze_writes
from ingest.lake.merge import live_rows
from ingest.lake.silver import merge_bronze
from ingest.sources.postgres.cdc import SlotLost, confirm, plan_next_batch, read_change_batch, slot_state
from ingest_tests.conftest import free_port

TABLE = "public.docs"


def land(spark, conn, tmp_path, batch_range):
    """One batch through the lake's path: bronze append per table, then the ordered merge into silver."""
    from pyspark.sql import functions as F

    batch = read_change_batch(conn, "shop", "docs_slot", "docs_pub", batch_range, [TABLE])
    for table, write in bronze_writes("shop", batch).items():
        write.apply(spark, str(tmp_path / "bronze"), print)
        changes = spark.read.format("delta").load(str(tmp_path / "bronze")).where(F.col("_batch") == batch.key)
        merge_bronze(spark, str(tmp_path / "silver"), changes, ["id"], {"kind": "silver", "batch": batch.key},
                     f"silver:{batch.key}")
    return batch


def silver(spark, tmp_path):
    return {r["id"]: r.asDict() for r in live_rows(spark.read.format("delta").load(str(tmp_path / "silver")))
            .drop("_pos").collect()}


def source(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM docs ORDER BY id")
        names = [d.name for d in cur.description]
        return {r[0]: dict(zip(names, r)) for r in cur.fetchall()}


def test_batches_land_whole_transactions_keep_unsent_toast_values_and_follow_columns(pg, spark, tmp_path):
    big, big2 = secrets.token_hex(20_000), secrets.token_hex(20_000)  # too random to compress: TOASTed
    with pg.connect() as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, note text, doc text)")
        conn.execute("CREATE PUBLICATION docs_pub FOR TABLE docs")
        conn.execute("SELECT pg_create_logical_replication_slot('docs_slot', 'pgoutput')")
        start = slot_state(conn, "shop", "docs_slot").confirmed
        conn.execute("INSERT INTO docs VALUES (1, 'a', %s), (2, 'b', 'small')", (big,))

        first = plan_next_batch(None, start, slot_state(conn, "shop", "docs_slot").head)
        batch = land(spark, conn, tmp_path, first)
        assert batch.positions["transactions"] == 1 and silver(spark, tmp_path) == source(conn)
        assert slot_state(conn, "shop", "docs_slot").confirmed == start  # reading consumed nothing

        conn.execute("UPDATE docs SET note = 'a2' WHERE id = 1")  # doc not sent: TOASTed and unchanged
        with conn.transaction():  # a new row's TOASTed value, then an update that does not send it, in one batch
            conn.execute("INSERT INTO docs VALUES (3, 'c', %s)", (big2,))
            conn.execute("UPDATE docs SET note = 'c2' WHERE id = 3")
        conn.execute("UPDATE docs SET doc = NULL WHERE id = 2")  # a NULL sent is a NULL kept
        second = plan_next_batch(first.end, None, slot_state(conn, "shop", "docs_slot").head)
        batch = land(spark, conn, tmp_path, second)
        unsent = [r.row["id"] for t in batch.tables.values() for r in t.records if r.row.get("doc") is UNCHANGED]
        assert unsent == [1, 3]  # the updates of 1 and 3 did not send doc: the lake filled it
        assert batch.positions["transactions"] == 3 and silver(spark, tmp_path) == source(conn)
        assert silver(spark, tmp_path)[1]["doc"] == big and silver(spark, tmp_path)[3]["doc"] == big2

        # the first batch's transactions are still in the slot (not confirmed): the read leaves them out
        assert read_change_batch(conn, "shop", "docs_slot", "docs_pub", second, [TABLE]).positions == batch.positions
        confirm(conn, "shop", "docs_slot", second.end)
        assert slot_state(conn, "shop", "docs_slot").confirmed == second.end
        with pytest.raises(SlotLost, match=r"docs_slot.*released everything before"):
            read_change_batch(conn, "shop", "docs_slot", "docs_pub", first, [TABLE])

        conn.execute("ALTER TABLE docs ADD COLUMN rating int")
        conn.execute("UPDATE docs SET rating = 5 WHERE id = 2")
        conn.execute("UPDATE docs SET note = 'b3' WHERE id = 2")
        conn.execute("ALTER TABLE docs DROP COLUMN note")
        conn.execute("INSERT INTO docs VALUES (4, NULL, 4)")
        third = plan_next_batch(second.end, None, slot_state(conn, "shop", "docs_slot").head)
        land(spark, conn, tmp_path, third)
        lake = silver(spark, tmp_path)
        assert {k: {c: v for c, v in row.items() if c != "note"} for k, row in lake.items()} == source(conn)
        assert lake[2]["rating"] == 5 and lake[2]["note"] == "b3"  # a dropped column keeps its last values
        bronze = spark.read.format("delta").load(str(tmp_path / "bronze"))
        assert {"note", "rating", "_unchanged"} <= set(bronze.columns)
        assert plan_next_batch(third.end, None, third.end) is None


def two_tables(conn, prefix: str, key_type: str):
    """{prefix}_a (id, note, doc; row 1's doc TOASTed) and {prefix}_b (k of `key_type`, n), published by
    {prefix}_pub, and a slot {prefix}_slot: where it starts."""
    conn.execute(f"CREATE TABLE {prefix}_a (id int PRIMARY KEY, note text, doc text)")
    conn.execute(f"CREATE TABLE {prefix}_b (k {key_type} PRIMARY KEY, n int)")
    conn.execute(f"INSERT INTO {prefix}_a VALUES (1, 'a', %s)", (secrets.token_hex(20_000),))
    conn.execute(f"CREATE PUBLICATION {prefix}_pub FOR TABLE {prefix}_a, {prefix}_b")
    conn.execute(f"SELECT pg_create_logical_replication_slot('{prefix}_slot', 'pgoutput')")
    return slot_state(conn, "shop", f"{prefix}_slot").confirmed


def test_a_large_batch_is_planned_from_the_first_change_of_each_run_and_plans_as_every_message_does(pg):
    """A batch the executors read is planned from what the server leaves of it (slot.peek_runs: the first
    of each run of a table's row changes, and the UPDATEs that sent an old key or may have left a TOASTed
    value unsent), and the plan is the one every message gives: transactions, commit times, relations,
    TRUNCATE places and unsent values. A TRUNCATE after its table's changes in one transaction is placed
    from every message."""
    from contextlib import closing

    from ingest.sources.postgres.cdc import RelationContracts, plan_large_batch
    from ingest.sources.postgres.changes import KeyMoves
    from ingest.sources.postgres.pgoutput import PlacesUnknown, plan_batch
    from ingest.sources.postgres.positions import LsnRange, decode_pos
    from ingest.sources.postgres.slot import peek, peek_runs

    def plans(conn, batch):
        contracts = RelationContracts(conn)
        every = plan_batch(peek(conn, "runs_slot", "runs_pub", batch.end), batch, tables,
                           KeyMoves(contracts, contracts.primary_key))
        return every, plan_large_batch(conn, "runs_slot", "runs_pub", batch, tables, contracts)

    def same(every, runs):
        assert (runs.transactions, runs.newest, runs.newest_of, runs.oldest_of, runs.truncates, runs.unchanged) == (
            every.transactions, every.newest, every.newest_of, every.oldest_of, every.truncates, every.unchanged)
        assert [r.columns for r in runs.relations.values()] == [r.columns for r in every.relations.values()]

    tables = {"public.runs_a", "public.runs_b"}
    with pg.connect() as conn:
        start = two_tables(conn, "runs", "int")
        with conn.transaction():  # runs of both tables, interleaved
            conn.execute("INSERT INTO runs_a SELECT g, 'x' || g, NULL FROM generate_series(2, 2000) g")
            conn.execute("INSERT INTO runs_b SELECT g, g FROM generate_series(1, 2000) g")
            conn.execute("UPDATE runs_a SET note = 'y' WHERE id BETWEEN 2 AND 1000")
            conn.execute("UPDATE runs_b SET k = -k WHERE k <= 3")  # new keys: a delete and an insert each
            conn.execute("DELETE FROM runs_a WHERE id > 1500")
        conn.execute("UPDATE runs_a SET note = 'z' WHERE id = 1")  # doc not sent
        conn.execute("ALTER TABLE runs_b ADD COLUMN m int")
        conn.execute("INSERT INTO runs_b SELECT g, g, g FROM generate_series(3000, 3500) g")
        conn.execute("TRUNCATE runs_b")  # alone in its transaction: placed first
        batch = LsnRange(start, slot_state(conn, "shop", "runs_slot").head)
        every, runs = plans(conn, batch)
        same(every, runs)
        assert runs.unchanged == {"public.runs_a"} and len(runs.truncates["public.runs_b"]) == 1
        assert runs.transactions == 4  # the ALTER is none
        assert [[c.name for c in r.columns] for r in runs.relations.values() if r.name == "runs_b"][-1] == ["k", "n", "m"]
        kept = sum(1 for _ in peek_runs(conn, "runs_slot", "runs_pub", batch.end))
        assert kept < sum(1 for _ in peek(conn, "runs_slot", "runs_pub", batch.end)) / 100

        confirm(conn, "shop", "runs_slot", batch.end)
        with conn.transaction():
            conn.execute("INSERT INTO runs_b SELECT g, g FROM generate_series(1, 50) g")
            conn.execute("TRUNCATE runs_b")
            conn.execute("INSERT INTO runs_b VALUES (1, 1)")
        second = LsnRange(batch.end, slot_state(conn, "shop", "runs_slot").head)
        contracts = RelationContracts(conn)
        with closing(peek_runs(conn, "runs_slot", "runs_pub", second.end)) as messages, pytest.raises(PlacesUnknown):
            plan_batch(messages, second, tables, KeyMoves(contracts, contracts.primary_key), runs=True)
        every, runs = plans(conn, second)
        same(every, runs)
        (truncate,) = runs.truncates["public.runs_b"]
        assert decode_pos(truncate)[1] == 51  # after the transaction's 50 inserts
        conn.execute("SELECT pg_drop_replication_slot('runs_slot')")


def test_a_dropped_or_invalidated_slot_stops_the_batch_naming_the_slot_and_the_fix(pg):
    from ingest.localdev.postgres import PostgresServer
    from ingest.sources.postgres.positions import Lsn, LsnRange

    with pg.connect() as conn:
        with pytest.raises(SlotLost, match=r"'gone_slot' does not exist.*Fix: re-snapshot"):
            read_change_batch(conn, "shop", "gone_slot", "docs_pub", LsnRange(Lsn(1), Lsn(2)), [TABLE])

    tight = PostgresServer(free_port(), settings={"max_slot_wal_keep_size": "1MB", "max_wal_size": "32MB",
                                                  "min_wal_size": "32MB"}).start()
    try:
        with tight.connect() as conn:
            conn.execute("SELECT pg_create_logical_replication_slot('tight_slot', 'pgoutput')")
            conn.execute("CREATE TABLE filler (v text)")
            for _ in range(4):  # WAL past the slot's limit, segment by segment, then a checkpoint drops it
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 20000)")
            conn.execute("CHECKPOINT")
            with pytest.raises(SlotLost, match=r"'tight_slot' was invalidated.*max_slot_wal_keep_size"):
                slot_state(conn, "shop", "tight_slot")
    finally:
        tight.stop()


def test_a_snapshot_read_at_an_exported_snapshot_then_batches_from_its_log_start_give_the_table(pg, spark, tmp_path):
    """Chunks (text composite key, several waves, two executors) at the temporary slot's point; the
    source's slot made first, so changes during and after the snapshot reach silver through batches."""
    import threading

    from ingest.adapters.postgres import PgParams, PgSnapshotWrite
    from ingest.lake.deltalog import last_commit
    from ingest.lake.silver import SilverFromBatch
    from ingest.lake.tables import LakeTable
    from ingest.sources.postgres.positions import Lsn, LsnRange

    params = PgParams(pg.host, pg.port, pg.user, pg.password, "postgres")
    with pg.connect() as conn:
        conn.execute("CREATE TABLE items (region text, id int, price numeric(10,2), seen timestamptz, tags text[], "
                     "PRIMARY KEY (region, id))")
        conn.execute("INSERT INTO items SELECT r, g, g * 1.5, '2026-01-01 00:00+00'::timestamptz + g * interval '1 h', "
                     "ARRAY['a', NULL] FROM unnest(ARRAY['eu', 'us', 'ap']) r, generate_series(1, 300) g")
        conn.execute("CREATE PUBLICATION items_pub FOR TABLE items")
        write = PgSnapshotWrite("shop", params, "items_slot", "public.items", chunk_size=100, parallelism=2,
                                chunks_per_commit=4)
        paths = {layer: str(tmp_path / layer) for layer in ("snapshot", "bronze", "silver")}
        writer = threading.Timer(0.5, conn.execute, ("UPDATE items SET price = 0 WHERE id = 7",))
        writer.start()  # during the snapshot: in it or in the stream, and silver ends right either way
        meta = write.apply(spark, paths["snapshot"], print)
        writer.join()
        assert meta["rows"] == 900 and meta["chunks"] == 9
        waves = last_commit(paths["snapshot"], kind="snapshot")
        assert waves.metadata["complete"] and waves.metadata["wave"] == 2  # 9 chunks, 4 a commit
        assert Lsn.from_metadata(waves.metadata["read_at"]) >= Lsn.from_metadata(meta["log_start"])

        conn.execute("DELETE FROM items WHERE region = 'ap' AND id > 250")
        conn.execute("UPDATE items SET tags = ARRAY['b'] WHERE region = 'eu' AND id = 1")
        batch = LsnRange(Lsn.from_metadata(meta["log_start"]), slot_state(conn, "shop", "items_slot").head)
        for write_ in bronze_writes("shop", read_change_batch(conn, "shop", "items_slot", "items_pub", batch,
                                                               ["public.items"])).values():
            write_.apply(spark, paths["bronze"], print)
        SilverFromBatch("shop", "public.items", LakeTable(spark, paths["bronze"], batch.key),
                        LakeTable(spark, paths["snapshot"])).apply(spark, paths["silver"], print)
        got = {(r["region"], r["id"]): (r["price"], r["seen"], r["tags"]) for r in
               live_rows(spark.read.format("delta").load(paths["silver"])).collect()}
        with conn.cursor() as cur:
            cur.execute("SET TimeZone = 'UTC'")
            cur.execute("SELECT region, id, price, seen, tags FROM items")
            want = {(r[0], r[1]): (r[2], r[3].replace(tzinfo=None), r[4]) for r in cur.fetchall()}
        assert got == want and len(got) == 850 and got[("eu", 7)][0] == 0


def copies(conn) -> int:
    """Temporary copies of big_slot (slot.reading_copy) the server still has."""
    return conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'big_slot_r%'").fetchone()[0]


def test_a_batch_too_large_for_the_run_lands_in_bronze_as_the_run_would_land_it(pg, spark, tmp_path):
    """A batch of executor_min_bytes or more is only planned in the run: an executor reads each table's
    changes from the slot, or several share them (cdc.executor_readers). Bronze gets the same rows, `_pos`
    and `_unchanged` included, and the same TRUNCATE positions and newest and oldest commits as from the
    same batch read in the run, which holds no change."""
    from ingest.adapters.postgres import PgParams, change_batch_writes
    from ingest.lake.bronze import BatchSummary
    from ingest.lake.deltalog import last_commit
    from ingest.sources.postgres.positions import LsnRange

    params = PgParams(pg.host, pg.port, pg.user, pg.password, "postgres")
    with pg.connect() as conn:
        start = two_tables(conn, "big", "text")
        try:
            with conn.transaction():  # both tables in one transaction: a table's places count its own changes
                conn.execute("INSERT INTO big_b SELECT 'k' || g, g FROM generate_series(1, 3000) g")
                conn.execute("INSERT INTO big_a SELECT g, 'n' || g, NULL FROM generate_series(2, 3000) g")
                conn.execute("UPDATE big_a SET note = 'a2' WHERE id = 1")  # doc not sent
                conn.execute("UPDATE big_b SET k = 'moved' WHERE k = 'k1'")  # a new key: a delete and an insert
            conn.execute("TRUNCATE big_b")
            conn.execute("INSERT INTO big_b VALUES ('after', 1)")
            batch = LsnRange(start, slot_state(conn, "shop", "big_slot").head)

            landed = {}
            # three readers share the transactions, each but the first on a temporary copy of the slot
            for how, min_bytes, readers in (("run", None, 1), ("executors", 0, 1), ("readers", 0, 3)):
                got = read_change_batch(conn, "shop", "big_slot", "big_pub", batch, ["public.big_a", "public.big_b"],
                                        executor_min_bytes=min_bytes)
                assert {c.sliced for c in got.tables.values()} == {how != "run"}
                held = sum(len(c.records) for c in got.tables.values())
                assert held == (0 if how != "run" else 2 * 3000 + 1 + 1 + 1 + 1)
                for table, write in change_batch_writes("shop", params, "big_slot", "big_pub", got,
                                                        {t: t for t in got.tables}, readers=readers).items():
                    path = str(tmp_path / how / table)
                    write.apply(spark, path, print)
                    rows = sorted((r.asDict() for r in spark.read.format("delta").load(path).collect()),
                                  key=lambda r: r["_pos"])
                    summary = BatchSummary.from_metadata(last_commit(path, kind="bronze").metadata["summary"])
                    landed[how, table] = rows, summary.truncates, summary.newest_epoch, summary.oldest_epoch
            deadline = time.monotonic() + 10  # the readers' copies go when their sessions end
            while copies(conn) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert copies(conn) == 0
        finally:
            conn.execute("SELECT pg_drop_replication_slot('big_slot')")

    for table in ("public.big_a", "public.big_b"):
        assert landed["executors", table] == landed["run", table] == landed["readers", table]
    rows_a, *_ = landed["run", "public.big_a"]
    assert rows_a[-1]["id"] == 1 and rows_a[-1]["_unchanged"] == ["doc"] and rows_a[-1]["doc"] is None
    rows_b, truncates, *_ = landed["run", "public.big_b"]
    assert len(truncates) == 1 and [r["_op"] for r in rows_b[-4:]] == ["delete", "insert", "truncate", "insert"]
    assert rows_a[0]["_pos"] == rows_b[0]["_pos"]  # the first change to each table in the transaction: place 1


def test_readers_without_a_free_replication_slot_fail_naming_the_setting_and_commit_nothing(pg, spark, tmp_path):
    """Every reader of a large batch but the first reads a temporary copy of the slot: a server with no
    slot free for it fails the batch with what to change, before bronze gets a commit."""
    from ingest.adapters.postgres import PgParams, change_batch_writes
    from ingest.lake.deltalog import table_version
    from ingest.sources.postgres.positions import LsnRange
    from ingest.sources.postgres.slot import SlotCopyRefused

    params = PgParams(pg.host, pg.port, pg.user, pg.password, "postgres")
    with pg.connect() as conn:
        conn.execute("CREATE TABLE few_a (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION few_pub FOR TABLE few_a")
        conn.execute("SELECT pg_create_logical_replication_slot('few_slot', 'pgoutput')")
        free = conn.execute("SELECT current_setting('max_replication_slots')::int - count(*) "
                            "FROM pg_replication_slots").fetchone()[0]
        fillers = [f"few_filler_{i}" for i in range(free)]  # no slot left for a reader's copy
        try:
            for name in fillers:
                conn.execute("SELECT pg_create_physical_replication_slot(%s)", (name,))
            start = slot_state(conn, "shop", "few_slot").confirmed
            for i in range(3):  # three transactions: each reader has its share
                conn.execute(f"INSERT INTO few_a SELECT generate_series({i * 100 + 1}, {i * 100 + 100})")
            batch = LsnRange(start, slot_state(conn, "shop", "few_slot").head)
            planned = read_change_batch(conn, "shop", "few_slot", "few_pub", batch, ["public.few_a"],
                                        executor_min_bytes=0)
            (write,) = change_batch_writes("shop", params, "few_slot", "few_pub", planned,
                                           {"public.few_a": "public.few_a"}, readers=3).values()
            with pytest.raises(SlotCopyRefused, match=r"max_replication_slots.*cdc\.executor_readers to 1"):
                write.apply(spark, str(tmp_path / "bronze"), print)
            assert table_version(str(tmp_path / "bronze")) is None
        finally:
            for name in ["few_slot", *fillers]:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))


def test_a_slot_released_before_the_executors_read_the_batch_stops_it_and_commits_nothing(pg, spark, tmp_path):
    """Between the run's plan and the executors' read, the slot was confirmed past the batch's start (by
    hand, or by another reader): the executor finds its changes gone, the run fails naming the slot, and
    bronze gets no commit."""
    from ingest.adapters.postgres import PgParams, change_batch_writes
    from ingest.lake.deltalog import table_version
    from ingest.sources.postgres.positions import LsnRange
    from ingest.sources.postgres.slot import advance

    params = PgParams(pg.host, pg.port, pg.user, pg.password, "postgres")
    with pg.connect() as conn:
        conn.execute("CREATE TABLE gone_a (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION gone_pub FOR TABLE gone_a")
        conn.execute("SELECT pg_create_logical_replication_slot('gone_a_slot', 'pgoutput')")
        try:
            start = slot_state(conn, "shop", "gone_a_slot").confirmed
            conn.execute("INSERT INTO gone_a SELECT generate_series(1, 100)")
            batch = LsnRange(start, slot_state(conn, "shop", "gone_a_slot").head)
            planned = read_change_batch(conn, "shop", "gone_a_slot", "gone_pub", batch, ["public.gone_a"],
                                        executor_min_bytes=0)
            advance(conn, "gone_a_slot", batch.end)
            (write,) = change_batch_writes("shop", params, "gone_a_slot", "gone_pub", planned,
                                           {"public.gone_a": "public.gone_a"}).values()
            with pytest.raises(SlotLost, match=r"'gone_a_slot' has released everything before"):
                write.apply(spark, str(tmp_path / "bronze"), print)
            assert table_version(str(tmp_path / "bronze")) is None  # no commit (Delta may have made the folder)
        finally:
            conn.execute("SELECT pg_drop_replication_slot('gone_a_slot')")


def test_a_peek_longer_than_its_time_says_the_slot_may_have_changes_and_names_no_tables(pg):
    """The decoder stops only at a transaction's end: one huge transaction would hold the sensor's tick past
    Dagster's limit on every tick. Cut at its time, the peek says what a peek over its limit says."""
    from ingest.sources.postgres.slot import has_changes, peek_batch_tables

    with pg.connect() as conn:
        conn.execute("CREATE TABLE wide_txn (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION wide_pub FOR TABLE wide_txn")
        conn.execute("SELECT pg_create_logical_replication_slot('wide_slot', 'pgoutput')")
        try:
            conn.execute("INSERT INTO wide_txn SELECT g FROM generate_series(1, 300000) g")  # ~0.7 s to decode
            state = slot_state(conn, "shop", "wide_slot")

            assert peek_batch_tables(conn, "wide_slot", "wide_pub", state.head, seconds=0.05) == \
                peek_batch_tables(conn, "wide_slot", "wide_pub", state.head, seconds=0.05, limit=10**6)
            cut = peek_batch_tables(conn, "wide_slot", "wide_pub", state.head, seconds=0.05)
            assert cut.messages is None and cut.tables is None
            assert has_changes(conn, "wide_slot", "wide_pub", state.head, seconds=0.05)

            # the connection is usable after the cancel, and given the time the same peek tells all
            whole = peek_batch_tables(conn, "wide_slot", "wide_pub", state.head, limit=10**6, seconds=60)
            assert whole.messages == 300_000 + 3 and whole.tables == {"public.wide_txn"}  # BEGIN, RELATION, COMMIT
            assert slot_state(conn, "shop", "wide_slot").confirmed == state.confirmed  # a peek consumes nothing
        finally:
            conn.execute("SELECT pg_drop_replication_slot('wide_slot')")


def test_a_read_waits_while_another_session_uses_the_slot_and_names_it_when_it_stays_busy(pg):
    """The server lets one session at a time use a slot and refuses the others at once (a check's peek
    during a batch's read). A read or a confirm waits for the slot; past its wait it says which slot and
    why; the sensor's peek, within its time, says it cannot tell."""
    import threading
    import time

    import psycopg

    from ingest.sources.postgres.slot import SlotBusy, SlotPeek, advance, peek, peek_batch_tables

    with pg.connect() as conn:
        conn.execute("CREATE TABLE busy_t (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION busy_pub FOR TABLE busy_t")
        conn.execute("SELECT pg_create_logical_replication_slot('busy_slot', 'pgoutput')")
        conn.execute("INSERT INTO busy_t VALUES (1), (2)")
        head = slot_state(conn, "shop", "busy_slot").head

        def active() -> bool:
            return conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = 'busy_slot'").fetchone()[0]

        def hold():
            """Another session streaming from the slot (as a replication client would), until closed."""
            other = psycopg.connect(host=pg.host, port=pg.port, user=pg.user, password=pg.password,
                                    dbname="postgres", autocommit=True, replication="database")
            other.pgconn.send_query(b"START_REPLICATION SLOT busy_slot LOGICAL 0/0 "
                                    b"(proto_version '1', publication_names 'busy_pub')")
            while not active():
                time.sleep(0.05)
            return other

        other = None
        try:
            other = hold()
            with pytest.raises(SlotBusy, match=r"'busy_slot' stayed in use by another session.*active_pid"):
                list(peek(conn, "busy_slot", "busy_pub", head, wait_seconds=0.5))
            assert peek_batch_tables(conn, "busy_slot", "busy_pub", head, seconds=0.5) == SlotPeek(None, None)
            with pytest.raises(SlotBusy, match="'busy_slot' stayed in use"):
                advance(conn, "busy_slot", head, wait_seconds=0.5)  # the sensor's confirm
            assert slot_state(conn, "shop", "busy_slot").confirmed < head

            threading.Timer(1.0, other.close).start()  # the other session lets go after a second
            started = time.monotonic()
            messages = list(peek(conn, "busy_slot", "busy_pub", head))
            assert time.monotonic() - started >= 0.9 and len(messages) == 5  # BEGIN, RELATION, 2 INSERTs, COMMIT
        finally:
            if other is not None:
                other.close()
            while active():
                time.sleep(0.05)  # the other session's server process ends just after its connection
            conn.execute("SELECT pg_drop_replication_slot('busy_slot')")



@pytest.mark.parametrize("reader", ["jdbc", "python"])
def test_golden_types_land_from_a_snapshot_as_the_stream_gives_them(pg, spark, tmp_path, monkeypatch, reader):
    """Both chunk readers land the golden types with the values the stream's contract gives: Spark's
    JDBC reader (the contract as SQL), and the Python data source, which reads a table with a column JDBC
    cannot carry (the golden table's numeric and box arrays). Two chunks: their bounds are key literals."""
    import math

    import ingest.adapters.postgres as adapter
    from ingest.adapters.postgres import PgParams, PgSnapshotWrite
    from ingest.sources.postgres.schema import set_session, types_of
    from ingest.sources.postgres.slot import peek
    from ingest_tests.integration.test_postgres_pgoutput import GOLDEN, transactions

    golden = GOLDEN if reader == "python" else [c for c in GOLDEN if c[0] not in ("an", "bx")]
    used = []
    for name in ("chunks_df", "chunks_jdbc_df"):
        monkeypatch.setattr(adapter, name, lambda *a, _real=getattr(adapter, name), _name=name, **k:
                            used.append(_name) or _real(*a, **k))
    table, slot = f"golden_{reader}", f"golden_{reader}_slot"
    with pg.connect() as conn:
        set_session(conn)  # the text forms the stream's decoding gives, as a batch's session sets them
        conn.execute("DO $$ BEGIN CREATE TYPE mood AS ENUM ('sad', 'happy'); "
                     "CREATE DOMAIN positive AS integer CHECK (VALUE > 0); EXCEPTION WHEN duplicate_object THEN END $$")
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, " + ", ".join(f"{c} {t}" for c, t, _ in golden) + ")")
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")
        conn.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
        for row in range(2):
            conn.execute(f"INSERT INTO {table} VALUES ({row}, " + ", ".join(v[row] for _, _, v in golden) + ")")
        changes = [pair for t in transactions(peek(conn, slot, f"{table}_pub")) for pair in t.changes]
        relation = changes[0][0]
        types = types_of(conn, [c.type_oid for c in relation.columns])
        conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")
    contracts = [types[c.type_oid].contract(c.type_modifier) for c in relation.columns]
    streamed = [tuple(None if v is None else (ct.convert(v) if ct.convert else v) for ct, v in zip(contracts, c.new))
                for _, c in changes]

    path = str(tmp_path / table)
    write = PgSnapshotWrite("shop", PgParams(pg.host, pg.port, pg.user, pg.password, "postgres"), f"{table}_src",
                            f"public.{table}", chunk_size=1, parallelism=2, chunks_per_commit=4)
    assert write.apply(spark, path, print)["chunks"] == 2
    assert used == ["chunks_jdbc_df" if reader == "jdbc" else "chunks_df"]
    with pg.connect() as conn:
        conn.execute(f"SELECT pg_drop_replication_slot('{table}_src')")
    df = spark.read.format("delta").load(path)
    names = [c.name for c in relation.columns]
    assert [t for _, t in df.dtypes[:len(names)]] == [ct.spark for ct in contracts]
    # an instant rendered in UTC, so that the comparison does not depend on the test process's zone
    stamp = "yyyy-MM-dd HH:mm:ss.SSSSSS"
    landed = [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in df.selectExpr(
        *[f"date_format(`{n}`, '{stamp}')" if ct.spark == "timestamp" else f"`{n}`" for n, ct in zip(names, contracts)]
    ).orderBy("id").collect()]
    expected = [tuple(v.strftime("%Y-%m-%d %H:%M:%S.%f") if ct.spark == "timestamp" and v is not None else v
                      for ct, v in zip(contracts, row)) for row in streamed]

    def nan_safe(rows):
        return [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows]

    for got, want in zip(nan_safe(landed), nan_safe(expected), strict=True):
        for name, g, w in zip(names, got, want, strict=True):
            assert g == w, f"row {want[0]}, column {name}: {g!r} != {w!r}"


@pytest.mark.parametrize("reader", ["jdbc", "python"])
def test_a_snapshot_stops_at_a_value_delta_cannot_hold_naming_it_and_commits_nothing(pg, spark, tmp_path,
                                                                                    monkeypatch, reader):
    import ingest.sources.postgres.jdbc as jdbc
    from ingest.adapters.postgres import PgParams, PgSnapshotWrite

    if reader == "python":
        monkeypatch.setattr(jdbc, "jdbc_columns", lambda *a: None)
    table = f"dated_{reader}"
    with pg.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, d date)")
        conn.execute(f"INSERT INTO {table} SELECT g, DATE '2026-01-01' + g FROM generate_series(1, 10) g")
        conn.execute(f"UPDATE {table} SET d = 'infinity' WHERE id = 7")
    path = tmp_path / table
    write = PgSnapshotWrite("shop", PgParams(pg.host, pg.port, pg.user, pg.password, "postgres"), f"{table}_src",
                            f"public.{table}", chunk_size=5, parallelism=2, chunks_per_commit=4)
    named = {"jdbc": rf"column d of public\.{table}: date infinity is outside what Delta''?s date holds",
             "python": r"date 'infinity' is outside what Delta's date holds"}[reader]
    with pytest.raises(Exception, match=named):
        write.apply(spark, str(path), print)
    assert not list(path.glob("_delta_log/*.json"))  # no commit: the one wave failed whole
    with pg.connect() as conn:
        conn.execute(f"SELECT pg_drop_replication_slot('{table}_src')")


def test_the_jdbc_reader_refuses_a_numeric_nan_and_keeps_every_finite_value_and_null(pg, spark, tmp_path):
    """A NaN stops the snapshot naming the value (a numeric(p,s) holds no infinity); NULL and the largest
    finite values land."""
    from ingest.adapters.postgres import PgParams, PgSnapshotWrite

    with pg.connect() as conn:
        conn.execute("CREATE TABLE priced (id int PRIMARY KEY, price numeric(6,2))")
        conn.execute("INSERT INTO priced VALUES (1, 9999.99), (2, -9999.99), (3, NULL), (4, 0)")
    params = PgParams(pg.host, pg.port, pg.user, pg.password, "postgres")

    def snapshot(price: str | None, path):
        with pg.connect() as conn:
            conn.execute("UPDATE priced SET price = %s WHERE id = 4", (price,))
        try:
            PgSnapshotWrite("shop", params, "priced_src", "public.priced", chunk_size=2, parallelism=2,
                            chunks_per_commit=4).apply(spark, str(path), print)
        finally:
            with pg.connect() as conn:
                conn.execute("SELECT pg_drop_replication_slot('priced_src') "
                             "WHERE EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = 'priced_src')")

    refused = tmp_path / "priced_nan"
    with pytest.raises(Exception, match=r"column price of public\.priced: numeric NaN has no decimal value"):
        snapshot("NaN", refused)
    assert not list(refused.glob("_delta_log/*.json"))

    landed = tmp_path / "priced"
    snapshot(None, landed)
    got = sorted(tuple(r) for r in spark.read.format("delta").load(str(landed)).select("id", "price").collect())
    assert [(i, None if p is None else str(p)) for i, p in got] == [
        (1, "9999.99"), (2, "-9999.99"), (3, None), (4, None)]


def test_a_spark_server_without_the_jdbc_driver_is_named_with_the_fix_and_nothing_is_written(pg, spark, tmp_path,
                                                                                           monkeypatch):
    """The driver class is one the server cannot load, as on a cluster started without jvm/pom.xml's jars."""
    import ingest.sources.postgres.jdbc as jdbc
    from ingest.adapters.postgres import PgParams, PgSnapshotWrite
    from ingest.lake.connect import MissingJarsError

    monkeypatch.setattr(jdbc, "DRIVER", "org.postgresql.NotOnThisServer")
    with pg.connect() as conn:
        conn.execute("CREATE TABLE plain (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO plain SELECT g, 'v' FROM generate_series(1, 10) g")
    path = tmp_path / "plain"
    write = PgSnapshotWrite("shop", PgParams(pg.host, pg.port, pg.user, pg.password, "postgres"), "plain_src",
                            "public.plain", chunk_size=5, parallelism=2, chunks_per_commit=4)
    with pytest.raises(MissingJarsError, match=r"no PostgreSQL JDBC driver \(org\.postgresql\.NotOnThisServer\).*"
                                               r"jvm/pom\.xml"):
        write.apply(spark, str(path), print)
    assert not list(path.glob("_delta_log/*.json"))
    with pg.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot('plain_src')")
