"""CDC edge cases: the type contract through the binlog, DDL mid-stream, gaps and bad settings."""

import time

import pytest
from dagster import instance_for_test

from ingest.lake.columns import SOURCE_NAME, lake_name
from ingest.sources.mysql.binlog import read_batch
from ingest.sources.mysql.errors import BinlogGap, BinlogSettingsError
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources
from ingest_tests.integration.test_snapshot_types import GOLDEN_DDL, GOLDEN_ROWS, comparable
from ingest_tests.open_readers import assert_any_reader_opens


def head(conn) -> BinlogPosition:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return BinlogPosition(row[0], int(row[1]))


def test_golden_table_through_the_binlog_equals_the_snapshot(spark, mariadb, database, root, tmp_path):
    from ingest.lake.merge import live_rows
    from ingest_tests.integration.conftest import snapshot

    with root.cursor() as cur:
        cur.execute(GOLDEN_DDL)
    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["golden"]), tmp_path / "lake", instance)
        h.snapshot()  # empty table: every golden row below arrives through the binlog
        h.sync()
        with root.cursor() as cur:
            cur.execute("INSERT INTO golden VALUES " + ",".join(GOLDEN_ROWS))
            # updates through the binlog: SET members out of alphabetical order, spatial, UUID and INET
            cur.execute("UPDATE golden SET s2 = 'Deleted Scenes,Commentaries', s = 'c,b', "
                        "g = ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))', 3857), "
                        "u = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', i6 = '2001:db8::ff00:42:8329', "
                        "i4 = '255.255.255.0' WHERE id = 1")
            cur.execute("UPDATE golden SET s2 = 'Behind the Scenes,Trailers' WHERE id = 3")
        h.sync()
        via_binlog = live_rows(spark.read.format("delta").load(h.silver_path("golden")))
    via_snapshot_path = str(tmp_path / "golden_snapshot")
    snapshot(spark, h_params(mariadb, database), "golden", via_snapshot_path)
    via_snapshot = spark.read.format("delta").load(via_snapshot_path)
    assert via_binlog.count() == 3
    assert dict(via_binlog.drop("_pos").dtypes) == dict(via_snapshot.drop("_pos").dtypes)
    binlog_rows, snapshot_rows = comparable(via_binlog), comparable(via_snapshot)
    assert binlog_rows == snapshot_rows
    assert snapshot_rows[0]["s2"] == ["Commentaries", "Deleted Scenes"] and snapshot_rows[0]["s"] == ["b", "c"]
    assert snapshot_rows[2]["s2"] == ["Trailers", "Behind the Scenes"]
    assert snapshot_rows[0]["g"]["srid"] == 3857 and snapshot_rows[0]["i6"] == "2001:db8::ff00:42:8329"
    # every type of the contract opens in other Delta readers, with the values Spark reads
    for path in (h.silver_path("golden"), via_snapshot_path):
        assert assert_any_reader_opens(spark, path, ["id"]) == 3


def h_params(mariadb, database):
    from ingest.sources.mysql.schema import ConnectionParams

    return ConnectionParams("127.0.0.1", mariadb.port, "ingest", "ingest-test-pw", database)


def test_ddl_mid_stream(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE d (id INT PRIMARY KEY, a INT, b VARCHAR(10), c INT)")
        cur.execute("INSERT INTO d SELECT seq, seq, CONCAT('b', seq), seq FROM seq_1_to_20")
    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["d"]), tmp_path / "lake", instance)
        h.snapshot()
        h.sync()
        with root.cursor() as cur:
            # a name Delta cannot hold without column mapping: stored under its normalized name
            cur.execute("ALTER TABLE d ADD COLUMN e VARCHAR(10) DEFAULT 'e0', ADD COLUMN `n m` INT DEFAULT 5")
            cur.execute("INSERT INTO d (id, a, b, c, e, `n m`) VALUES (21, 21, 'b21', 21, 'e21', 7)")
            cur.execute("UPDATE d SET e = 'e1' WHERE id = 1")
        h.sync()
        with root.cursor() as cur:
            cur.execute("UPDATE d SET c = -1 WHERE id = 2")  # c still exists here
            cur.execute("ALTER TABLE d DROP COLUMN c")
            cur.execute("ALTER TABLE d RENAME COLUMN b TO bb")
            cur.execute("ALTER TABLE d MODIFY COLUMN a BIGINT")
            cur.execute("INSERT INTO d (id, a, bb, e) VALUES (22, 9000000000, 'bb22', 'e22')")
            cur.execute("UPDATE d SET bb = 'renamed' WHERE id = 3")
        h.sync()
        live = {r["id"]: r.asDict() for r in h.spark.read.format("delta").load(h.silver_path("d"))
                .where("NOT _deleted").collect()}
        assert len(live) == 22
        assert live[22]["a"] == 9000000000 and live[22]["bb"] == "bb22" and live[22]["e"] == "e22"
        assert live[3]["bb"] == "renamed" and live[1]["e"] == "e1" and live[21]["e"] == "e21"
        assert live[21][lake_name("n m")] == 7 and live[1][lake_name("n m")] == 5
        silver_schema = h.spark.read.format("delta").load(h.silver_path("d")).schema
        assert silver_schema[lake_name("n m")].metadata == {SOURCE_NAME: "n m"}
        assert dict((f.name, f.dataType.simpleString()) for f in silver_schema.fields)["a"] == "bigint"
        # bronze keeps what the old columns held
        bronze = h.spark.read.format("delta").load(h.silver_path("d").replace("/silver", "/bronze"))
        assert bronze.where("id = 2 AND c = -1").count() == 1  # the dropped column's last value
        renamed = bronze.where("id = 3").select("b", "bb").collect()
        assert [tuple(r) for r in renamed] == [(None, "renamed")]  # the old name kept its older rows
        with root.cursor() as cur:
            cur.execute("TRUNCATE TABLE d")
            cur.execute("INSERT INTO d (id, a, bb, e) VALUES (100, 1, 'after', 'x')")
        h.sync()
        assert h.live("d", ["id", "bb"]) == [(100, "after")]
        # re-running every batch, in reverse order, changes nothing
        for key in reversed(h.batches):
            h.run_batch(key)
        assert h.live("d", ["id", "bb"]) == [(100, "after")]
        # every table of it, after adds, a drop, a rename, a widening and a truncate, opens in other
        # Delta readers with the rows Spark reads
        silver = h.silver_path("d")
        for layer, keys in (("snapshot", ["id"]), ("bronze", ["_pos", "id"]), ("silver", ["id"])):
            assert assert_any_reader_opens(spark, silver.replace("/silver", f"/{layer}"), keys) > 0


def test_purged_binlog_stops_with_the_source_position_and_fix(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE p (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO p VALUES (1)")
    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["p"]), tmp_path / "lake", instance)
        h.snapshot()
        h.sync()
        with root.cursor() as cur:
            cur.execute("INSERT INTO p VALUES (2)")
        key = h.add_batch()  # planned, but not read before the purge
        needed = BatchRange.from_key(key, "mysql-bin").start.file
        with root.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("FLUSH BINARY LOGS")
            current = head(root).file
            # MariaDB skips logs a binlog dump thread still holds; the last reader's may linger a moment
            for _ in range(50):
                cur.execute(f"PURGE BINARY LOGS TO '{current}'")
                cur.execute("SHOW BINARY LOGS")
                if needed not in [r[0] for r in cur.fetchall()]:
                    break
                time.sleep(0.2)
            else:
                pytest.fail(f"{needed} could not be purged")
        result = h.run_batch(key, expect_success=False)
        message = h.failure(result)
        assert "source src" in message and "no longer on the server" in message
        assert BatchRange.from_key(key, "mysql-bin").start.file in message and "Fix: re-snapshot" in message
        assert "p" in message


@pytest.mark.parametrize("setting, value", [("binlog_format", "STATEMENT"), ("binlog_format", "MIXED"),
                                            ("binlog_row_image", "MINIMAL"), ("binlog_row_metadata", "MINIMAL")])
def test_wrong_binlog_settings_are_refused(spark, mariadb, database, root, tmp_path, setting, value):
    with instance_for_test() as instance:
        with root.cursor() as cur:
            cur.execute("CREATE TABLE s (id INT PRIMARY KEY)")
        h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["s"]), tmp_path / "lake", instance)
        with root.cursor() as cur:
            cur.execute(f"SELECT @@{setting}")
            before = cur.fetchone()[0]
            cur.execute(f"SET GLOBAL {setting} = '{value}'")
        try:
            with pytest.raises(BinlogSettingsError, match=rf"{setting}={value}.*Fix: run the server with"):
                h.tick()
        finally:
            with root.cursor() as cur:
                cur.execute(f"SET GLOBAL {setting} = '{before}'")


def test_transaction_spanning_the_requested_end_is_read_whole(mariadb, database, root):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(100))")
        start = head(root)
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t SELECT seq, REPEAT('x', 100) FROM seq_1_to_50")
        cur.execute("INSERT INTO t SELECT seq, 'y' FROM seq_51_to_60")
        cur.execute("COMMIT")
        end = head(root)
        cur.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")
        events = cur.fetchall()
    rows_ends = [e[4] for e in events if "rows" in e[2].lower() and e[4] < end.pos]
    middle = BinlogPosition(start.file, rows_ends[0])  # inside the transaction
    result = read_batch(h_params(mariadb, database), BatchRange(start, middle), {"t": ["id"]})
    assert len(result.records["t"]) == 60 and result.end == end


def test_reset_master_is_a_gap_not_a_skip(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE r (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO r SELECT seq FROM seq_1_to_10")
        cur.execute("FLUSH BINARY LOGS")  # so the last batch ends past where RESET MASTER restarts
        cur.execute("INSERT INTO r VALUES (11)")
    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["r"]), tmp_path / "lake", instance)
        h.snapshot()
        h.sync()
        with root.cursor() as cur:
            cur.execute("RESET MASTER")
        with pytest.raises(BinlogGap, match="RESET MASTER.*Fix: re-snapshot"):
            h.tick()


def test_create_and_drop_of_included_tables(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE keep (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE gone (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO keep SELECT seq FROM seq_1_to_5")
        cur.execute("INSERT INTO gone SELECT seq, seq FROM seq_1_to_5")
    sources = write_sources(tmp_path, mariadb.port, database, ["keep", "gone", "later"])
    with instance_for_test() as instance:
        h = CdcHarness(spark, sources, tmp_path / "lake", instance)
        skip = h.tick()  # `later` does not exist: only the others' snapshots are awaited
        assert "keep" in skip.skip_message and "gone" in skip.skip_message and "later" not in skip.skip_message
        h.snapshot(["keep", "gone"])
        h.sync()
        assert h.live("gone", ["id"]) == [(i,) for i in range(1, 6)]
        with root.cursor() as cur:
            cur.execute("DROP TABLE gone")
            cur.execute("CREATE TABLE later (id INT PRIMARY KEY, v VARCHAR(5))")
            cur.execute("INSERT INTO later VALUES (1, 'a'), (2, 'b')")
        h.sync()  # the sensor snapshots `later` and runs the batch holding the DROP
        assert h.live("gone", ["id"]) == []
        with root.cursor() as cur:
            cur.execute("UPDATE later SET v = 'z' WHERE id = 1")
            cur.execute("INSERT INTO keep VALUES (6)")
        h.sync()
        assert h.live("later", ["id", "v"]) == [(1, "z"), (2, "b")]
        assert h.live("keep", ["id"]) == [(i,) for i in range(1, 7)]


def test_changed_server_identity_is_a_gap(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE ident (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO ident VALUES (1)")
    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["ident"]), tmp_path / "lake", instance)
        h.snapshot()
        h.sync()
        with root.cursor() as cur:
            cur.execute("SET GLOBAL server_id = 77")  # as if another server answered at the same address
            cur.execute("INSERT INTO ident VALUES (2)")
        try:
            key = h.add_batch()
            message = h.failure(h.run_batch(key, expect_success=False))
        finally:
            with root.cursor() as cur:
                cur.execute("SET GLOBAL server_id = 1")
        assert "server_id 1 wrote the earlier batches, 77 answers now" in message and "Fix: re-snapshot" in message
        assert h.live("ident", ["id"]) == [(1,)]  # nothing half-applied


def test_a_run_killed_between_the_snapshot_merge_and_its_catch_up_catches_up_when_run_again(
        spark, mariadb, database, root, tmp_path):
    """Silver's first merge of a snapshot is two commits: the snapshot, then bronze changes since its log
    start from batches that ran before it (their silver runs waited). State after a kill between the two:
    the snapshot commit alone. The next batch must still bring the earlier batch's changes."""
    from dagster import AssetKey

    from ingest.lake.silver import SilverFromSnapshot
    from ingest.lake.tables import LakeTable, table_location

    with root.cursor() as cur:
        cur.execute("CREATE TABLE cu (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO cu SELECT seq, 0 FROM seq_1_to_300")
    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["cu"]), tmp_path / "lake", instance)
        h.snapshot()
        with root.cursor() as cur:
            cur.execute("UPDATE cu SET v = 1 WHERE id <= 100")
        first = h.add_batch()
        h.run([AssetKey(["src", "cu", "changes"])], first)  # bronze only: its silver run never happened
        snapshot = LakeTable(spark, table_location(str(tmp_path / "lake"), "src", "cu", "snapshot"))
        SilverFromSnapshot("src", "cu", snapshot).apply(spark, h.silver_path("cu"), lambda m: None)
        with root.cursor() as cur:
            cur.execute("UPDATE cu SET v = 2 WHERE id > 250")
        again = h.add_batch()
        assert again == first  # not complete (not in the batch log): it runs again before any later range
        h.run_batch(again)
        assert h.live("cu", ["id", "v"])[:100] == [(i, 1) for i in range(1, 101)]  # the catch-up happened
        h.sync()  # the later range
        with root.cursor() as cur:
            cur.execute("SELECT id, v FROM cu")
            assert h.live("cu", ["id", "v"]) == sorted(cur.fetchall())


def test_the_compiled_row_reader_gives_the_librarys_values(mariadb, database, root, monkeypatch):
    """rows.py's readers against python-mysql-replication's, on the golden table and on a table of the
    odd cases (negative decimals of every group size, odd fractional seconds, latin1 and long CHARs),
    through inserts, updates and deletes."""
    from ingest.sources.mysql.events import CapturedTable

    with root.cursor() as cur:
        cur.execute(GOLDEN_DDL)
        cur.execute("""CREATE TABLE odd (id INT PRIMARY KEY, a DECIMAL(10,0), b DECIMAL(19,9), c DECIMAL(4,3),
            d DECIMAL(30,20), t1 TIME(1), t5 TIME(5), dt1 DATETIME(1), dt3 DATETIME(3), ts2 TIMESTAMP(2) NULL,
            l1 VARCHAR(10) CHARACTER SET latin1, c300 CHAR(255) CHARACTER SET utf8mb4, bn BINARY(3),
            m MEDIUMINT, e ENUM('a','b') NOT NULL, s SET('x','y') NOT NULL, y YEAR)""")
        start = head(root)
        cur.execute("INSERT INTO golden VALUES " + ",".join(GOLDEN_ROWS))
        cur.execute("UPDATE golden SET s = '', e = 'x', d12 = -0.0001 WHERE id = 1")
        cur.execute("DELETE FROM golden WHERE id = 3")
        cur.execute("""INSERT INTO odd VALUES
            (1, -1234567890, -1234567890.123456789, -1.5, -1234567890.12345678901234567890, '-12:34:56.7',
             '-00:00:00.00001', '2024-01-01 00:00:00.1', '1000-01-01 00:00:00.999', '1970-01-01 00:00:01.01',
             'caf\xe9', REPEAT('\u00fc', 255), 'ab', -8388608, 'b', 'x,y', 1901),
            (2, 0, 0, 0, 0, '00:00:00', '00:00:00', '0000-00-00 00:00:00', NULL, NULL, '', '', '', 8388607, '', '',
             0),
            (3, 9999999999, 9999999999.999999999, 9.999, 9999999999.99999999999999999999, '838:59:59.9',
             '-838:59:59.99999', '9999-12-31 23:59:59.9', '2024-02-29 12:00:00.5', '2038-01-19 03:14:07.99',
             NULL, NULL, NULL, NULL, 'a', 'y', 2155)""")
        cur.execute("UPDATE odd SET a = -a, b = -b, t1 = '00:00:00.1', s = '' WHERE id <> 2")
        cur.execute("DELETE FROM odd WHERE id = 1")
        end = head(root)
    params = h_params(mariadb, database)
    tables = {"golden": CapturedTable(("id",)), "odd": CapturedTable(("id",))}
    library = read_batch(params, BatchRange(start, end), tables, fast_rows=False)
    from ingest.sources.mysql.rows import RowsReader

    read_by_us: list[int] = []
    real_rows = RowsReader.rows
    monkeypatch.setattr(RowsReader, "rows", lambda self, body, update: read_by_us.append(1) or real_rows(self, body, update))
    compiled = read_batch(params, BatchRange(start, end), tables)
    assert len(read_by_us) == 6  # every rows event: 3 statements per table, none left to the library
    for table in tables:
        assert len(library.records[table]) == len(compiled.records[table]) > 3
        for ours, theirs in zip(compiled.records[table], library.records[table]):
            assert ours == theirs, f"{table} at {ours.pos}"
