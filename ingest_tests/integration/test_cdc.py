"""Binlog CDC through the generated Dagster definitions, against a real MariaDB and real Delta."""

import pytest
from dagster import AssetKey, SkipReason, instance_for_test

from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def source(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return sorted(tuple(r) for r in cur.fetchall())


@pytest.fixture
def harness(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE acct (id INT PRIMARY KEY, owner VARCHAR(20), balance DECIMAL(12,2))")
        cur.execute("CREATE TABLE entry (acct INT, n INT, amount DECIMAL(12,2), PRIMARY KEY (acct, n))")
        cur.execute("INSERT INTO acct SELECT seq, CONCAT('o', seq), seq FROM seq_1_to_300")
        cur.execute("INSERT INTO entry SELECT a.seq, b.seq, b.seq FROM seq_1_to_100 a JOIN seq_1_to_3 b")
    sources = write_sources(tmp_path, mariadb.port, database, ["acct", "entry"])
    with instance_for_test() as instance:
        yield CdcHarness(spark, sources, tmp_path / "lake", instance)


def assert_in_sync(h, root):
    assert h.live("acct", ["id", "owner", "balance"]) == source(root, "SELECT id, owner, balance FROM acct")
    assert h.live("entry", ["acct", "n", "amount"]) == source(root, "SELECT acct, n, amount FROM entry")


def test_sensor_waits_for_snapshots_then_batches_keep_silver_in_sync(harness, root):
    h = harness
    skip = h.tick()
    assert isinstance(skip, SkipReason) and "waiting for the snapshots of acct, entry" in skip.skip_message
    h.snapshot()
    first = h.sync()  # the first batch starts at the snapshots' log start and builds silver
    assert first is not None
    assert_in_sync(h, root)
    skip = h.tick()
    assert isinstance(skip, SkipReason) and "nothing new" in skip.skip_message

    with root.cursor() as cur:
        cur.execute("INSERT INTO acct VALUES (1001, 'new', 5)")
        cur.execute("UPDATE acct SET balance = balance + 1 WHERE id <= 50")
        cur.execute("DELETE FROM acct WHERE id BETWEEN 100 AND 120")
        cur.execute("UPDATE acct SET id = 2000 WHERE id = 200")  # primary key change
        cur.execute("BEGIN")  # one transaction over two tables
        cur.execute("UPDATE acct SET balance = 0 WHERE id = 1")
        cur.execute("INSERT INTO entry VALUES (1, 99, -1)")
        cur.execute("DELETE FROM entry WHERE acct = 2")
        cur.execute("COMMIT")
        cur.execute("UPDATE entry SET n = 50 WHERE acct = 3 AND n = 1")  # composite key change
    second = h.sync()
    assert second is not None and second != first
    assert second.split("-")[0] == first.split("-")[1]  # contiguous: starts where the last ended
    assert_in_sync(h, root)

    # re-running a batch, or all of them, changes nothing that is already right
    for key in [first, second]:
        h.run_batch(key)
    assert_in_sync(h, root)

    # silver rebuilt from the lake alone (snapshot + bronze), batches in reverse order: only
    # the silver assets run, and they never connect to the source
    import shutil

    for table in h.tables:
        shutil.rmtree(h.silver_path(table))
    for key in reversed(h.batches):
        h.run([AssetKey(["src", t]) for t in h.tables], key)
    assert_in_sync(h, root)


def test_batch_metadata_mirrors_the_committed_positions_and_carries_every_promised_figure(harness, root):
    """...silver's lag is the wait of the batch's oldest change, the newest's beside it; and every
    materialization (snapshot, bronze, silver, batch log) has the figures the README promises."""
    import time
    from pathlib import Path

    from dagster import AssetKey, AssetRecordsFilter

    from ingest.defs.io_managers import FIGURES

    from ingest.lake.deltalog import last_commit
    from ingest.lake.tables import table_location

    h = harness
    h.snapshot()
    h.sync()
    with root.cursor() as cur:
        cur.execute("INSERT INTO acct VALUES (5000, 'x', 1), (5001, 'y', 2)")
        time.sleep(2.2)  # two commits 2 s apart in one batch
        cur.execute("DELETE FROM acct WHERE id = 5")
        cur.execute("UPDATE acct SET owner = 'z' WHERE id = 6")
    key = h.sync()

    def metadata(*asset):
        return h.instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(list(asset)),
                                                                    asset_partitions=[key]), limit=1
                                                 ).records[0].asset_materialization.metadata

    silver = metadata("src", "acct")
    # each is rounded to 0.1 s from whole-second commit times: compare the difference rounded alike
    assert round(silver["lag_seconds"].value - silver["lag_seconds_newest"].value, 1) >= 2
    meta = metadata("src", "acct", "changes")
    assert (meta["rows_insert"].value, meta["rows_delete"].value, meta["rows_update"].value) == (2, 1, 1)
    assert meta["last_gtid"].value and meta["lag_seconds"].value >= 0
    committed = last_commit(table_location(str(h.lake), "src", "acct", "bronze"), batch=key)
    assert committed.metadata["end"] == meta["end"].value and committed.metadata["start"] == meta["start"].value
    assert meta["retention_headroom_files"].value >= 0

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in FIGURES)
    for asset in ("acct/snapshot", "entry/snapshot", "acct/changes", "acct", "_batch_log"):
        found = h.instance.fetch_materializations(AssetKey(["src", *asset.split("/")]), limit=100).records
        assert found, asset
        for record in found:
            missing = set(FIGURES) - set(record.asset_materialization.metadata)
            assert not missing, (asset, record.asset_materialization.partition, missing)
        assert found[0].asset_materialization.metadata["table_files"].value >= 1


def test_snapshot_under_concurrent_writes_then_cdc_equals_the_source(spark, mariadb, database, root, tmp_path):
    """Chunks read at different instants, plus the log from the snapshot's start, give the exact table."""
    import random
    import threading

    with root.cursor() as cur:
        cur.execute("CREATE TABLE busy (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO busy SELECT seq, 0 FROM seq_1_to_20000")
    stop = threading.Event()
    writes = []

    def writer():
        rng = random.Random(7)
        conn = mariadb.connect(database=database)
        with conn, conn.cursor() as cur:
            while not stop.is_set():
                k = rng.randint(1, 25000)
                op = rng.choice(["update", "insert", "delete"])
                if op == "update":
                    cur.execute("UPDATE busy SET v = v + 1 WHERE id = %s", (k,))
                elif op == "insert":
                    cur.execute("INSERT IGNORE INTO busy VALUES (%s, -1)", (k,))
                else:
                    cur.execute("DELETE FROM busy WHERE id = %s", (k,))
                writes.append(op)

    sources = write_sources(tmp_path, mariadb.port, database, ["busy"],
                            snapshot={"chunk_size": 2000, "parallelism": 2, "chunks_per_commit": 2})
    with instance_for_test() as instance:
        h = CdcHarness(spark, sources, tmp_path / "lake", instance)
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            h.snapshot()
        finally:
            stop.set()
            thread.join()
        assert len(writes) > 100  # the snapshot really ran under load
        while h.sync():
            pass
        assert h.live("busy", ["id", "v"]) == source(root, "SELECT id, v FROM busy")
