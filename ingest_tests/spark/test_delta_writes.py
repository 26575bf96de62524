from ingest.lake.commits import Txn
from ingest.lake.deltalog import commits, last_commit
from ingest.lake.write import append


def test_same_batch_written_twice_leaves_one_copy(spark, tmp_path):
    path = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string")
    first = append(df, path, {"kind": "bronze", "end": 7}, Txn("src:batch", 3))
    second = append(df, path, {"kind": "bronze", "end": 7}, Txn("src:batch", 3))
    assert first.committed and not second.committed
    assert spark.read.format("delta").load(path).count() == 2
    # a lower version of the same app id is a stale writer: skipped too
    assert not append(df, path, {"kind": "bronze"}, Txn("src:batch", 2)).committed
    assert append(df, path, {"kind": "bronze", "end": 9}, Txn("src:batch", 4)).committed
    assert spark.read.format("delta").load(path).count() == 4


def test_position_is_read_back_from_the_delta_log(spark, tmp_path):
    path = str(tmp_path / "t")
    df = spark.createDataFrame([(1,)], "id int")
    append(df, path, {"kind": "snapshot", "log_start": {"file": "b.000001", "pos": 4}}, Txn("a", 0))
    append(df, path, {"kind": "other"}, Txn("b", 0))
    # a commit that is not ours (no marker) is ignored
    df.write.format("delta").mode("append").option("userMetadata", '{"hand": "edit"}').save(path)
    got = last_commit(path, kind="snapshot")
    assert got.metadata["log_start"] == {"file": "b.000001", "pos": 4} and got.version == 0
    assert [c.version for c in commits(path)] == [1, 0]
    assert last_commit(str(tmp_path / "missing")) is None


def test_commit_lookups_find_the_newest_and_reach_back_past_checkpoints(spark, tmp_path):
    from ingest.lake.deltalog import LOG_DIR

    path = str(tmp_path / "t")
    df = spark.createDataFrame([(1,)], "id int")
    for n in range(12):
        append(df, path, {"kind": "bronze", "batch": n}, Txn(f"b{n}", 0))
    assert (tmp_path / "t" / LOG_DIR / "_last_checkpoint").exists()  # Delta wrote a checkpoint on the way
    assert last_commit(path, batch=11).version == 11
    assert last_commit(path, batch=0).version == 0  # the JSON of a commit before the checkpoint is still read
    assert last_commit(path, batch=99) is None


def _file_stats(path: str) -> list[dict]:
    import json
    from pathlib import Path

    return [json.loads(a["add"]["stats"]) for f in sorted((Path(path) / "_delta_log").glob("*.json"))
            for a in map(json.loads, f.read_text().splitlines()) if "add" in a]


def test_snapshot_waves_keep_delta_statistics_on_the_key_only(spark, tmp_path):
    from ingest.lake.snapshot import SnapshotCommit, Waves, commit_waves, snapshot_positions

    path = str(tmp_path / "snap")

    def snapshot(key: str, rows: str, snapshot_id: str) -> None:
        run = SnapshotCommit("src", "t", snapshot_id, "f", (key,), {}, 0)
        commit_waves(path, Waves(run, [[rows]], lambda g: spark.sql(g[0]), lambda g: {}), lambda _m: None)

    snapshot("k`ey", "SELECT id AS `k``ey`, id * 2 AS v, CAST(id AS decimal(38,0)) AS _pos FROM range(5)", "a")
    stats = _file_stats(path)
    assert stats and all(set(s["minValues"]) == {"k`ey"} for s in stats), stats
    # `_pos`'s range from the Parquet footers instead
    assert snapshot_positions(path, "a") == (5, 0, 4)
    # A snapshot with another key replaces the table: Delta would refuse a schema without the column
    # the property names, so the table goes back to statistics on every column.
    snapshot("id", "SELECT id, id * 2 AS v, CAST(id AS decimal(38,0)) AS _pos FROM range(3)", "b")
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2]
    assert set(_file_stats(path)[-1]["minValues"]) == {"id", "v", "_pos"}


def test_bronze_keeps_statistics_on_its_meta_columns_only(spark, tmp_path):
    import datetime as dt

    from ingest.changes import ChangeOp, ChangeRecord
    from ingest.lake.bronze import STATS_META, append_changes

    path = str(tmp_path / "bronze")
    now = dt.datetime.now(dt.timezone.utc)
    records = [ChangeRecord("t", ChangeOp.INSERT, 10 + i, {"id": i, "v": f"v{i}"}, committed_at=now, txid="0-1-5")
               for i in range(3)]
    append_changes(spark, path, "src", "t", "b1", records, [("id", "bigint"), ("v", "string")], {}, lambda _m: None)
    stats = _file_stats(path)
    assert stats and all(set(s["minValues"]) <= set(STATS_META) and "_pos" in s["minValues"] for s in stats), stats


def test_tables_are_written_in_zstd_without_dictionary_pages(spark, tmp_path):
    """The session's Parquet settings (connect.SESSION_CONF) reach Delta's writers: an append and a
    MERGE's rewrite write zstd pages and no dictionary, even for a column of one repeated value."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from ingest.lake.commits import Txn
    from ingest.lake.merge import ordered_merge

    path = str(tmp_path / "silver")
    rows = "SELECT id, 'same' AS v, CAST(id AS decimal(38,0)) AS _pos, false AS _deleted FROM range({})"
    ordered_merge(spark, path, spark.sql(rows.format(1000)), ["id"], {"kind": "test"}, Txn("t", 0))
    ordered_merge(spark, path, spark.sql(rows.format(1500)).selectExpr("id", "v", "_pos + 1 AS _pos", "_deleted"),
                  ["id"], {"kind": "test"}, Txn("t", 1))
    files = sorted(Path(path).glob("*.parquet"))
    assert len(files) >= 2, files  # the first write and the merge's rewrite
    for f in files:
        meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                column = meta.row_group(g).column(c)
                assert column.compression == "ZSTD", (f.name, column.path_in_schema, column.compression)
                assert not column.has_dictionary_page, (f.name, column.path_in_schema, column.encodings)


def test_the_io_manager_commits_run_decoded_batches_without_code_generation_and_puts_the_session_back(
        spark, spark_server, tmp_path):
    from dataclasses import dataclass

    from dagster import AssetKey

    from ingest.defs.io_managers import DeltaLakeIOManager
    from ingest.defs.resources import SparkResource
    from ingest.lake.tables import InOrder
    from ingest.lake.write import SMALL_BATCH_CONF

    seen = []

    @dataclass(frozen=True)
    class Batch:  # a change batch's bronze append that notes the session's setting while it commits
        n: int

        def apply(self, session, path, log):
            seen.append(session.conf.get("spark.sql.codegen.factoryMode"))
            df = session.createDataFrame([(self.n,)], "id int")
            return {"committed": append(df, path, {"kind": "bronze", "batch": str(self.n)},
                                        Txn(f"t:{self.n}", 0)).committed}

    resource = SparkResource(spark_config={"spark.remote": spark_server.url})
    lake = DeltaLakeIOManager(lake_root=str(tmp_path), spark=resource)
    key = "spark.sql.codegen.factoryMode"
    server = resource.session.conf.get(key)  # the tests' server sets it (conftest): it must come back
    try:
        for default in ("FALLBACK", server):  # a value the session set, then the server's
            resource.session.conf.set(key, default)
            seen.clear()
            lake.write(AssetKey(["src", "t", "changes"]), InOrder([Batch(1), Batch(2)], small_batches=True), print)
            lake.write(AssetKey(["src", "t", "changes"]), InOrder([Batch(3)]), print)
            assert seen == [SMALL_BATCH_CONF[key]] * 2 + [default]
            assert resource.session.conf.get(key) == default
    finally:
        resource.session.conf.set(key, server)
    assert spark.read.format("delta").load(lake.path_for(AssetKey(["src", "t", "changes"]))).count() == 3
