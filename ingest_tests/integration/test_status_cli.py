"""`ingest status` against a synced table: what the Delta log and the source say."""

from dagster import DagsterInstance

from ingest.cli import main
from ingest.lake.deltalog import last_commit
from ingest.lake.tables import table_location
from ingest.sources.mysql.positions import BinlogPosition
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def test_status_shows_the_committed_position_changes_waiting_and_headroom(spark, root, database, mariadb,
                                                                          tmp_path, capsys):
    """A table is behind only when the binlog past the lake's position changes it: `st2`, which no batch
    changed, is in the lake through the batch log's end and waits for nothing while the head moves."""
    with root.cursor() as cur:
        cur.execute("CREATE TABLE st (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO st SELECT seq, 0 FROM seq_1_to_50")
        cur.execute("CREATE TABLE st2 (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO st2 VALUES (1)")
    sources = write_sources(tmp_path, mariadb.port, database, ["st", "st2"])
    lake = tmp_path / "lake"
    h = CdcHarness(spark, sources, lake, DagsterInstance.ephemeral())
    h.snapshot()
    with root.cursor() as cur:
        cur.execute("UPDATE st SET v = 1")
    batch = h.sync()
    end = BinlogPosition.from_metadata(
        last_commit(table_location(str(lake), "src", "st", "bronze"), kind="bronze").metadata["end"])
    with root.cursor() as cur:
        cur.execute("UPDATE st SET v = 2 WHERE id = 1")  # not synced: the head moves past the committed end
        cur.execute("SHOW MASTER STATUS")
        head = BinlogPosition(*cur.fetchone()[:2])
        cur.execute("SHOW BINARY LOGS")  # the session's server: earlier tests may have rotated it
        oldest = BinlogPosition(cur.fetchone()[0], 4)

    assert main(["--sources", str(sources), "--lake", str(lake), "status", "--source", "src"]) == 0
    header, row, row2 = capsys.readouterr().out.splitlines()
    assert header.split("  ")[0:2] == ["source", "table"] and "changes waiting" in header
    assert row.startswith("src     st ") and " complete (" in row
    assert f"{batch} (" in row and f"{end.file}:{end.pos}" in row
    assert f"yes: {head.pos - end.pos:,} bytes of binlog not read yet" in row
    # no batch changed st2: it is current through the batch log's end, and the change to st is not its
    assert row2.startswith("src     st2 ") and f"{end.file}:{end.pos}" in row2 and "  none  " in row2
    # the files the server still holds before the committed end's, and a server that never expires
    # binlogs: no alarm
    assert f"{end.seq - oldest.seq} older binlog file(s); the server purges none by itself" in row
