"""Lake maintenance: compaction, vacuum and retention on a real Delta table, through the job."""

from pathlib import Path

from ingest.config import MaintenanceSettings
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.maintenance import maintenance_defs
from ingest.defs.resources import SparkResource
from ingest.lake.commits import Txn, table_version
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
    job, schedules = maintenance_defs(settings, [path, str(tmp_path / "src" / "not_created_yet" / "silver")])
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
