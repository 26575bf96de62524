"""A change batch touches only the tables it changed: no commit, no step for the others."""

from dagster import AssetKey, DagsterInstance

from ingest.lake.batchlog import logged_batches
from ingest.lake.deltalog import table_version
from ingest.lake.tables import source_batch_log_location, table_location
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources
from ingest_tests.open_readers import arrow_table

TABLES = ["quiet_a", "busy", "quiet_b"]


def test_a_batch_with_changes_in_one_table_names_and_commits_only_that_table(spark, root, mariadb, database,
                                                                           tmp_path):
    with root.cursor() as cur:
        for t in TABLES:
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_50")
    h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, TABLES), tmp_path / "lake",
                   DagsterInstance.ephemeral())
    h.snapshot()
    assert h.sync()  # the first batch brings every snapshot into silver, changes or not
    for t in TABLES:
        assert len(h.live(t, ["id"])) == 50

    def versions():
        return {(t, layer): table_version(table_location(str(h.lake), "src", t, layer))
                for t in TABLES for layer in ("bronze", "silver")}

    before = versions()
    with root.cursor() as cur:
        cur.execute("UPDATE busy SET v = -v WHERE id <= 10")
        cur.execute("DELETE FROM busy WHERE id = 50")
    key = h.sync()
    # the sensor asked the server which tables the batch touches: the run names those alone
    assert h.newest_run_assets() == {"src/busy/changes", "src/busy", "src/_batch_log"}
    after = versions()
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {("busy", "bronze"), ("busy", "silver")}, changed
    # the run materialized bronze and silver of `busy` and the batch log, nothing of the quiet tables
    materialized = h.newest_run_assets(materialized=True)
    assert materialized == {"src/busy/changes", "src/busy", "src/_batch_log"}, materialized
    (entry, *_) = logged_batches(source_batch_log_location(str(h.lake), "src"))
    assert entry.batch == key and entry.tables == {"busy": 11}
    with root.cursor() as cur:
        cur.execute("SELECT id, v FROM busy")
        assert h.live("busy", ["id", "v"]) == sorted(cur.fetchall())


def test_a_table_opted_into_deletion_vectors_and_out_of_the_change_feed_merges_a_small_batch_by_its_keys(
        spark, root, mariadb, database, tmp_path):
    from pathlib import Path

    import deltalake

    from ingest.lake.deltalog import table_properties
    from ingest.lake.merge import CHANGE_DATA_FEED
    from ingest_tests.merges import last_commit, names_keys
    from ingest_tests.open_readers import assert_deletion_vector_readers_open

    with root.cursor() as cur:
        for t in ("plain", "marked"):
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_200")
    h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["plain", "marked"],
                                        deletion_vectors=["marked"], table_settings={"without_change_feed": ["mark*"]}),
                   tmp_path / "lake", DagsterInstance.ephemeral())
    h.snapshot()
    assert h.sync()
    with root.cursor() as cur:
        for t in ("plain", "marked"):
            cur.execute(f"UPDATE {t} SET v = -v WHERE id % 20 = 0")
            cur.execute(f"DELETE FROM {t} WHERE id = 7")
            cur.execute(f"INSERT INTO {t} VALUES (500, 5)")
    assert h.sync()
    for t in ("plain", "marked"):
        with root.cursor() as cur:
            cur.execute(f"SELECT id, v FROM {t}")
            assert h.live(t, ["id", "v"]) == sorted(cur.fetchall())

    marked = last_commit(spark, table_location(str(h.lake), "src", "marked", "silver"))
    assert marked.deletion_vectors and marked.operation == "MERGE"
    assert names_keys(marked.predicate, "id"), marked.predicate  # the batch's keys, from its row count
    assert int(marked.metrics["numTargetDeletionVectorsAdded"]) > 0 and int(marked.metrics["numTargetRowsCopied"]) == 0
    path = table_location(str(h.lake), "src", "plain", "silver")
    plain = last_commit(spark, path)
    assert not plain.deletion_vectors and not names_keys(plain.predicate, "id"), plain.predicate
    assert arrow_table(deltalake.DeltaTable(path), path).num_rows == 201  # delta-rs opens it: tombstone kept
    # the opted-in table, for readers that apply deletion vectors: 200 rows and the inserted one, whose
    # tombstone (id 7) and updates are the merge's, not the rows its vectors mark
    marked_path = table_location(str(h.lake), "src", "marked", "silver")
    assert assert_deletion_vector_readers_open(spark, marked_path, ["id"]) == 201
    # the batch's updates wrote before and after images for the table with the feed, none for the other
    feeds = {t: (table_properties(table_location(str(h.lake), "src", t, "silver"))[CHANGE_DATA_FEED],
                 any(Path(table_location(str(h.lake), "src", t, "silver"), "_change_data").glob("*.parquet")))
             for t in ("plain", "marked")}
    assert feeds == {"plain": ("true", True), "marked": ("false", False)}


def three_tables(spark, root, mariadb, database, tmp_path, **extra) -> CdcHarness:
    with root.cursor() as cur:
        for t in TABLES:
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {t} SELECT seq, seq FROM seq_1_to_50")
    h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, TABLES, **extra), tmp_path / "lake",
                   DagsterInstance.ephemeral())
    h.snapshot()
    assert h.sync()
    return h


def test_a_new_snapshot_of_a_table_the_batch_does_not_touch_still_reaches_silver(spark, root, mariadb, database,
                                                                                 tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE elsewhere (id INT PRIMARY KEY)")  # in the database, not in the source
    h = three_tables(spark, root, mariadb, database, tmp_path)
    with root.cursor() as cur:  # a change the binlog never shows: only a new snapshot brings it
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("UPDATE quiet_a SET v = 1000 + v WHERE id <= 5")
        cur.execute("SET SESSION sql_log_bin = 1")
        # the binlog moves on (outside the source), so the new snapshot reads at a later position
        cur.execute("INSERT INTO elsewhere VALUES (1)")
    h.snapshot(["quiet_a"])
    with root.cursor() as cur:
        cur.execute("UPDATE busy SET v = -v WHERE id = 1")
    h.sync()
    assert h.newest_run_assets() == {"src/busy/changes", "src/busy", "src/quiet_a/changes", "src/quiet_a",
                                  "src/_batch_log"}
    with root.cursor() as cur:
        cur.execute("SELECT id, v FROM quiet_a")
        assert h.live("quiet_a", ["id", "v"]) == sorted(cur.fetchall())


def test_a_batch_run_that_does_not_name_a_changed_table_writes_nothing_and_the_sensor_runs_it_whole(
        spark, root, mariadb, database, tmp_path):
    h = three_tables(spark, root, mariadb, database, tmp_path, cdc={"retry_backoff_seconds": 0})
    with root.cursor() as cur:
        cur.execute("UPDATE busy SET v = -v WHERE id <= 3")
        cur.execute("UPDATE quiet_a SET v = -v WHERE id = 9")
    key = h.add_batch()
    before = {t: table_version(table_location(str(h.lake), "src", t, "bronze")) for t in TABLES}
    # a run naming busy alone (as a sensor that misread the binlog would): quiet_a changed too
    failed = h.run([AssetKey(["src", "busy", "changes"]), AssetKey(["src", "busy"]), AssetKey(["src", "_batch_log"])],
                   key, expect_success=False)
    message = h.failure(failed)
    assert f"batch {key} of source src changed quiet_a, which this run does not name" in message, message
    assert {t: table_version(table_location(str(h.lake), "src", t, "bronze")) for t in TABLES} == before
    assert key not in {e.batch for e in logged_batches(source_batch_log_location(str(h.lake), "src"))}

    # the sensor's next tick runs the incomplete batch again, naming every table (no backoff in this source)
    assert h.sync() == key
    assert {k.split("/")[1] for k in h.newest_run_assets()} == {*TABLES, "_batch_log"}
    for t in ("busy", "quiet_a"):
        with root.cursor() as cur:
            cur.execute(f"SELECT id, v FROM {t}")
            assert h.live(t, ["id", "v"]) == sorted(cur.fetchall())
