"""The ordered merge converges whatever order batches arrive in, and however often."""

import re
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pyspark.errors import PySparkException

from ingest.lake.commits import Txn
from ingest.lake.deltalog import table_version
from ingest.lake.merge import CHANGE_DATA_FEED, Layout, live_rows, ordered_merge
from ingest_tests.merges import file_layout, last_commit, names_keys

SCHEMA = "id int, v string, _pos decimal(38,0), _deleted boolean"

# A history: (key, op, value) events; the event's index is its position.
events = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["upsert", "delete"]), st.text("ab", max_size=2)),
                  min_size=1, max_size=25)


def expected_state(history):
    state = {}
    for pos, (key, op, value) in enumerate(history, start=1):
        state[key] = (value, op == "delete", pos)
    return state


def rows(history, idx):
    return [(k, v, Decimal(i + 1), op == "delete") for i, (k, op, v) in enumerate(history) if i in idx]


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=events, data=st.data())
def test_any_order_any_repeats_same_table(spark, tmp_path_factory, history, data):
    n = len(history)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=3)))
    batches = [set(range(a, b)) for a, b in zip([0, *cuts], [*cuts, n]) if a < b]
    order = data.draw(st.permutations(range(len(batches))))
    repeats = data.draw(st.lists(st.sampled_from(range(len(batches))), max_size=2))
    path = str(tmp_path_factory.mktemp("merge") / "silver")
    for i, b in enumerate([*order, *repeats]):
        df = spark.createDataFrame(rows(history, batches[b]), SCHEMA)
        # a fresh txn each time: this test is about the _pos guard, not txn dedup
        ordered_merge(spark, path, df, ["id"], {"kind": "silver"}, Txn("prop", i))
    got = {r["id"]: (r["v"], r["_deleted"], int(r["_pos"]))
           for r in spark.read.format("delta").load(path).collect()}
    assert got == expected_state(history)
    live = {r["id"] for r in live_rows(spark.read.format("delta").load(path)).collect()}
    assert live == {k for k, (_, deleted, _) in expected_state(history).items() if not deleted}


def test_snapshot_merge_tombstones_rows_deleted_before_the_log_start(spark, tmp_path):
    path = str(tmp_path / "silver")
    base = spark.createDataFrame([(1, "a", Decimal(10), False), (2, "b", Decimal(10), False),
                                  (3, "c", Decimal(50), False)], SCHEMA)
    ordered_merge(spark, path, base, ["id"], {"kind": "silver"}, Txn("x", 0))
    # a new snapshot (log start 40) no longer holds 2 and 3: 2 was last changed
    # before 40, so it was deleted at the source; 3 changed at 50, so the change
    # log owns its fate and it stays
    snap = spark.createDataFrame([(1, "a2", Decimal(45), False)], SCHEMA)
    ordered_merge(spark, path, snap, ["id"], {"kind": "silver"}, Txn("x", 1), tombstone_before=40)
    got = {r["id"]: (r["v"], r["_deleted"], int(r["_pos"])) for r in spark.read.format("delta").load(path).collect()}
    assert got == {1: ("a2", False, 45), 2: ("b", True, 40), 3: ("c", False, 50)}


def test_repeated_merge_with_same_txn_is_skipped(spark, tmp_path):
    path = str(tmp_path / "silver")
    df = spark.createDataFrame([(1, "a", Decimal(10), False)], SCHEMA)
    assert ordered_merge(spark, path, df, ["id"], {}, Txn("y", 0)).committed
    df2 = spark.createDataFrame([(1, "b", Decimal(20), False)], SCHEMA)
    assert ordered_merge(spark, path, df2, ["id"], {}, Txn("y", 1)).committed
    assert not ordered_merge(spark, path, df2, ["id"], {}, Txn("y", 1)).committed


def test_a_change_with_a_null_key_fails_its_merge_with_an_error_naming_the_column_and_nothing_is_merged(
        spark, tmp_path):
    """The merge joins keys by `=` (a source's primary key cannot be NULL): a NULL would match no row and be
    inserted again at every change, so a batch holding one fails and the table stays as it was; one
    creating the table writes none."""
    path = str(tmp_path / "silver")
    ordered_merge(spark, path, spark.createDataFrame([(1, "a", Decimal(10), False)], SCHEMA), ["id"], {}, Txn("k", 0))
    batch = spark.createDataFrame([(1, "b", Decimal(20), False), (None, "no key", Decimal(20), False)], SCHEMA)
    with pytest.raises(PySparkException, match="NULL in its key column id"):
        ordered_merge(spark, path, batch, ["id"], {}, Txn("k", 1), expected_rows=2)
    assert table_version(path) == 0
    assert [tuple(r) for r in spark.read.format("delta").load(path).collect()] == [(1, "a", Decimal(10), False)]
    with pytest.raises(PySparkException, match="NULL in its key column id"):
        ordered_merge(spark, str(tmp_path / "new"), batch, ["id"], {}, Txn("k", 0))
    assert table_version(str(tmp_path / "new")) is None


def test_small_batch_into_a_table_opted_into_deletion_vectors_names_its_keys_and_merges_the_same(spark, tmp_path):
    schema = "id int, name string, v string, _pos decimal(38,0), _deleted boolean"
    names = ["a", "it's", "b"]  # a quote has no trusted literal: name is not narrowed
    base = [(i, names[i % 3], "old", Decimal(10), False) for i in range(300)]
    batch = [(i, names[i % 3], "new", Decimal(20), False) for i in range(0, 300, 7)]  # updates, every name
    batch += [(i, names[i % 3], "stale", Decimal(5), False) for i in range(1, 300, 50)]  # older: must not apply
    batch += [(i, "b", "inserted", Decimal(20), False) for i in range(1000, 1010)]  # new keys
    want = {(i, n): v for i, n, v, _, _ in base}
    want.update({(i, n): v for i, n, v, p, _ in batch if p == 20})
    for deletion_vectors in (True, False):
        path = str(tmp_path / f"silver-{deletion_vectors}")
        # made without them: the opt-in turns them on at the next merge
        ordered_merge(spark, path, spark.createDataFrame(base, schema), ["id", "name"], {"kind": "silver"}, Txn("n", 0))
        ordered_merge(spark, path, spark.createDataFrame(batch, schema), ["id", "name"], {"kind": "silver"},
                      Txn("n", 1), expected_rows=len(batch), layout=Layout(deletion_vectors=deletion_vectors))
        rows = spark.read.format("delta").load(path).collect()
        assert len(rows) == len(want), "a key the narrowed condition missed would be inserted twice"
        assert {(r["id"], r["name"]): r["v"] for r in rows} == want
        merge = last_commit(spark, path)
        assert names_keys(merge.predicate, "id") == deletion_vectors, merge.predicate
        assert not names_keys(merge.predicate, "name"), merge.predicate
        assert (int(merge.metrics["numTargetDeletionVectorsAdded"]) > 0) == deletion_vectors


def test_a_batch_of_few_keys_a_file_reaches_the_parquet_reader_as_equalities(spark, spark_server, tmp_path):
    """Up to PUSH_KEYS_PER_FILE keys a file, a deletion-vector merge's key list is pushed into Parquet as
    equalities, which the reader tests page by page (parquet-java logs the predicate it filters by in
    each task); more keys a file keep Spark's `in` predicate. Either way the merge gives the same rows,
    and the session's setting is put back."""
    from ingest.lake.merge import IN_FILTER_THRESHOLD, PUSH_KEYS_PER_FILE

    base_key = 7_340_000  # keys no other test writes: the shared server's log is searched for them
    path = str(tmp_path / "silver")
    base = [(base_key + i, "old", Decimal(10), False) for i in range(2000)]
    ordered_merge(spark, path, spark.createDataFrame(base, SCHEMA), ["id"], {"kind": "silver"}, Txn("p", 0),
                  layout=Layout(deletion_vectors=True), file_rows=100)
    files = len(file_layout(spark, path))
    assert files >= 20, files
    log = Path(spark_server.log)
    threshold = spark.conf.get(IN_FILTER_THRESHOLD, None)

    def merge(version: int, keys: list[int], stale: list[int], new: list[int]):
        batch = [(k, f"v{version}", Decimal(20 + version), False) for k in keys]
        batch += [(k, "stale", Decimal(5), False) for k in stale]  # older than the table's rows: not applied
        batch += [(k, f"v{version}", Decimal(20 + version), False) for k in new]
        seen = log.stat().st_size
        ordered_merge(spark, path, spark.createDataFrame(batch, SCHEMA), ["id"], {"kind": "silver"},
                      Txn("p", version), expected_rows=len(batch), layout=Layout(deletion_vectors=True))
        assert spark.conf.get(IN_FILTER_THRESHOLD, None) == threshold
        with log.open("rb") as f:
            f.seek(seen)
            return f.read().decode("utf-8", "replace")

    few = [base_key + i for i in range(0, 2000, 50)]  # 2 a file
    logged = merge(1, few, [base_key + 1], [base_key + 5000])
    assert len(few) + 2 <= PUSH_KEYS_PER_FILE * files
    assert re.search(rf"Filtering using predicate: .*\bor\(.*eq\(id, {few[0]}\)", logged), logged[-2000:]
    many = [base_key + i for i in range(3, 2000, 8)]  # 250: more than PUSH_KEYS_PER_FILE a file
    assert len(many) > PUSH_KEYS_PER_FILE * files
    logged = merge(2, many, [], [base_key + 6000])
    assert f"eq(id, {many[0]})" not in logged and "in(id, " in logged, logged[-2000:]

    want = {k: "old" for k, *_ in base}
    want.update({k: "v1" for k in (*few, base_key + 5000)})
    want.update({k: "v2" for k in (*many, base_key + 6000)})
    rows = spark.read.format("delta").load(path).collect()
    assert len(rows) == len(want) and {r["id"]: r["v"] for r in rows} == want


def test_a_merges_first_pass_filters_its_scan_by_the_pushed_keys_too(spark, spark_server, tmp_path):
    """Delta's first pass (the files a batch touches) tags each target row with a row id that is not
    deterministic, which stops Spark's filter pushdown above its scan; the project's optimizer rule
    (jvm/src MergeScanFilter) moves the keys below it, so the Parquet reader filters each file that pass
    reads as well as the later passes' (one more filtered read a file), and the merge gives the same rows.
    A query of the user's own with such a projection keeps Spark's order."""
    from ingest.lake.connect import PROJECT_EXTENSIONS

    assert PROJECT_EXTENSIONS in spark.conf.get("spark.sql.extensions")
    base_key = 7_360_000  # keys no other test writes: the shared server's log is searched for them
    path = str(tmp_path / "silver")
    base = [(base_key + i, "old", Decimal(10), False) for i in range(2000)]
    ordered_merge(spark, path, spark.createDataFrame(base, SCHEMA), ["id"], {"kind": "silver"}, Txn("f", 0),
                  layout=Layout(deletion_vectors=True), file_rows=100)
    log, enabled = Path(spark_server.log), "spark.ingest.mergeScanFilter.enabled"  # the rule's switch

    def filtered_reads(version: int, rule: str) -> int:
        """Parquet reads filtered by this batch's keys (parquet-java logs its predicate in each)."""
        keys = [base_key + i for i in range(version, 2000, 50)]  # 2 keys a file: every file touched, pushed
        batch = spark.createDataFrame([(k, f"v{version}", Decimal(20 + version), False) for k in keys], SCHEMA)
        seen = log.stat().st_size
        spark.conf.set(enabled, rule)
        try:
            ordered_merge(spark, path, batch, ["id"], {"kind": "silver"}, Txn("f", version),
                          expected_rows=len(keys), layout=Layout(deletion_vectors=True))
        finally:
            spark.conf.unset(enabled)
        with log.open("rb") as f:
            f.seek(seen)
            return f.read().decode("utf-8", "replace").count(f"eq(id, {keys[0]})")

    without = filtered_reads(1, "false")
    files = len(file_layout(spark, path))  # every one's keys span the batch's: the first pass reads them all
    with_rule = filtered_reads(2, "true")
    assert with_rule == without + files, (without, with_rule, files)
    want = {k: "old" for k, *_ in base}
    want.update({base_key + i: f"v{v}" for v in (1, 2) for i in range(v, 2000, 50)})
    assert {r["id"]: r["v"] for r in spark.read.format("delta").load(path).collect()} == want

    # the rule takes only Delta's tags (_row_id_, _file_name_): here the ids are numbered before the filter
    tagged = spark.range(0, 10, numPartitions=1).selectExpr("id", "monotonically_increasing_id() AS n")
    assert [tuple(r) for r in tagged.where("id > 6").collect()] == [(7, 7), (8, 8), (9, 9)]


def test_silver_is_created_in_key_order_and_a_batch_at_clustered_keys_rewrites_only_their_files(spark, tmp_path):
    import random

    keys = list(range(3000))
    random.Random(7).shuffle(keys)  # the snapshot's rows in no key order
    path = str(tmp_path / "silver")
    base = spark.createDataFrame([(k, "old", Decimal(10), False) for k in keys], SCHEMA)
    ordered_merge(spark, path, base, ["id"], {"kind": "silver"}, Txn("c", 0), file_rows=500)
    ranges = [(f["lo"], f["hi"]) for f in file_layout(spark, path)]
    assert len(ranges) >= 6, ranges  # files of at most 500 rows
    assert all(hi < lo for (_, hi), (lo, _) in zip(ranges, ranges[1:])), f"files overlap in keys: {ranges}"

    # a batch at the newest keys, as recent rows change: updates and inserts
    batch = [(k, "new", Decimal(20), False) for k in range(2950, 3010)]
    ordered_merge(spark, path, spark.createDataFrame(batch, SCHEMA), ["id"], {"kind": "silver"}, Txn("c", 1),
                  expected_rows=len(batch))
    merge = last_commit(spark, path)
    assert int(merge.metrics["numTargetFilesRemoved"]) == sum(1 for lo, hi in ranges if hi >= 2950), \
        (merge.metrics, ranges)  # only the files the batch's keys fall in
    got = {r["id"]: r["v"] for r in spark.read.format("delta").load(path).collect()}
    assert got == {k: "new" if k >= 2950 else "old" for k in range(3010)}


def test_silver_records_a_change_feed_spark_and_delta_rs_read(spark, tmp_path):
    """Silver made by the ordered merge records Delta's change data feed: Spark's table_changes and
    delta-rs's load_cdf both read a batch's update, insert and tombstone (an update setting `_deleted`)."""
    from deltalake import DeltaTable

    path = str(tmp_path / "silver")
    ordered_merge(spark, path, spark.createDataFrame([(1, "a", Decimal(1), False), (2, "b", Decimal(1), False)],
                                                     SCHEMA), ["id"], {"kind": "silver"}, Txn("cdf", 0))
    ordered_merge(spark, path, spark.createDataFrame([(1, "a2", Decimal(2), False), (2, "b", Decimal(2), True),
                                                      (3, "c", Decimal(2), False)], SCHEMA),
                  ["id"], {"kind": "silver"}, Txn("cdf", 1))
    by_spark = sorted((r["id"], r["v"], r["_deleted"], r["_change_type"]) for r in spark.sql(
        f"SELECT * FROM table_changes_by_path('{path}', 1)").collect())
    expected = [(1, "a", False, "update_preimage"), (1, "a2", False, "update_postimage"),
                (2, "b", False, "update_preimage"), (2, "b", True, "update_postimage"), (3, "c", False, "insert")]
    assert by_spark == expected
    import pyarrow as pa

    changes = pa.table(DeltaTable(path).load_cdf(starting_version=1).read_all()).to_pylist()
    assert sorted((r["id"], r["v"], r["_deleted"], r["_change_type"]) for r in changes) == expected


def test_a_merge_writes_its_data_and_change_files_at_once_without_sorting_its_rows(spark, spark_server, tmp_path):
    """A merge into a table with the feed writes each task's rows to its data file and its `_change_data`
    file open at once (connect.SESSION_CONF); Spark logs it when it gives that up and sorts the rest of a
    task's rows instead, which it did from each task's first change row on while the setting allowed two
    writers (it falls back on reaching the number)."""
    path, log = tmp_path / "silver", Path(spark_server.log)
    ordered_merge(spark, str(path), spark.createDataFrame([(i, "a", Decimal(1), False) for i in range(200)], SCHEMA),
                  ["id"], {"kind": "silver"}, Txn("writers", 0))
    seen = log.stat().st_size
    batch = [(i, "b", Decimal(2), False) for i in range(0, 300, 7)]  # updates and inserts
    ordered_merge(spark, str(path), spark.createDataFrame(batch, SCHEMA), ["id"], {"kind": "silver"},
                  Txn("writers", 1), expected_rows=len(batch))
    with log.open("rb") as f:
        f.seek(seen)
        assert "Fall back from concurrent writers" not in f.read().decode("utf-8", "replace")
    assert list((path / "_change_data").glob("*.parquet"))
    assert {r["id"]: r["v"] for r in spark.read.format("delta").load(str(path)).collect()} == \
        {**{i: "a" for i in range(200)}, **{i: "b" for i in range(0, 300, 7)}}


def test_a_table_opted_out_of_the_change_feed_writes_none_and_an_opt_in_or_out_applies_at_the_next_merge(spark, tmp_path):
    """`without_change_feed` (Layout.change_feed False): the table is made with the feed off and a merge that
    updates rows writes no `_change_data` files; a table made with the feed turns it off at its next merge,
    and back on when the opt-out is removed, and the merge's rows are the same either way."""
    from ingest.lake.deltalog import table_properties
    from ingest.lake.history import merge_history

    def change_files(path: str) -> list:
        return sorted((tmp_path / path / "_change_data").glob("*.parquet")) if (tmp_path / path / "_change_data").exists() else []

    off, on = Layout(change_feed=False), Layout()
    base = spark.createDataFrame([(i, "a", Decimal(1), False) for i in range(20)], SCHEMA)
    ordered_merge(spark, str(tmp_path / "off"), base, ["id"], {"kind": "silver"}, Txn("off", 0), layout=off)
    assert table_properties(str(tmp_path / "off"))[CHANGE_DATA_FEED] == "false"
    update = spark.createDataFrame([(i, "b", Decimal(2), False) for i in range(5)], SCHEMA)
    ordered_merge(spark, str(tmp_path / "off"), update, ["id"], {"kind": "silver"}, Txn("off", 1), layout=off)
    assert change_files("off") == []
    assert {r["id"]: r["v"] for r in spark.read.format("delta").load(str(tmp_path / "off")).collect()} == \
        {i: "b" if i < 5 else "a" for i in range(20)}

    later = str(tmp_path / "later")  # made with the feed, opted out afterwards, then in again
    ordered_merge(spark, later, base, ["id"], {"kind": "silver"}, Txn("later", 0), layout=on)
    ordered_merge(spark, later, update, ["id"], {"kind": "silver"}, Txn("later", 1), layout=off)
    assert table_properties(later)[CHANGE_DATA_FEED] == "false" and change_files("later") == []
    again = spark.createDataFrame([(i, "c", Decimal(3), False) for i in range(3)], SCHEMA)
    ordered_merge(spark, later, again, ["id"], {"kind": "silver"}, Txn("later", 2), layout=on)
    assert table_properties(later)[CHANGE_DATA_FEED] == "true" and change_files("later")
    version = table_version(later)
    assert sorted((r["id"], r["_change_type"]) for r in spark.sql(
        f"SELECT * FROM table_changes_by_path('{later}', {version})").collect()) == \
        sorted([(i, t) for i in range(3) for t in ("update_preimage", "update_postimage")])

    # history follows the same opt-out
    versions = "id int, v string, _valid_from decimal(38,0), _valid_from_ts timestamp, _deleted boolean"
    history = str(tmp_path / "history")
    for n, layout in enumerate((off, off)):
        merge_history(spark, history, spark.createDataFrame([(1, f"v{n}", Decimal(n + 1), None, False)], versions),
                      ["id"], [], {"kind": "history"}, Txn("h", n), layout=layout)
    assert table_properties(history)[CHANGE_DATA_FEED] == "false" and change_files("history") == []


def test_a_copy_on_write_merge_broadcasts_its_batch_keeps_key_order_and_merges_the_same(spark, spark_server, tmp_path):
    """A copy-on-write MERGE with an insert clause joins its batch to every row of the files it rewrites by a
    full outer join, which Spark cannot broadcast: the table's rows were shuffled and came out in hash order.
    The project's optimizer rule (jvm/src MergeBroadcastJoin) writes that join as a right outer join with the
    batch broadcast plus the batch's unmatched rows, so the rewritten files keep the key order they had. Rows,
    change feed and Delta's counts are those of the merge without the rule, and Delta counts the batch once
    (no warning that its source changed between passes). A batch too large to broadcast keeps the shuffle."""
    enabled, log = "spark.ingest.mergeBroadcastJoin.enabled", Path(spark_server.log)  # the rule's switch
    base = [(k, "old", Decimal(10), False) for k in range(3000)]
    batches = [[(k, f"u{k}", Decimal(20), False) for k in range(5, 3000, 37)]
               + [(k, "new", Decimal(20), False) for k in range(3000, 3010)],
               [(k, f"w{k}", Decimal(30), False) for k in range(11, 3000, 41)] + [(3005, "new again", Decimal(30), False)]]

    def merged(name: str, rule: str) -> tuple[str, list[dict]]:
        path = str(tmp_path / name)
        ordered_merge(spark, path, spark.createDataFrame(base, SCHEMA), ["id"], {"kind": "silver"}, Txn(name, 0),
                      file_rows=500)
        metrics = []
        spark.conf.set(enabled, rule)
        try:
            for i, batch in enumerate(batches, start=1):
                ordered_merge(spark, path, spark.createDataFrame(batch, SCHEMA), ["id"], {"kind": "silver"},
                              Txn(name, i), expected_rows=len(batch), file_rows=500)
                metrics.append({k: v for k, v in last_commit(spark, path).metrics.items()
                                if k.startswith("num") and "Bytes" not in k and "Files" not in k})
        finally:
            spark.conf.unset(enabled)
        return path, metrics

    def in_key_order(path: str) -> bool:
        """Every data file of the table's current version holds its rows in key order (as Parquet stores them)."""
        import pyarrow.parquet as pq

        files = {r[0] for r in spark.read.format("delta").load(path).select("_metadata.file_path").collect()}
        orders = [pq.read_table(f.removeprefix("file:"), columns=["id"]).column("id").to_pylist() for f in files]
        return all(ids == sorted(ids, key=lambda k: (k is not None, k)) for ids in orders)

    seen = log.stat().st_size
    path, metrics = merged("broadcast", "true")
    without, metrics_without = merged("shuffled", "false")
    with log.open("rb") as f:
        f.seek(seen)
        assert "rows in second scan" not in f.read().decode("utf-8", "replace")
    assert in_key_order(path)
    assert not in_key_order(without)  # what the shuffle left: the rule is what keeps the order
    assert metrics == metrics_without
    assert metrics[0]["numTargetRowsUpdated"] == str(len(range(5, 3000, 37)))
    assert metrics[0]["numTargetRowsInserted"] == "10" and metrics[1]["numTargetRowsUpdated"] == str(len(range(11, 3000, 41)) + 1)

    def table(p: str) -> list[tuple]:
        return sorted((tuple(r) for r in spark.read.format("delta").load(p).collect()), key=repr)

    want = {k: "old" for k in range(3000)} | {k: "new" for k in range(3000, 3010)}
    for batch in batches:
        want |= {k: v for k, v, *_ in batch}
    assert {r[0]: r[1] for r in table(path)} == want
    assert table(path) == table(without)

    def feed(p: str) -> list[tuple]:
        rows = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(p)
        return sorted((tuple(r) for r in rows.drop("_commit_timestamp").collect()), key=repr)

    assert feed(path) == feed(without)

    # a batch Spark would not broadcast (its estimated size above the threshold) keeps Delta's shuffled join
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        ordered_merge(spark, path, spark.createDataFrame([(7, "late", Decimal(40), False)], SCHEMA), ["id"],
                      {"kind": "silver"}, Txn("broadcast", 3), expected_rows=1, file_rows=500)
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert not in_key_order(path)
    assert {r[0]: r[1] for r in table(path)} == want | {7: "late"}


def test_a_copy_on_write_merge_writes_its_unchanged_rows_apart_and_merges_the_same(spark, tmp_path, monkeypatch):
    """The project's second optimizer rule (jvm/src MergeCopyRows) writes the rows a copy-on-write batch leaves
    unchanged straight from their files, in one task a file, and the batch's changed rows in a file of their
    own, in key order (into a table of COPY_ROWS_MIN_BYTES or more; this one is made smaller and the bound
    lowered). Rows, change feed and Delta's counts are those of the merge without the rule: updates,
    a stale change (an older `_pos`, which changes nothing), a delete, inserts. A snapshot's merge, whose
    WHEN NOT MATCHED BY SOURCE clause changes unmatched rows, does not use the rule and still tombstones."""
    import ingest.lake.merge as merge

    base = [(k, "old", Decimal(10), False) for k in range(3000)]
    batches = [[(k, f"u{k}", Decimal(20), False) for k in range(5, 3000, 37)]
               + [(k, "new", Decimal(20), False) for k in range(3000, 3010)] + [(600, "stale", Decimal(5), False)],
               [(k, f"w{k}", Decimal(30), False) for k in range(11, 3000, 41)] + [(42, "gone", Decimal(30), True),
                                                                                  (3005, "new again", Decimal(30), False)]]

    def merged(name: str) -> tuple[str, list[dict], list[list[int]]]:
        path, metrics, changed_files = str(tmp_path / name), [], []
        ordered_merge(spark, path, spark.createDataFrame(base, SCHEMA), ["id"], {"kind": "silver"}, Txn(name, 0),
                      file_rows=500)
        for i, batch in enumerate(batches, start=1):
            before = {r[0] for r in spark.read.format("delta").load(path).select("_metadata.file_path").collect()}
            ordered_merge(spark, path, spark.createDataFrame(batch, SCHEMA), ["id"], {"kind": "silver"},
                          Txn(name, i), expected_rows=len(batch), file_rows=500)
            metrics.append({k: v for k, v in last_commit(spark, path).metrics.items()
                            if k.startswith("num") and "Bytes" not in k and "Files" not in k})
            new = spark.read.format("delta").load(path).select("id", "_metadata.file_path").collect()
            by_file: dict[str, list[int]] = {}
            for r in new:
                if r[1] not in before:
                    by_file.setdefault(r[1], []).append(r[0])
            changed_files.append(sorted(sorted(ids) for ids in by_file.values()))
        return path, metrics, changed_files

    monkeypatch.setattr(merge, "COPY_ROWS_MIN_BYTES", 0)  # the rule into a table this small too
    path, metrics, files = merged("apart")
    monkeypatch.setattr(merge, "COPY_ROWS", "spark.ingest.mergeCopyRows.notSetByThisTest")
    without, metrics_without, files_without = merged("together")
    monkeypatch.undo()

    # the rows each batch matched (the stale change's too, which it leaves as it was), in a file of their own
    matched = [sorted([*range(5, 3000, 37), 600]), sorted([*range(11, 3000, 41), 42, 3005])]
    assert matched[0] in files[0] and matched[1] in files[1]
    assert matched[0] not in files_without[0] and matched[1] not in files_without[1]
    assert [3000, 3001, 3002, 3003, 3004, 3005, 3006, 3007, 3008, 3009] in files[0]  # the inserts' own file
    assert metrics == metrics_without
    updated = len(range(5, 3000, 37))
    assert metrics[0]["numTargetRowsUpdated"] == str(updated) and metrics[0]["numTargetRowsInserted"] == "10"
    assert metrics[0]["numTargetRowsCopied"] == str(3000 - updated)  # the stale change's row among them

    def table(p: str) -> list[tuple]:
        return sorted((tuple(r) for r in spark.read.format("delta").load(p).collect()), key=repr)

    def feed(p: str) -> list[tuple]:
        rows = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(p)
        return sorted((tuple(r) for r in rows.drop("_commit_timestamp").collect()), key=repr)

    assert table(path) == table(without) and feed(path) == feed(without)
    got = {r[0]: (r[1], r[3]) for r in table(path)}
    assert got[600] == ("old", False) and got[42] == ("gone", True) and got[3005] == ("new again", False)
    import pyarrow.parquet as pq

    paths = {r[0] for r in spark.read.format("delta").load(path).select("_metadata.file_path").collect()}
    for f in paths:
        ids = pq.read_table(f.removeprefix("file:"), columns=["id"]).column("id").to_pylist()
        assert ids == sorted(ids), f  # every file in key order

    # into a table under the bound (the default again) a merge takes Delta's path: no file of the changed rows
    before = {r[0] for r in spark.read.format("delta").load(path).select("_metadata.file_path").collect()}
    ordered_merge(spark, path, spark.createDataFrame([(7, "x", Decimal(40), False), (8, "y", Decimal(40), False)],
                                                     SCHEMA), ["id"], {"kind": "silver"}, Txn("apart", 9),
                  expected_rows=2, file_rows=500)
    new = spark.read.format("delta").load(path).select("id", "_metadata.file_path").collect()
    assert [7, 8] not in [sorted(r[0] for r in new if r[1] == f) for f in {r[1] for r in new} - before]
    assert {r[0]: r[1] for r in table(path)}[7] == "x"

    # a snapshot's merge: rows it lacks that changed before its log start become tombstones, others stay
    snapshot = spark.createDataFrame([(k, "snap", Decimal(25), False) for k in range(1, 3010)], SCHEMA)
    ordered_merge(spark, path, snapshot, ["id"], {"kind": "silver"}, Txn("apart", 10), tombstone_before=25)
    got = {r[0]: (r[1], r[3]) for r in table(path)}
    assert got[0] == ("old", True) and got[11] == ("w11", False) and got[5] == ("snap", False)
