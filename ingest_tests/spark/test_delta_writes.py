from ingest.lake.commits import Txn, commits, last_commit
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
    got = last_commit(spark, path, kind="snapshot")
    assert got.metadata["log_start"] == {"file": "b.000001", "pos": 4} and got.version == 0
    assert [c.version for c in commits(spark, path)] == [1, 0]
    assert last_commit(spark, str(tmp_path / "missing")) is None


def test_commit_lookups_read_history_page_by_page_and_reach_the_oldest(spark, tmp_path, monkeypatch):
    from ingest.lake import commits as commits_module

    monkeypatch.setattr(commits_module, "HISTORY_PAGES", (2, 5))
    path = str(tmp_path / "t")
    df = spark.createDataFrame([(1,)], "id int")
    for n in range(8):
        append(df, path, {"kind": "bronze", "batch": n}, Txn(f"b{n}", 0))
    reads = []
    real = commits_module._history
    monkeypatch.setattr(commits_module, "_history", lambda s, p, limit: reads.append(limit) or real(s, p, limit))
    assert last_commit(spark, path, batch=7).version == 7 and reads == [2]
    reads.clear()
    assert last_commit(spark, path, batch=0).version == 0 and reads == [2, 5, None]  # the whole history at last
    reads.clear()
    assert last_commit(spark, path, batch=99) is None and reads == [2, 5, None]
