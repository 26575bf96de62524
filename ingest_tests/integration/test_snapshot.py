"""Chunked, parallel snapshots and the silver merge, against a real MariaDB and real Delta."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ingest.lake.columns import SOURCE_NAME, lake_name
from ingest.lake.deltalog import added_files, commits, last_commit
from ingest.lake.merge import live_rows, row_counts
from ingest.lake.silver import SilverFromSnapshot, SnapshotNotFinished
from ingest.lake.snapshot import snapshot_positions
from ingest.lake.tables import LakeTable
from ingest.sources.mysql.errors import NoPrimaryKey, TableNotFound
from ingest.sources.mysql.positions import BinlogPosition
from ingest.sources.mysql.schema import describe_table
from ingest_tests.integration.conftest import describe, snapshot
from ingest_tests.open_readers import assert_any_reader_opens


def source_rows(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return sorted(tuple(r) for r in cur.fetchall())


def test_composite_key_table(spark, root, params, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE olines (order_id BIGINT UNSIGNED, line_no SMALLINT, sku VARCHAR(10), "
                    "PRIMARY KEY (order_id, line_no))")
        cur.execute("INSERT INTO olines SELECT o.seq, l.seq, CONCAT('s', o.seq * l.seq) "
                    "FROM seq_1_to_700 o JOIN seq_1_to_7 l")
    path = str(tmp_path / "olines")
    progress = snapshot(spark, params, "olines", path, chunk_size=500, chunks_per_commit=3)
    assert progress.chunks_total == 10  # 4900 rows / 500
    got = sorted((int(r[0]), r[1], r[2]) for r in
                 spark.read.format("delta").load(path).select("order_id", "line_no", "sku").collect())
    assert got == source_rows(root, "SELECT order_id, line_no, sku FROM olines")
    # Parquet's page and row-group statistics: the key's and _pos's, which readers filter on, and no other
    files = sorted(Path(path).glob("*.parquet"))
    assert files
    for file in files:
        group = pq.ParquetFile(file).metadata.row_group(0)
        kept = {group.column(i).path_in_schema for i in range(group.num_columns)
                if group.column(i).is_stats_set and group.column(i).statistics.has_min_max}
        assert kept == {"order_id", "line_no", "_pos"}, (file.name, kept)


def test_large_table_in_parallel_chunks_with_positions(spark, root, params, tmp_path, mariadb):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, a VARCHAR(20), b DECIMAL(10,2))")
        cur.execute("INSERT INTO big SELECT seq, CONCAT('r', seq), seq / 3 FROM seq_1_to_200000")
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    head = BinlogPosition(file, int(pos))
    path = str(tmp_path / "big")
    progress = snapshot(spark, params, "big", path, chunk_size=20_000, parallelism=2, chunks_per_commit=4)
    assert progress.chunks_total == 10 and progress.waves_committed == [0, 1, 2]
    # each wave is one commit carrying its positions; the chunks are read by 2 Spark partitions
    ours = commits(path)
    assert [c.metadata["wave"] for c in ours] == [2, 1, 0]
    assert all(c.metadata["log_start"] == progress.log_start.to_metadata() for c in ours)
    df = spark.read.format("delta").load(path)
    assert df.count() == 200_000 and df.select("id").distinct().count() == 200_000
    got = sorted((r[0], r[1], r[2]) for r in df.select("id", "a", "b").collect())
    assert got == source_rows(root, "SELECT id, a, b FROM big")
    # every row carries its chunk's consistent-snapshot position, at or after the log start
    lo, hi = df.selectExpr("min(_pos)", "max(_pos)").first()
    assert progress.log_start.row_pos() <= lo <= hi and progress.log_start >= head
    # the same count and range without a Spark job: Delta keeps statistics on the key alone, and the
    # range comes from the Parquet footers Spark wrote
    adds = [a for c in ours for a in added_files(path, c.version)]
    assert len(adds) >= 3 and all(set(json.loads(a["stats"])["minValues"]) == {"id"} for a in adds)
    assert snapshot_positions(path, progress.snapshot_id) == (200_000, lo, hi)


def test_a_snapshot_writes_pages_past_the_sessions_page_row_limit(spark, root, params, tmp_path):
    """The sessions' 5,000-row Parquet pages are for the keys a merge pushes into silver; a snapshot,
    which the silver merge reads whole, writes pages that only Parquet's page size ends (read back from
    the files' own page headers)."""
    from ingest.lake.connect import SESSION_CONF
    from ingest_tests.parquet_pages import page_rows

    with root.cursor() as cur:
        cur.execute("CREATE TABLE paged (id INT PRIMARY KEY, a VARCHAR(20))")
        cur.execute("INSERT INTO paged SELECT seq, CONCAT('r', seq) FROM seq_1_to_30000")
    path = str(tmp_path / "paged")
    snapshot(spark, params, "paged", path, chunk_size=10_000, parallelism=1, chunks_per_commit=3)
    pages = [page_rows(f, 0) for f in Path(path).glob("*.parquet")]
    assert max(r for p in pages for r in p) > int(SESSION_CONF["parquet.page.row.count.limit"]), pages
    assert sum(r for p in pages for r in p) == 30_000


def test_log_start_is_not_after_the_binlog_head_when_the_snapshot_ends(spark, root, params, tmp_path):
    """The change-log start is a real position of the server: at or before its head afterwards."""
    with root.cursor() as cur:
        cur.execute("CREATE TABLE w (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO w SELECT seq, 0 FROM seq_1_to_5000")
    path = str(tmp_path / "w")
    progress = snapshot(spark, params, "w", path, chunk_size=1000, parallelism=1, chunks_per_commit=1)
    with root.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()
    assert progress.log_start <= BinlogPosition(end[0], int(end[1]))


def test_writing_the_same_chunks_twice_leaves_one_copy(spark, root, params, tmp_path):
    from ingest.lake.commits import Txn
    from ingest.lake.write import append
    from ingest.sources.mysql.chunks import plan_chunks
    from ingest.adapters.mysql import read_chunks_df

    with root.cursor() as cur:
        cur.execute("CREATE TABLE d (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO d SELECT seq, seq FROM seq_1_to_3000")
    with params.connect() as conn:
        schema = describe_table(conn, params.database, "d")
    path = str(tmp_path / "d")
    chunks = plan_chunks([(1001,), (2001,)])
    for _ in range(2):
        append(read_chunks_df(spark, params, schema, chunks, 2), path, {"kind": "snapshot"}, Txn("snap:d", 0))
    assert spark.read.format("delta").load(path).count() == 3000


def test_silver_from_snapshot_and_resnapshot_tombstones_deleted_rows(spark, root, params, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO s SELECT seq, 'a' FROM seq_1_to_100")
    snap_path, silver_path = str(tmp_path / "snap"), str(tmp_path / "silver")
    snap = LakeTable(spark, snap_path)
    with pytest.raises(SnapshotNotFinished, match="materialize test/s/snapshot first"):
        SilverFromSnapshot("test", "s", snap).apply(spark, silver_path, lambda m: None)
    snapshot(spark, params, "s", snap_path)
    def counts():
        return row_counts(spark.read.format("delta").load(silver_path))

    assert SilverFromSnapshot("test", "s", snap).apply(spark, silver_path, lambda m: None)["committed"]
    assert counts() == {"rows_live": 100, "tombstones": 0}
    again = SilverFromSnapshot("test", "s", snap).apply(spark, silver_path, lambda m: None)
    assert not again["committed"] and counts()["rows_live"] == 100  # idempotent
    with root.cursor() as cur:
        cur.execute("DELETE FROM s WHERE id <= 10")
        cur.execute("UPDATE s SET v = 'b' WHERE id = 50")
    snapshot(spark, params, "s", snap_path)  # a new snapshot replaces the finished one
    SilverFromSnapshot("test", "s", snap).apply(spark, silver_path, lambda m: None)
    assert counts() == {"rows_live": 90, "tombstones": 10}
    live = sorted(tuple(r) for r in live_rows(spark.read.format("delta").load(silver_path)).select("id", "v").collect())
    assert live == source_rows(root, "SELECT id, v FROM s")


def test_missing_table_no_primary_key_and_excluded_key_are_clear(root, params):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE nopk (a INT, b INT)")
        cur.execute("CREATE TABLE geo (id INT PRIMARY KEY, g POINT, v INT)")
    with params.connect() as conn:
        with pytest.raises(TableNotFound, match=r"sources.yaml: .*does not exist.*Fix: correct the name"):
            describe_table(conn, params.database, "nope", "sources.yaml")
        with pytest.raises(NoPrimaryKey, match=r"has no primary key.*Fix: add a primary key"):
            describe_table(conn, params.database, "nopk", "sources.yaml")
        with pytest.raises(NoPrimaryKey, match=r"excludes primary-key column\(s\) id.*tables.columns.geo.exclude"):
            describe_table(conn, params.database, "geo", exclude=frozenset({"id"}))
        # a name the table lacks is ignored (a later DROP COLUMN must not break the table)
        schema = describe_table(conn, params.database, "geo", exclude=frozenset({"g", "gone"}))
        assert schema.column_names == ["id", "v"] and schema.excluded == ("g", "gone")


def test_tables_described_together_each_get_what_describing_them_alone_gives(root, params):
    from ingest.sources.mysql.schema import describe_tables

    with root.cursor() as cur:
        cur.execute("CREATE TABLE Mixed (ID BIGINT PRIMARY KEY, Note TEXT)")  # names differ from mixed's by case only
        cur.execute("CREATE TABLE mixed (k1 INT, k2 VARCHAR(10), v DATE, PRIMARY KEY (k2, k1))")
        cur.execute("CREATE TABLE keyless (a INT)")
    names = ["Mixed", "mixed", "keyless", "absent"]
    with params.connect() as conn:
        together = describe_tables(conn, params.database, names, lambda t: frozenset({"v"} if t == "mixed" else ()))
        assert list(together) == names
        assert together["mixed"].primary_key == ("k2", "k1") and together["mixed"].column_names == ["k1", "k2"]
        assert together["Mixed"].primary_key == ("ID",) and together["Mixed"].column_names == ["ID", "Note"]
        assert isinstance(together["keyless"], NoPrimaryKey) and isinstance(together["absent"], TableNotFound)
        for t in ("Mixed", "mixed"):  # the same schema as describing the table alone
            assert together[t] == describe_table(conn, params.database, t, exclude=frozenset({"v"} if t == "mixed"
                                                                                         else ()))


def test_hostile_table_names_are_quoted(spark, root, params, tmp_path):
    name = "we`ird; DROP TABLE x; -- \u00e9"
    with root.cursor() as cur:
        cur.execute("CREATE TABLE `we``ird; DROP TABLE x; -- \u00e9` (`k``ey` INT PRIMARY KEY, `v al` INT)")
        cur.execute("INSERT INTO `we``ird; DROP TABLE x; -- \u00e9` SELECT seq, seq FROM seq_1_to_2500")
    path = str(tmp_path / "weird")
    snapshot(spark, params, name, path, chunk_size=1000)
    assert spark.read.format("delta").load(path).count() == 2500
    # `v al` is stored under its normalized name (no column mapping), the source name in its metadata
    schema = spark.read.format("delta").load(path).schema
    assert schema[lake_name("v al")].metadata == {SOURCE_NAME: "v al"} and "k`ey" in schema.names
    assert assert_any_reader_opens(spark, path, ["k`ey"]) == 2500


def _alter_after_wave(mariadb, database, wave_line, statement, in_thread=False):
    """A log callback that runs `statement` once the log shows `wave_line` (from a thread: while later
    chunks are being read, blocked by their metadata locks or failing them with error 1412)."""
    import threading

    done = []

    def alter():
        with mariadb.connect(database=database) as conn, conn.cursor() as cur:
            cur.execute(statement)

    def log(message):
        if wave_line in message and not done:
            done.append(message)
            threading.Thread(target=alter).start() if in_thread else alter()

    return log


@pytest.mark.parametrize("statement, in_thread", [
    ("ALTER TABLE m ADD COLUMN extra INT NOT NULL DEFAULT 7", False),
    ("ALTER TABLE m DROP COLUMN note, MODIFY v BIGINT", True),
])
def test_ddl_during_a_snapshot_restarts_it_with_the_new_shape(spark, mariadb, database, root, params, tmp_path,
                                                               statement, in_thread):
    from ingest.adapters.mysql import run_snapshot

    with root.cursor() as cur:
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT, note VARCHAR(20))")
        cur.execute("INSERT INTO m SELECT seq, seq, 'n' FROM seq_1_to_3000")
    path = str(tmp_path / "m")
    # after the second wave of six or seven (a dense key is cut by arithmetic on the row estimate)
    log = _alter_after_wave(mariadb, database, "snapshot m: 2/", statement, in_thread)
    progress = run_snapshot(spark, params, describe(params, "m"), path, source="test", chunk_size=500,
                            parallelism=2, chunks_per_commit=1, log=log)
    assert progress.shape_restarts == 1 and progress.resumed_from_wave is None
    df = spark.read.format("delta").load(path)
    with root.cursor() as cur:
        cur.execute("SELECT * FROM m")
        names = [d[0] for d in cur.description]
        assert df.columns == [*names, "_pos"]  # the new shape only: no column of the old one is left
        assert sorted(tuple(r) for r in df.select(*names).collect()) == sorted(cur.fetchall())
    assert last_commit(path, kind="snapshot").metadata["snapshot_id"] == progress.snapshot_id


def test_a_spark_server_without_the_jdbc_driver_is_named_with_the_fix_and_nothing_is_written(spark, root, params,
                                                                                           tmp_path, monkeypatch):
    """The driver class is one the server cannot load, as on a cluster started without jvm/pom.xml's jars."""
    import ingest.sources.mysql.jdbc as jdbc
    from ingest.lake.connect import MissingJarsError

    monkeypatch.setattr(jdbc, "DRIVER", "org.mariadb.jdbc.NotOnThisServer")
    with root.cursor() as cur:
        cur.execute("CREATE TABLE nodriver (id INT PRIMARY KEY, v VARCHAR(5))")
        cur.execute("INSERT INTO nodriver SELECT seq, 'v' FROM seq_1_to_10")
    path = tmp_path / "nodriver"
    with pytest.raises(MissingJarsError, match=r"no MariaDB JDBC driver \(org\.mariadb\.jdbc\.NotOnThisServer\)"
                                               r".*Fix: .*jvm/pom\.xml"):
        snapshot(spark, params, "nodriver", str(path), chunk_size=5)
    assert not list(path.glob("_delta_log/*.json"))
