"""A `kind: postgres` source through the generated Dagster assets and its sensor, on a real PostgreSQL 15,
a real Spark Connect server and Delta: snapshots, sensor-cut batches into silver, the slot confirmed
only after the batch log holds a batch, and no batch for activity outside the source's tables."""

import secrets

import pytest
import yaml
from dagster import DagsterInstance, SensorResult, SkipReason

from ingest_tests.integration.cdc_harness import HARNESS_CDC, CdcHarness


@pytest.fixture
def harness(pg, spark, tmp_path, monkeypatch):
    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    with pg.connect() as conn:
        conn.execute("DROP PUBLICATION IF EXISTS shop_pub")
        conn.execute("DROP TABLE IF EXISTS orders, customers, unrelated")
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text, doc text, total numeric(12,2))")
        conn.execute("CREATE TABLE customers (id bigint PRIMARY KEY, name text)")
        conn.execute("INSERT INTO orders SELECT g, 'n' || g, 'd' || g, g * 1.25 FROM generate_series(1, 2500) g")
        conn.execute("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 50) g")
        conn.execute("CREATE PUBLICATION shop_pub FOR TABLE orders, customers")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"pgshop": {
        "kind": "postgres", "host": pg.host, "port": pg.port, "user": pg.user, "password_env": "INGEST_TEST_PG_PASSWORD",
        "database": "postgres", "publication": "shop_pub", "slot": "pgshop_slot",
        "tables": {"include": ["orders", "customers"], "deletion_vectors": ["cust*"]},
        "snapshot": {"chunk_size": 1000, "parallelism": 2, "chunks_per_commit": 2}, "cdc": HARNESS_CDC}}}))
    instance = DagsterInstance.ephemeral()
    yield CdcHarness(spark, sources, tmp_path / "lake", instance, name="pgshop")
    instance.dispose()
    with pg.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'pgshop_slot'")


def table(pg, name: str, columns: str):
    with pg.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(f"SELECT {columns} FROM {name}").fetchall())


def test_snapshots_then_sensor_batches_land_the_tables_and_confirm_the_slot_after_the_log(pg, harness, capsys):
    from ingest.sources.postgres.cdc import slot_state

    waiting = harness.tick()
    assert isinstance(waiting, SkipReason) and "waiting for the snapshots of customers, orders" in waiting.skip_message
    harness.snapshot()

    big = secrets.token_hex(20_000)
    with pg.connect() as conn:
        conn.execute("UPDATE orders SET doc = %s WHERE id = 7", (big,))
        conn.execute("UPDATE orders SET note = 'changed' WHERE id = 7")  # doc TOASTed, not sent
        conn.execute("DELETE FROM orders WHERE id BETWEEN 100 AND 199")
        conn.execute("INSERT INTO orders VALUES (5000, 'new', NULL, 1.5)")
    first = harness.sync()
    assert first is not None
    from ingest.cli import main
    from ingest.sources.postgres.positions import LsnRange

    with pg.connect() as conn:  # not synced: the slot has a change for orders, none for customers
        conn.execute("UPDATE orders SET note = 'waiting' WHERE id = 8")
    assert main(["--sources", str(harness.sources), "--lake", str(harness.lake), "status", "--source", "pgshop"]) == 0
    out = capsys.readouterr().out
    orders = next(line for line in out.splitlines() if line.startswith("pgshop  orders"))
    customers = next(line for line in out.splitlines() if line.startswith("pgshop  customers"))
    assert f"{first} (" in orders and str(LsnRange.from_key(first).end) in orders  # committed through the batch
    assert "yes: " in orders and " bytes of WAL not read yet" in orders and "slot pgshop_slot keeps" in orders
    # no batch changed customers: in the lake through the batch log's end, nothing waiting
    assert str(LsnRange.from_key(first).end) in customers and "  none  " in customers
    first = harness.sync()  # the waiting change lands: the newest logged batch from here on
    assert first is not None
    assert harness.live("orders", ["id", "note", "doc", "total"]) == table(pg, "orders", "id, note, doc, total")
    assert harness.live("customers", ["id", "name"]) == table(pg, "customers", "id, name")  # no batch change: its snapshot
    from ingest.lake.tables import table_location
    from ingest_tests.open_readers import assert_any_reader_opens

    for layer, keys in (("snapshot", ["id"]), ("bronze", ["_pos"]), ("silver", ["id"])):  # bronze has _unchanged
        assert assert_any_reader_opens(harness.spark, table_location(str(harness.lake), "pgshop", "orders", layer), keys)

    with pg.connect() as conn:
        before = slot_state(conn, "pgshop", "pgshop_slot").confirmed
        conn.execute("CREATE TABLE unrelated (v int)")  # not in the publication: no batch for it
        conn.execute("INSERT INTO unrelated SELECT generate_series(1, 1000)")
    quiet = harness.tick()  # confirms the slot up to the logged batch, then finds nothing to do
    assert isinstance(quiet, SkipReason) and "no transaction changed a table of source pgshop" in quiet.skip_message
    with pg.connect() as conn:
        confirmed = slot_state(conn, "pgshop", "pgshop_slot").confirmed
    assert confirmed > before and first.endswith(f"{confirmed.value:016X}")

    with pg.connect() as conn:
        conn.execute("UPDATE customers SET name = 'renamed' WHERE id = 3")
        conn.execute("TRUNCATE orders")
        conn.execute("INSERT INTO orders VALUES (1, 'after truncate', 'x', 2)")
    assert harness.sync() is not None
    assert harness.live("orders", ["id", "note", "doc", "total"]) == table(pg, "orders", "id, note, doc, total")
    assert harness.live("customers", ["id", "name"]) == table(pg, "customers", "id, name")
    # customers is opted into deletion vectors: its batch merge wrote one for the renamed row, by its key
    from ingest_tests.merges import last_commit, names_keys

    merge = last_commit(harness.spark, harness.silver_path("customers"))
    assert merge.operation == "MERGE" and int(merge.metrics["numTargetDeletionVectorsAdded"]) > 0
    assert merge.deletion_vectors and names_keys(merge.predicate, "id"), merge.predicate
    result = harness.tick()
    assert not isinstance(result, SensorResult) or not result.run_requests

    matched = harness.check("customers")
    assert matched.passed and matched.metadata["source_rows"].value == 50
    with pg.connect() as conn:  # a change no batch has read yet is left to the next batch, not a mismatch
        conn.execute("UPDATE customers SET name = 'not synced yet' WHERE id = 10")
    assert harness.check("customers").passed
    harness.spark.sql(f"UPDATE delta.`{harness.silver_path('customers')}` SET name = 'tampered' WHERE id = 20").collect()
    tampered = harness.check("customers")
    assert not tampered.passed and "20" in tampered.description and "re-snapshot" in tampered.description
    assert harness.sync() is not None  # brings id 10's change; id 20 stays wrong in silver
    assert not harness.check("customers").passed

    fresh = harness.check("customers", "freshness")
    assert fresh.passed and fresh.metadata["lag_seconds"].value == 0  # silver has every change
    with pg.connect() as conn:
        conn.execute("UPDATE customers SET name = 'pending' WHERE id = 4")
    behind = harness.check("customers", "freshness")
    assert behind.passed and "behind the source" in behind.description  # within max_lag_seconds

    healthy = harness.check("_batch_log", "slot_headroom")
    assert healthy.passed and healthy.metadata["wal_status"].value == "reserved"
    with pg.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot('pgshop_slot')")
    gone = harness.check("_batch_log", "slot_headroom")
    assert not gone.passed and "GONE: replication slot pgshop_slot does not exist" in gone.description
    with pg.connect() as conn:
        conn.execute("INSERT INTO customers VALUES (999, 'after the slot went')")
    with pytest.raises(Exception, match=r"'pgshop_slot' does not exist.*Fix: re-snapshot"):
        harness.tick()  # the sensor says why the source stopped; nothing was committed


def test_after_the_first_batch_a_run_names_only_the_tables_the_slot_shows_changed(pg, harness):
    from ingest.lake.deltalog import table_version
    from ingest.lake.tables import table_location
    from ingest.sources.postgres.cdc import slot_state
    from ingest.sources.postgres.slot import peek_batch_tables

    harness.snapshot()
    with pg.connect() as conn:
        conn.execute("UPDATE orders SET note = 'first' WHERE id = 1")
    assert harness.sync() is not None  # the first batch names every table: their snapshots enter silver

    def versions():
        return {(t, layer): table_version(table_location(str(harness.lake), "pgshop", t, layer))
                for t in ("orders", "customers") for layer in ("bronze", "silver")}

    before = versions()
    with pg.connect() as conn:
        conn.execute("UPDATE customers SET name = 'one table' WHERE id = 2")
        head = slot_state(conn, "pgshop", "pgshop_slot").head
        peeked = peek_batch_tables(conn, "pgshop_slot", "shop_pub", head)
        assert "public.customers" in peeked.tables and peeked.messages >= 4  # BEGIN, RELATION, UPDATE, COMMIT
        # with as many messages as the limit, the peek may have stopped early: it cannot tell
        assert peek_batch_tables(conn, "pgshop_slot", "shop_pub", head, limit=peeked.messages).tables is None
    assert harness.sync() is not None
    assert harness.newest_run_assets() == {"pgshop/customers/changes", "pgshop/customers", "pgshop/_batch_log"}
    after = versions()
    assert {k for k in after if after[k] != before[k]} == {("customers", "bronze"), ("customers", "silver")}
    assert harness.live("customers", ["id", "name"]) == table(pg, "customers", "id, name")

    # orders changes while out of the publication (the slot never shows it), then gets a new snapshot:
    # the next batch names orders although it does not touch it, and the snapshot reaches silver
    with pg.connect() as conn:
        conn.execute("ALTER PUBLICATION shop_pub DROP TABLE orders")
        conn.execute("UPDATE orders SET note = 'unseen' WHERE id <= 5")
        conn.execute("ALTER PUBLICATION shop_pub ADD TABLE orders")
    harness.snapshot(["orders"])
    with pg.connect() as conn:
        conn.execute("UPDATE customers SET name = 'again' WHERE id = 3")
    assert harness.sync() is not None
    assert harness.newest_run_assets() == {"pgshop/customers/changes", "pgshop/customers", "pgshop/orders/changes",
                                           "pgshop/orders", "pgshop/_batch_log"}
    assert harness.live("orders", ["id", "note"]) == table(pg, "orders", "id, note")
    assert harness.live("customers", ["id", "name"]) == table(pg, "customers", "id, name")


def test_a_batch_run_lands_a_batch_its_executors_read_as_it_lands_one_it_reads_itself(pg, harness):
    """With cdc.executor_min_bytes 0 every batch is only planned by the run, and executors read each table's
    changes from the slot: a TOASTed value not sent, a key moved and a TRUNCATE land in silver as the source
    has them, and bronze counted the rows from its commit (the run held none)."""
    from ingest.lake.deltalog import last_commit
    from ingest.lake.tables import table_location

    config = yaml.safe_load(harness.sources.read_text())
    config["sources"]["pgshop"]["cdc"] = {**HARNESS_CDC, "executor_min_bytes": 0}
    harness.sources.write_text(yaml.safe_dump(config))
    harness = CdcHarness(harness.spark, harness.sources, harness.lake, harness.instance, name="pgshop")
    harness.snapshot()
    with pg.connect() as conn:
        conn.execute("UPDATE orders SET doc = %s WHERE id = 7", (secrets.token_hex(20_000),))
        conn.execute("UPDATE orders SET note = 'changed' WHERE id = 7")  # doc TOASTed, not sent
        conn.execute("UPDATE orders SET id = 9000 WHERE id = 8")
        conn.execute("TRUNCATE customers")
        conn.execute("INSERT INTO customers VALUES (1, 'after truncate')")
    assert harness.sync() is not None
    assert harness.live("orders", ["id", "note", "doc", "total"]) == table(pg, "orders", "id, note, doc, total")
    assert harness.live("customers", ["id", "name"]) == table(pg, "customers", "id, name") == [(1, "after truncate")]
    for name in ("orders", "customers"):
        bronze = last_commit(table_location(str(harness.lake), "pgshop", name, "bronze"), kind="bronze")
        assert bronze.metadata["summary"]["changes"] is None  # not counted in the run: executors read them


def test_a_range_of_batches_in_one_run_releases_each_logged_batch_before_reading_the_next(pg, harness):
    """A backfill runs a range of batches in one run, each logged before the next is read. As the sensor
    does between runs, the run confirms the slot up to what the log holds before each batch, so the next
    batch's readers do not decode the earlier ones' WAL again; silver gets every change once."""
    from dagster import AssetKey, materialize

    from ingest.sources.postgres.cdc import slot_state
    from ingest.sources.postgres.positions import Lsn, LsnRange

    harness.snapshot()
    with pg.connect() as conn:
        conn.execute("UPDATE orders SET note = 'first' WHERE id <= 20")
        conn.execute("DELETE FROM customers WHERE id = 5")
    first = harness.add_batch()  # registered, not run
    with pg.connect() as conn:
        conn.execute("UPDATE orders SET note = 'second' WHERE id BETWEEN 10 AND 30")
        conn.execute("INSERT INTO customers VALUES (77, 'new')")
        head = Lsn.parse(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        start = slot_state(conn, "pgshop", "pgshop_slot").confirmed
    second = LsnRange(LsnRange.from_key(first).end, head).key
    harness.instance.add_dynamic_partitions("pgshop_batches", [second])
    keys = [AssetKey(["pgshop", t, layer]) for t in harness.tables for layer in ("changes",)] + \
        [AssetKey(["pgshop", t]) for t in harness.tables] + [AssetKey(["pgshop", "_batch_log"])]
    result = materialize(harness.assets, selection=keys, instance=harness.instance, resources=harness.resources,
                         tags={"ingest/source": "pgshop", "dagster/asset_partition_range_start": first,
                               "dagster/asset_partition_range_end": second})
    assert result.success
    with pg.connect() as conn:  # no sensor tick since: the run itself released the first batch, not the second
        confirmed = slot_state(conn, "pgshop", "pgshop_slot").confirmed
    assert start < confirmed == LsnRange.from_key(first).end
    assert harness.live("orders", ["id", "note"]) == table(pg, "orders", "id, note")
    assert harness.live("customers", ["id", "name"]) == table(pg, "customers", "id, name")
