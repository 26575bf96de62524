"""The contiguity, freshness and retention headroom checks against a real MariaDB and real Delta tables."""

import time

from dagster import AssetKey, DagsterInstance

from ingest.defs.assets import latest_metadata
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def test_checks_pass_on_a_synced_table_and_fail_on_a_gap_a_stale_silver_and_purged_binlogs(
        spark, root, database, mariadb, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE c (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO c SELECT seq, seq FROM seq_1_to_200")
    h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["c"], cdc={"max_lag_seconds": 2}),
                   tmp_path / "lake", DagsterInstance.ephemeral())
    h.snapshot()
    for step in range(2):
        with root.cursor() as cur:
            cur.execute(f"UPDATE c SET v = -v WHERE id % 5 = {step}")
        assert h.sync()

    contiguous = h.check("c", "contiguity", "changes")
    assert contiguous.passed, contiguous.description
    assert contiguous.metadata["batches"].value == 2
    logged = h.check("_batch_log", "batch_contiguity", layer=None)  # the check every sensor batch runs
    assert logged.passed and logged.metadata["batches"].value == 2, logged.description
    fresh = h.check("c", "freshness")
    assert fresh.passed and fresh.metadata["lag_seconds"].value == 0  # nothing waits in the binlog
    headroom = h.check("c", "retention_headroom", "changes")
    assert headroom.passed, headroom.description

    # a change silver lacks, and silver's last merge older than max_lag_seconds
    with root.cursor() as cur:
        cur.execute("UPDATE c SET v = 0 WHERE id = 1")
    time.sleep(3)
    stale = h.check("c", "freshness")
    assert not stale.passed and "STALE" in stale.description and stale.metadata["lag_seconds"].value >= 2

    # a batch that starts past the previous end: the transaction in between is never read
    end = BinlogPosition.from_metadata(latest_metadata(h.instance, AssetKey(["src", "c", "changes"]))["end"].value)
    with root.cursor() as cur:
        cur.execute("UPDATE c SET v = 1 WHERE id = 2")
        cur.execute("SHOW MASTER STATUS")
        file, offset = cur.fetchone()[:2]
        after_skipped = BinlogPosition(file, int(offset))
        cur.execute("UPDATE c SET v = 1 WHERE id = 3")
        cur.execute("SHOW MASTER STATUS")
        file, offset = cur.fetchone()[:2]
        head = BinlogPosition(file, int(offset))
    assert after_skipped > end
    skipping = BatchRange(after_skipped, head)
    h.instance.add_dynamic_partitions("src_batches", [skipping.key])
    h.run_batch(skipping.key)
    gap = h.check("c", "contiguity", "changes")
    assert not gap.passed and "GAP" in gap.description and h.batches[-1] in gap.description
    assert skipping.key in gap.description
    logged_gap = h.check("_batch_log", "batch_contiguity", layer=None)
    assert not logged_gap.passed and "GAP" in logged_gap.description and skipping.key in logged_gap.description
    assert str(end) in logged_gap.description and str(after_skipped) in logged_gap.description  # the missing range

    # binlogs purged past the committed end: the next batch cannot run
    with root.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        current = cur.fetchone()[0]
        # the server keeps a log a binlog dump thread still reads; the last batch's thread ends soon after
        # its reader closed
        deadline = time.monotonic() + 30
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{current}'")
            cur.execute("SHOW BINARY LOGS")
            if cur.fetchone()[0] == current or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    gone = h.check("c", "retention_headroom", "changes")
    assert not gone.passed and "GONE" in gone.description
