"""Reconciliation of silver with the source, through the asset check and the job its schedule runs."""

from dagster import AssetCheckKey, AssetKey, DagsterInstance, DefaultScheduleStatus, Definitions

from ingest.config import ReconcileSettings
from ingest.defs.assets import RECONCILIATION
from ingest.defs.maintenance import RECONCILE_JOB, reconcile_defs
from ingest.lake.merge import delta_path
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def scheduled_reconciliation(h: CdcHarness, table: str):
    """Run the job the `reconcile_silver` schedule launches, as the daemon would; the check's evaluation."""
    jobs, schedules = reconcile_defs(ReconcileSettings(), [AssetCheckKey(AssetKey([h.name, table]), RECONCILIATION)])
    (schedule,) = schedules
    assert schedule.cron_schedule == "0 4 * * *" and schedule.default_status == DefaultScheduleStatus.RUNNING
    defs = Definitions(assets=h.assets, asset_checks=h.checks, jobs=jobs, resources=h.resources)
    result = defs.resolve_job_def(RECONCILE_JOB).execute_in_process(instance=h.instance)
    assert not result.get_asset_materialization_events()  # it checks; it materializes nothing
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def synced_source(spark, root, mariadb, database, tmp_path, table: str, *statements: str) -> CdcHarness:
    """A source of one table: `statements` create and fill it before its snapshot, and change it in the
    one batch synced after (the statements after the first INSERT)."""
    first_change = next(i for i, sql in enumerate(statements) if sql.startswith("INSERT")) + 1
    with root.cursor() as cur:
        for sql in statements[:first_change]:
            cur.execute(sql)
    h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, [table]), tmp_path / "lake",
                   DagsterInstance.ephemeral())
    h.snapshot()
    with root.cursor() as cur:
        for sql in statements[first_change:]:
            cur.execute(sql)
    h.sync()
    return h


def test_reconciliation_passes_when_synced_and_names_the_ranges_a_hand_edit_changed(spark, root, database, mariadb,
                                                                                    tmp_path):
    h = synced_source(spark, root, mariadb, database, tmp_path, "r",
                      "CREATE TABLE r (id INT PRIMARY KEY, v INT, s VARCHAR(20))",
                      "INSERT INTO r SELECT seq, seq % 13, CONCAT('s', seq) FROM seq_1_to_5000",
                      "UPDATE r SET v = 99 WHERE id % 10 = 0", "DELETE FROM r WHERE id BETWEEN 100 AND 120")
    synced = scheduled_reconciliation(h, "r")
    assert synced.passed, synced.description
    checked = synced.metadata["ranges_checked"].value
    assert checked >= 5 and synced.metadata["ranges_compared_by_row"].value == 0  # all checksums agree
    with root.cursor() as cur:  # after the last batch: changes the next batch brings, not divergences
        cur.execute("UPDATE r SET s = 'later' WHERE id IN (7, 4007)")
        cur.execute("INSERT INTO r VALUES (9000, 1, 'later')")

    passed = h.check("r")
    assert passed.passed, passed.description
    assert passed.metadata["source_rows"].value == 5000 - 21 + 1
    assert passed.metadata["recently_changed_keys"].value == 3
    # only the ranges holding 7, 4007 and 9000 (the chunk plan's key ranges of about 1000 rows)
    assert passed.metadata["ranges_compared_by_row"].value == 3 < checked

    silver = delta_path(h.silver_path("r"))  # hand edits, as a user with write access might
    spark.sql(f"UPDATE {silver} SET v = -1 WHERE id = 1500")
    spark.sql(f"UPDATE {silver} SET _deleted = true WHERE id = 4321")
    spark.sql(f"DELETE FROM {silver} WHERE id = 4322")
    failed = scheduled_reconciliation(h, "r")
    assert not failed.passed
    ranges = failed.metadata["ranges"].value
    assert len(ranges) == 2, ranges  # ranges of about 1000 keys: 1500 in one, 4321 and 4322 in another
    assert ranges[0].startswith("keys [") and "0 missing, 0 extra, 1 different (e.g. (1500,))" in ranges[0]
    assert "2 missing, 0 extra, 0 different (e.g. (4321,), (4322,))" in ranges[1]
    assert "Fix: re-snapshot" in failed.description


def test_a_spark_server_without_the_jdbc_driver_is_named_with_the_fix(spark, root, database, mariadb, params,
                                                                      tmp_path, monkeypatch):
    """The source side is read by the snapshot's JDBC reader: a server that cannot load its driver (as a
    cluster started without jvm/pom.xml's jars) gets an error naming the driver and the fix."""
    import pytest

    import ingest.sources.mysql.jdbc as jdbc
    from ingest.lake.connect import MissingJarsError
    from ingest.reconcile import reconcile
    from ingest_tests.integration.conftest import describe

    h = synced_source(spark, root, mariadb, database, tmp_path, "nodrv",
                      "CREATE TABLE nodrv (id INT PRIMARY KEY, v INT)",
                      "INSERT INTO nodrv SELECT seq, seq FROM seq_1_to_50", "UPDATE nodrv SET v = 0 WHERE id = 1")
    monkeypatch.setattr(jdbc, "DRIVER", "org.mariadb.jdbc.NotOnThisServer")
    with pytest.raises(MissingJarsError, match=r"no MariaDB JDBC driver \(org\.mariadb\.jdbc\.NotOnThisServer\)"
                                               r".*Fix: .*jvm/pom\.xml"):
        reconcile(spark, params, describe(params, "nodrv"), h.silver_path("nodrv"), chunk_size=10, parallelism=2)
