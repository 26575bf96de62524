"""Real schemas: a column left out by config, and a table that cannot be landed stops only itself."""

from dagster import AssetKey, SensorResult, instance_for_test

from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def rows(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return sorted(tuple(r) for r in cur.fetchall())


def test_an_excluded_column_is_absent_on_both_paths_and_noted(spark, mariadb, database, root, tmp_path):
    from ingest.lake.tables import table_location

    with root.cursor() as cur:
        cur.execute("CREATE TABLE place (id INT PRIMARY KEY, name VARCHAR(20), location POINT, secret TEXT)")
        cur.execute("INSERT INTO place VALUES (1, 'a', POINT(1, 2), 's1'), (2, 'b', POINT(3, 4), 's2')")
    sources = write_sources(tmp_path, mariadb.port, database, ["place"],
                            columns={"place": {"exclude": ["location", "secret"]}})
    with instance_for_test() as instance:
        h = CdcHarness(spark, sources, tmp_path / "lake", instance)
        h.snapshot()
        h.sync()
        with root.cursor() as cur:
            cur.execute("INSERT INTO place VALUES (3, 'c', POINT(5, 6), 's3')")
            cur.execute("UPDATE place SET name = 'bb', secret = 'x' WHERE id = 2")
        h.sync()
        for layer in ("snapshot", "bronze", "silver"):
            columns = spark.read.format("delta").load(table_location(str(h.lake), "src", "place", layer)).columns
            assert "location" not in columns and "secret" not in columns, (layer, columns)
        assert h.live("place", ["id", "name"]) == rows(root, "SELECT id, name FROM place")
        snap = h.instance.get_latest_materialization_event(AssetKey(["src", "place", "snapshot"]))
        assert snap.asset_materialization.metadata["excluded_columns"].value == ["location", "secret"]
        (silver_def,) = [a for a in h.assets if AssetKey(["src", "place"]) in a.keys]
        assert silver_def.metadata_by_key[AssetKey(["src", "place"])]["excluded_columns"] == "location, secret"


def tick_and_run(h: CdcHarness, failing: set[str] = frozenset()):
    """One sensor tick; runs what it asks for (snapshots of tables in `failing` are expected to fail).
    Returns (batch key or None, tables it asked to snapshot)."""
    result = h.tick()
    if not isinstance(result, SensorResult):
        return None, []
    key, snapshots = None, []
    for request in result.run_requests:
        if request.partition_key is None:
            (table,) = {k.path[1] for k in request.asset_selection}
            snapshots.append(table)
            h.run(list(request.asset_selection), expect_success=table not in failing)
            continue
        key = request.partition_key
        h.instance.add_dynamic_partitions("src_batches", [key])
        h.run(list(request.asset_selection), key)
        h.batches.append(key)
    return key, snapshots


def test_a_table_that_cannot_land_is_quarantined_and_recovers(spark, mariadb, database, root, tmp_path):
    from ingest.lake.batchlog import logged_batches
    from ingest.lake.tables import source_batch_log_location

    with root.cursor() as cur:
        cur.execute("CREATE TABLE good (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE nopk (a INT, b INT)")
        cur.execute("INSERT INTO good SELECT seq, seq FROM seq_1_to_50")
        cur.execute("INSERT INTO nopk SELECT seq, seq FROM seq_1_to_50")
    sources = write_sources(tmp_path, mariadb.port, database, ["good", "nopk"],
                            cdc={"retry_backoff_seconds": 0, "max_batch_attempts": 2})
    with instance_for_test() as instance:
        h = CdcHarness(spark, sources, tmp_path / "lake", instance)
        h.snapshot(["good"])
        h.run([AssetKey(["src", "nopk", "snapshot"])], expect_success=False)  # no primary key

        # CDC starts for the other table; the failed one is snapshotted again (and fails again)
        first, snapshots = tick_and_run(h, failing={"nopk"})
        assert first is not None and snapshots == ["nopk"]
        with root.cursor() as cur:
            cur.execute("INSERT INTO good VALUES (51, 51)")
            cur.execute("INSERT INTO nopk VALUES (51, 51)")
            cur.execute("UPDATE good SET v = -1 WHERE id = 1")
        second, snapshots = tick_and_run(h, failing={"nopk"})
        assert second is not None and snapshots == []  # two failed snapshots: quarantined, no third
        assert h.live("good", ["id", "v"]) == rows(root, "SELECT id, v FROM good")
        entry = next(logged_batches(source_batch_log_location(str(h.lake), "src")))
        assert entry.batch == second and "no primary key" in entry.skipped["nopk"]
        observed = h.instance.fetch_observations(AssetKey(["src", "nopk"]), limit=1).records
        assert observed and "no primary key" in observed[0].asset_observation.metadata["quarantined"].value

        # the fix its error names, then its snapshot by hand: its changes resume from its own snapshot
        with root.cursor() as cur:
            cur.execute("ALTER TABLE nopk ADD PRIMARY KEY (a)")
        h.snapshot(["nopk"])
        with root.cursor() as cur:
            cur.execute("INSERT INTO nopk VALUES (52, 52)")
            cur.execute("UPDATE nopk SET b = -1 WHERE a = 2")
            cur.execute("DELETE FROM good WHERE id = 3")
        third, snapshots = tick_and_run(h)
        assert third is not None and snapshots == []
        assert h.live("nopk", ["a", "b"]) == rows(root, "SELECT a, b FROM nopk")
        assert h.live("good", ["id", "v"]) == rows(root, "SELECT id, v FROM good")
        assert not next(logged_batches(source_batch_log_location(str(h.lake), "src"))).skipped
