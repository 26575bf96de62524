"""Reconciliation of silver with the source, through the asset check."""

from ingest.lake.merge import delta_path
from dagster import DagsterInstance

from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def test_reconciliation_passes_when_synced_and_names_the_ranges_a_hand_edit_changed(spark, root, database, mariadb,
                                                                                    tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE r (id INT PRIMARY KEY, v INT, s VARCHAR(20))")
        cur.execute("INSERT INTO r SELECT seq, seq % 13, CONCAT('s', seq) FROM seq_1_to_5000")
    h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["r"]), tmp_path / "lake",
                   DagsterInstance.ephemeral())
    h.snapshot()
    with root.cursor() as cur:
        cur.execute("UPDATE r SET v = 99 WHERE id % 10 = 0")
        cur.execute("DELETE FROM r WHERE id BETWEEN 100 AND 120")
    h.sync()
    with root.cursor() as cur:  # after the last batch: changes the next batch brings, not divergences
        cur.execute("UPDATE r SET s = 'later' WHERE id IN (7, 4007)")
        cur.execute("INSERT INTO r VALUES (9000, 1, 'later')")

    passed = h.check("r")
    assert passed.passed, passed.description
    assert passed.metadata["source_rows"].value == 5000 - 21 + 1
    assert passed.metadata["recently_changed_keys"].value == 3

    silver = delta_path(h.silver_path("r"))  # hand edits, as a user with write access might
    spark.sql(f"UPDATE {silver} SET v = -1 WHERE id = 1500")
    spark.sql(f"UPDATE {silver} SET _deleted = true WHERE id = 4321")
    spark.sql(f"DELETE FROM {silver} WHERE id = 4322")
    failed = h.check("r")
    assert not failed.passed
    ranges = failed.metadata["ranges"].value
    assert len(ranges) == 2, ranges  # chunks of 1000 keys: 1500 in one, 4321 and 4322 in another
    assert ranges[0].startswith("keys [(1") and "0 missing, 0 extra, 1 different (e.g. (1500,))" in ranges[0]
    assert "2 missing, 0 extra, 0 different (e.g. (4321,), (4322,))" in ranges[1]
    assert "Fix: re-snapshot" in failed.description
