"""Lake maintenance: compaction, vacuum and retention on a real Delta table, through the job."""

from pathlib import Path

from ingest.config import MaintenanceSettings
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.maintenance import maintenance_defs
from ingest.defs.resources import SparkResource
from ingest.lake.commits import Txn
from ingest.lake.deltalog import table_version
from ingest.lake.write import append
from ingest_tests.open_readers import assert_any_reader_opens


def data_files(path: str) -> list[Path]:
    return [p for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts]


def test_the_maintenance_job_compacts_vacuums_and_sets_retention_once(spark, spark_server, tmp_path):
    path = str(tmp_path / "src" / "t" / "bronze")
    for batch in range(6):  # six small commits, as six sensor batches would leave
        df = spark.createDataFrame([(batch * 10 + i, f"v{i}") for i in range(10)], "id int, v string")
        append(df, path, {"kind": "bronze", "batch": str(batch)}, Txn(f"bronze:t:{batch}", 0))
    assert len(data_files(path)) >= 6
    rows_before = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())

    settings = MaintenanceSettings(txn_retention_days=7, vacuum_retain_hours=0)
    job, schedules = maintenance_defs(settings, [("src", path),
                                                 ("later", str(tmp_path / "later" / "not_created_yet" / "silver"))])
    assert [s.cron_schedule for s in schedules] == ["30 3 * * *"]
    spark_resource = SparkResource(spark_config={"spark.remote": spark_server.url})
    resources = {"spark": spark_resource, "lake": DeltaLakeIOManager(lake_root=str(tmp_path), spark=spark_resource)}
    result = job.execute_in_process(resources=resources)
    event = next(e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT")
    figures = {k: v.value for k, v in event.event_specific_data.metadata.items()}
    assert figures["tables"] == 1 and figures["files_after"] == 1 and figures["files_before"] >= 6
    assert len(data_files(path)) == 1  # VACUUM (retain 0 h) removed the compacted-away files
    assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == rows_before
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert props["delta.setTransactionRetentionDuration"] == "interval 7 days"
    assert props["delta.deletedFileRetentionDuration"] == "interval 0 hours"
    # within the txn retention a repeated batch is still skipped by Delta itself
    again = spark.createDataFrame([(0, "v0")], "id int, v string")
    assert not append(again, path, {"kind": "bronze", "batch": "0"}, Txn("bronze:t:0", 0)).committed
    # a second run sets no property again (no metadata commit for writers to conflict with)
    version = table_version(path)
    job.execute_in_process(resources=resources)
    operations = {r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`")
                  .where(f"version > {version}").collect()}
    assert operations <= {"VACUUM START", "VACUUM END"}, operations  # nor an OPTIMIZE of one file
    # a run that names other sources leaves this table alone
    version = table_version(path)
    only_later = job.execute_in_process(resources=resources, run_config={
        "ops": {"maintain_lake_tables": {"config": {"sources": ["later"]}}}})
    event = next(e for e in only_later.all_node_events if e.event_type_value == "STEP_OUTPUT")
    assert event.event_specific_data.metadata["tables"].value == 0 and table_version(path) == version
    assert assert_any_reader_opens(spark, path, ["id"]) == 60


def test_a_batch_re_run_after_its_txn_id_expired_adds_no_row_bronze_already_holds(spark, tmp_path):
    """Beyond the txn retention Delta no longer skips a repeated batch by its txn id; bronze then leaves
    out the `_pos` it holds. A new txn id for the same batch stands for the expired one."""
    import datetime as dt

    from ingest.changes import ChangeOp, ChangeRecord
    from ingest.lake.bronze import append_changes

    path = str(tmp_path / "bronze")
    columns = [("id", "int"), ("v", "string")]

    def records(first: int, days_ago: int) -> list[ChangeRecord]:
        when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_ago)
        return [ChangeRecord("t", ChangeOp.INSERT, first + i, {"id": i, "v": f"v{i}"}, committed_at=when)
                for i in range(5)]

    def run(batch: str, recs: list[ChangeRecord], source: str = "src") -> None:
        append_changes(spark, path, source, "t", batch, recs, columns, {}, lambda _: None)

    def held() -> int:
        return spark.read.format("delta").load(path).count()

    run("b1", records(100, days_ago=40))
    assert held() == 5
    run("b1", records(100, days_ago=40), source="src-txn-expired")  # same _pos: nothing appended
    assert held() == 5
    # a first-time old batch (a source that was behind for weeks) still lands whole
    run("b2", records(200, days_ago=40))
    assert held() == 10


def test_maintenance_racing_batch_merges_loses_no_batch(spark, spark_server, tmp_path):
    """OPTIMIZE and VACUUM in their own session (as the maintenance job's run has) while batches merge into
    silver: a merge that loses the commit race to OPTIMIZE is retried the way the IO manager retries it,
    and every batch's changes are in silver at the end."""
    import threading
    from decimal import Decimal

    from ingest.lake.maintenance import Retention, maintain
    from ingest.lake.merge import ordered_merge
    from pyspark.sql import SparkSession

    from ingest.lake.write import retry_conflicts, session_conf

    path = str(tmp_path / "silver")
    schema = "id int, v string, _pos decimal(38,0), _deleted boolean"
    for part in range(4):  # several files for the first OPTIMIZE
        ordered_merge(spark, path, spark.createDataFrame(
            [(i, "snap", Decimal(1), False) for i in range(part * 100, part * 100 + 100)], schema),
            ["id"], {"kind": "silver"}, Txn("snapshot", part))
    expected = {i: "snap" for i in range(400)}
    done, errors, tries = threading.Event(), [], []

    def maintenance():
        session = SparkSession.builder.remote(spark_server.url).create()  # not the test's own session
        try:
            while not done.is_set():
                maintain(session, path, Retention(txn_days=7, vacuum_hours=1), lambda _: None)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            session.stop()

    racer = threading.Thread(target=maintenance)
    racer.start()
    try:
        for batch in range(1, 9):
            keys = range(batch * 7, 400, 37)  # spread over every file
            df = spark.createDataFrame([(k, f"b{batch}", Decimal(1000 + batch), False) for k in keys], schema)

            def merge(df=df, batch=batch):
                tries.append(batch)
                return ordered_merge(spark, path, df, ["id"], {"kind": "silver", "batch": str(batch)},
                                     Txn("silver", batch))

            # every batch's merge writes its output in its shuffle's partitions (several files), not in the one
            # file Spark's adaptive execution coalesces so small an output into: OPTIMIZE then has files to
            # compact after each batch, not only after the first (the keys touch every file, so the second
            # batch's merge alone left one file, and the race had only that batch's gap to happen in)
            with session_conf(spark, {"spark.sql.adaptive.coalescePartitions.enabled": "false"}):
                retry_conflicts(merge, f"batch {batch}")
            expected.update({k: f"b{batch}" for k in keys})
    finally:
        done.set()
        racer.join()
    assert not errors, errors
    got = {r["id"]: r["v"] for r in spark.read.format("delta").load(path).collect()}
    assert got == expected
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation", "userMetadata").collect()
    merges = sorted(r["version"] for r in history
                    if r["operation"] == "MERGE" and '"batch"' in (r["userMetadata"] or ""))
    optimizes = [r["version"] for r in history if r["operation"] == "OPTIMIZE"]
    # the race happened: the table was compacted between the batches' merges (not only the snapshot's)
    assert len(merges) == 8 and any(merges[0] < v < merges[-1] for v in optimizes), sorted(
        (r["version"], r["operation"]) for r in history)
    print(f"{len(tries) - 8} merges retried after losing to OPTIMIZE; {len(optimizes)} OPTIMIZE commits")


def test_compaction_keeps_silvers_key_range_files_apart_and_joins_the_small_ones(spark, tmp_path):
    """OPTIMIZE with Delta's defaults made a 10M-row silver one file, which every batch rewrote whole."""
    from decimal import Decimal

    from ingest.lake.maintenance import compact
    from ingest.lake.merge import ordered_merge
    from ingest_tests.merges import file_layout

    path = str(tmp_path / "silver")
    base = spark.createDataFrame([(k, f"{k:x}" * 6, Decimal(10), False) for k in range(4000)],
                                 "id int, v string, _pos decimal(38,0), _deleted boolean")
    ordered_merge(spark, path, base, ["id"], {"kind": "silver"}, Txn("s", 0), file_rows=1000)
    for i in range(3):  # three small batches at new keys: small files
        batch = spark.createDataFrame([(5000 + 10 * i + k, "y", Decimal(20 + i), False) for k in range(10)],
                                      "id int, v string, _pos decimal(38,0), _deleted boolean")
        ordered_merge(spark, path, batch, ["id"], {"kind": "silver"}, Txn("s", 1 + i), expected_rows=10)

    def files():
        return {(f["lo"], f["hi"]): (f["rows"], f["size"]) for f in file_layout(spark, path)}

    held = files()
    small = {r: v for r, v in held.items() if v[0] <= 10}
    large = {r: v for r, v in held.items() if v[0] > 10}
    assert len(small) >= 3 and large, held
    assert max(v[1] for v in small.values()) < min(v[1] for v in large.values()), held
    before = spark.conf.get("spark.databricks.delta.optimize.maxFileSize")

    # sizes between the two kinds, as the job's 1 and 32 MiB are at a real table's sizes
    compact(spark, path, below=min(v[1] for v in large.values()), up_to=max(v[1] for v in large.values()))
    after = files()
    assert {r: v[0] for r, v in after.items() if r in large} == {r: v[0] for r, v in large.items()}, after
    assert len(after) == len(large) + 1, after  # silver's key-range files as they were; the small ones in one
    assert sum(v[0] for v in after.values()) == 4030
    assert spark.conf.get("spark.databricks.delta.optimize.maxFileSize") == before  # the session as it was


def test_maintenance_puts_silver_back_in_key_order_after_a_batch_at_random_keys(spark, tmp_path, monkeypatch):
    """A merge whose batch is too large to broadcast writes in its join's hash order (a smaller one keeps the
    files' order: jvm/src MergeBroadcastJoin): a batch at scattered keys left a file spanning the whole key
    range, which every later batch, even one at the newest keys, then rewrote."""
    from decimal import Decimal

    from ingest.lake import merge
    from ingest.lake.maintenance import Retention, key_ranges, key_sample, maintain, recluster, rows_rewritten_per_key
    from ingest.lake.merge import ordered_merge
    from ingest.lake.write import session_conf
    from ingest_tests.merges import last_commit

    path = str(tmp_path / "silver")
    columns = "id int, v string, _pos decimal(38,0), _deleted boolean"
    # rows of 4 KB of hex (about 2 KB in a file), so that files pass compaction's 1 MiB and stay apart
    wide = "concat_ws('', transform(sequence(1, 32), i -> sha2(concat(id, '-', i), 512)))"
    base = spark.range(4000).selectExpr("CAST(id AS INT) AS id", f"{wide} AS v", "CAST(10 AS DECIMAL(38,0)) AS _pos",
                                        "false AS _deleted")
    ordered_merge(spark, path, base, ["id"], {"kind": "silver"}, Txn("s", 0), file_rows=1000)

    def scatter(version: int) -> None:  # updates across the key range and one new row
        batch = spark.createDataFrame([(k, "u", Decimal(20 + version), False) for k in range(7, 4000, 97)]
                                      + [(9000 + version, "new", Decimal(20 + version), False)], columns)
        with session_conf(spark, {"spark.sql.autoBroadcastJoinThreshold": "-1"}):  # as a batch too large to broadcast
            ordered_merge(spark, path, batch, ["id"], {"kind": "silver"}, Txn("s", version), expected_rows=43)

    def rewritten() -> float:  # by a batch of one key, on average over every key (a sample as large as the table)
        every_key = key_sample(spark, path, "id", rows=1, size=1)
        return rows_rewritten_per_key(key_ranges(spark, path, "id"), every_key)

    def content() -> tuple:
        return tuple(spark.sql(f"SELECT count(*), sum(hash(*)) FROM delta.`{path}`").first())

    assert rewritten() < 1100  # about one file of 1,000 rows
    scatter(1)
    assert rewritten() > 3000, key_ranges(spark, path, "id")  # nearly every row, whatever the key
    held, logged = content(), []
    assert recluster(spark, path, "id", logged.append, rows_per_file=1000)
    assert rewritten() < 1100 and len(key_ranges(spark, path, "id")) >= 3, key_ranges(spark, path, "id")
    assert content() == held and "re-clustered by id" in logged[-1]
    # the point: a batch at the newest keys rewrites only the files they fall in again
    newest = spark.createDataFrame([(k, "n", Decimal(40), False) for k in range(3990, 4000)], columns)
    ordered_merge(spark, path, newest, ["id"], {"kind": "silver"}, Txn("s", 2), expected_rows=10)
    assert int(last_commit(spark, path).metrics["numTargetFilesRemoved"]) <= 2

    # the maintenance job finds the keys in the merges' commits, and leaves a table in key order alone
    monkeypatch.setattr(merge, "SILVER_FILE_ROWS", 1000)  # silver's file size at this table's scale
    scatter(3)
    held = content()
    done = maintain(spark, path, Retention(), logged.append)
    assert done["reclustered"] and content() == held and rewritten() < 1100
    assert not maintain(spark, path, Retention(), logged.append)["reclustered"]
