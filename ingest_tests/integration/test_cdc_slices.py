"""Change batches decoded on Spark's executors, slice by slice, against a real MariaDB and real Delta."""

from decimal import Decimal

import pytest
from dagster import instance_for_test

from ingest.adapters.mysql import change_batch_writes
from ingest.lake.bronze import BatchSummary, bronze_writes
from ingest.lake.deltalog import last_commit, table_version
from ingest.sources.mysql.cdc import read_change_batch
from ingest.sources.mysql.errors import BinlogGap
from ingest.sources.mysql.events import CapturedTable
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources

KEYS = {"a": CapturedTable(("id",)), "b": CapturedTable(("k1", "k2"))}


def head(cur) -> BinlogPosition:
    cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    return BinlogPosition(row[0], int(row[1]))


def workload(mariadb, database, root) -> BatchRange:
    """Transactions over two tables and three binlog files: multi-row events, updates, a primary key
    change, a TRUNCATE, a column added, and one transaction open across a rotation (it lands whole
    in the newer file, at its commit)."""
    with root.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(100), n DECIMAL(10,2))")
        cur.execute("CREATE TABLE b (k1 INT, k2 INT, t DATETIME(3), PRIMARY KEY (k1, k2))")
        start = head(cur)
        for i in range(12):
            cur.execute(f"INSERT INTO a SELECT seq, REPEAT('x', seq % 50), seq / 7 FROM seq_{i * 200 + 1}_to_{i * 200 + 200}")
            cur.execute(f"INSERT INTO b SELECT seq % 5, seq, '2026-01-01' + INTERVAL seq SECOND "
                        f"FROM seq_{i * 50 + 1}_to_{i * 50 + 50}")
        cur.execute("UPDATE a SET v = 'updated' WHERE id % 3 = 0")
        cur.execute("UPDATE a SET id = id + 100000 WHERE id <= 20")  # key change: delete and insert
        other = mariadb.connect(database=database)
        with other.cursor() as late:
            late.execute("BEGIN")
            late.execute("INSERT INTO a SELECT seq, 'late', 1 FROM seq_5001_to_5400")
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("DELETE FROM b WHERE k2 <= 100")
            late.execute("COMMIT")
        other.close()
        cur.execute("TRUNCATE b")
        cur.execute("INSERT INTO b SELECT 1, seq, NULL FROM seq_1_to_30")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("ALTER TABLE a ADD COLUMN w INT")
        cur.execute("INSERT INTO a SELECT seq, 'w', 2, seq FROM seq_9001_to_9300")
        cur.execute("DELETE FROM a WHERE id BETWEEN 9001 AND 9100")
        end = head(cur)
    return BatchRange(start, end)


def bronze_rows(spark, path):
    df = spark.read.format("delta").load(path)
    return sorted((tuple(r) for r in df.select(*sorted(df.columns)).collect()), key=repr)


def test_a_batch_decoded_in_slices_lands_the_same_bronze_as_one_read_here(spark, mariadb, database, root, params,
                                                                          tmp_path):
    batch = workload(mariadb, database, root)
    here = read_change_batch(params, "s", batch.key, KEYS)
    sliced = read_change_batch(params, "s", batch.key, KEYS, parallel_min_bytes=0, slice_bytes=4096)
    assert not here.slices and all(not c.sliced for c in here.tables.values())
    slices = [BatchRange(BinlogPosition.from_metadata(s["start"]), BinlogPosition.from_metadata(s["end"]))
              for s in sliced.slices]
    assert len(slices) >= 6 and len({s.start.file for s in slices}) == 3, slices
    assert slices[0].start == batch.start and slices[-1].end == batch.end
    assert all(x.end == y.start for x, y in zip(slices, slices[1:]))
    assert sliced.positions == here.positions
    assert {t: c.columns for t, c in sliced.tables.items()} == {t: c.columns for t, c in here.tables.items()}
    assert all(c.sliced and not c.records for c in sliced.tables.values())

    for name, writes in (("here", bronze_writes("s", here)), ("sliced", change_batch_writes("s", params, sliced, KEYS))):
        for t, write in writes.items():
            write.apply(spark, str(tmp_path / name / t), lambda m: None)
    for t in KEYS:
        expected = bronze_rows(spark, str(tmp_path / "here" / t))
        assert len(expected) == len(here.tables[t].records)
        assert bronze_rows(spark, str(tmp_path / "sliced" / t)) == expected, f"table {t}"
        # what silver's merge reads instead of a pass over bronze: the planning pass's TRUNCATEs and newest
        # commit, and the commit's row count, equal to what the records read here say
        counted, planned = (last_commit(str(tmp_path / name / t), kind="bronze") for name in ("here", "sliced"))
        summary = BatchSummary.from_metadata(planned.metadata["summary"])
        assert summary.changes is None
        assert summary.counted(planned.metrics) == BatchSummary.from_metadata(counted.metadata["summary"]), t
    assert BatchSummary.from_metadata(last_commit(str(tmp_path / "sliced" / "b"), kind="bronze")
                                      .metadata["summary"]).truncates  # the workload's TRUNCATE b


def test_a_slice_purged_before_executors_read_it_stops_the_batch_and_commits_nothing(spark, database, root, params,
                                                                                     tmp_path, mariadb):
    batch = workload(mariadb, database, root)
    sliced = read_change_batch(params, "s", batch.key, KEYS, parallel_min_bytes=0, slice_bytes=4096)
    with root.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        current = head(cur).file
        cur.execute(f"PURGE BINARY LOGS TO '{current}'")
    writes = change_batch_writes("s", params, sliced, KEYS)
    with pytest.raises(BinlogGap, match=r"purged.*re-snapshot"):
        writes["a"].apply(spark, str(tmp_path / "a"), lambda m: None)
    assert table_version(str(tmp_path / "a")) is None  # no commit (Delta may have made the folder)


def test_the_batch_asset_decodes_on_executors_and_silver_follows_the_source(spark, mariadb, database, root,
                                                                            tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE acct (id INT PRIMARY KEY, owner VARCHAR(20), balance DECIMAL(12,2))")
        cur.execute("CREATE TABLE quiet (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO acct SELECT seq, CONCAT('o', seq), seq FROM seq_1_to_300")
    sources = write_sources(tmp_path, mariadb.port, database, ["acct", "quiet"], cdc={"executor_min_bytes": 0})
    with instance_for_test() as instance:
        h = CdcHarness(spark, sources, tmp_path / "lake", instance)
        h.snapshot()
        with root.cursor() as cur:
            cur.execute("INSERT INTO acct SELECT seq, 'new', 1 FROM seq_301_to_2000")
            cur.execute("UPDATE acct SET balance = balance * 2 WHERE id % 7 = 0")
            cur.execute("DELETE FROM acct WHERE id BETWEEN 10 AND 40")
        key = h.sync()
        assert key is not None
        with root.cursor() as cur:
            cur.execute("SELECT id, owner, balance FROM acct")
            expected = sorted(tuple(r) for r in cur.fetchall())
        assert h.live("acct", ["id", "owner", "balance"]) == expected
        from ingest.lake.batchlog import logged_batches
        from ingest.lake.tables import table_location

        (entry,) = [e for e in logged_batches(str(tmp_path / "lake" / "src" / "_batch_log")) if e.batch == key]
        assert entry.tables == {"acct": 1700 + 2000 // 7 + 31}  # inserts, updates (id % 7 = 0), deletes
        assert last_commit(table_location(str(tmp_path / "lake"), "src", "quiet", "bronze"), batch=key) is None

        # a TRUNCATE in a batch decoded on executors: silver learns of it from the planning pass
        with root.cursor() as cur:
            cur.execute("TRUNCATE acct")
            cur.execute("INSERT INTO acct SELECT seq, 'after', 3 FROM seq_1_to_50")
        assert h.sync() is not None
        assert h.live("acct", ["id", "owner", "balance"]) == [(i, "after", Decimal(3)) for i in range(1, 51)]
