"""`ingest status` against a synced table: what the Delta log and the source say."""

from dagster import DagsterInstance

from ingest.cli import main
from ingest.lake.deltalog import last_commit
from ingest.lake.tables import table_location
from ingest.sources.mysql.positions import BinlogPosition
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def test_status_shows_the_committed_position_lag_and_headroom_from_the_delta_log(spark, root, database, mariadb,
                                                                                 tmp_path, capsys):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE st (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO st SELECT seq, 0 FROM seq_1_to_50")
    sources = write_sources(tmp_path, mariadb.port, database, ["st"])
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
    header, row = capsys.readouterr().out.splitlines()
    assert header.split("  ")[0:2] == ["source", "table"]
    assert row.startswith("src     st ") and " complete (" in row
    assert f"{batch} (" in row and f"{end.file}:{end.pos}" in row
    # the files the server still holds before the committed end's, and a server that never expires
    # binlogs: no alarm
    assert f"{head.pos - end.pos} bytes" in row and f"no expiry set ({end.seq - oldest.seq} file(s) before)" in row
