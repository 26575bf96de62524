"""Sources that go away: retried within bounds, then a clear error; a restart in between is survived."""

import threading
import time

import boto3
import pytest

from ingest.localdev.dynamodb_local import DynamoDBLocal
from ingest.sources.dynamodb.client import ClientSettings, call
from ingest.sources.dynamodb.errors import SourceUnavailable
from ingest_tests.conftest import free_port


def client(port: int):
    return ClientSettings("us-east-1", f"http://127.0.0.1:{port}", "local", "local", max_attempts=1).dynamodb()


def test_an_endpoint_that_stays_down_fails_clearly_after_the_retries():
    port = free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(SourceUnavailable) as exc:
        call(client(port).list_tables, "ListTables", attempts=3, base_delay=0.05)
    assert "still failing after 3 attempts" in str(exc.value) and "Fix:" in str(exc.value)
    assert time.monotonic() - started < 30


def test_a_restart_within_the_retry_window_is_survived():
    port = free_port()
    server = DynamoDBLocal(port).start()
    try:
        boto3.client("dynamodb", endpoint_url=server.endpoint_url, region_name="us-east-1",
                     aws_access_key_id="local", aws_secret_access_key="local").list_tables()
        server.stop()
        restarted = threading.Timer(1.0, server.start)  # listening again some 3 s later (a JVM)
        restarted.start()
        result = call(client(port).list_tables, "ListTables", attempts=10, base_delay=0.3)
        restarted.join()
        assert result["TableNames"] == []
    finally:
        server.stop()


def test_a_mariadb_restart_around_a_batch_is_retried_and_the_batch_completes(spark, tmp_path):
    """The server is down when the batch starts and comes back a few seconds later (a restart)."""
    import os

    from dagster import DagsterInstance

    from ingest.localdev.mariadb import MariaDBServer
    from ingest_tests.integration.cdc_harness import CdcHarness, write_sources

    server = MariaDBServer(tmp_path / "mdb", free_port())
    server.start()
    try:
        server.create_ingest_user("ingest", "fault-pw")
        os.environ["FAULT_TEST_PW"] = "fault-pw"
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE f")
        with server.connect(database="f") as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE f.t (id INT PRIMARY KEY, v INT)")
            cur.execute("INSERT INTO f.t SELECT seq, 0 FROM seq_1_to_500")
        h = CdcHarness(spark, write_sources(tmp_path, server.port, "f", ["t"], password_env="FAULT_TEST_PW"),
                       tmp_path / "lake", DagsterInstance.ephemeral())
        h.snapshot()
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("UPDATE f.t SET v = id WHERE id % 2 = 0")
            cur.execute("DELETE FROM f.t WHERE id % 5 = 0")
        key = h.add_batch()
        server.stop()
        restart = threading.Timer(3.0, server.start)
        restart.start()
        h.run_batch(key)  # connection refused (2003) until the server is back, then the whole range
        restart.join()
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT id, v FROM f.t")
            assert h.live("t", ["id", "v"]) == sorted(cur.fetchall())
    finally:
        server.stop()


@pytest.fixture
def proxy(mariadb):
    from ingest_tests.faultproxy import FaultProxy

    p = FaultProxy(mariadb.port).start()
    yield p
    p.stop()


def test_binlog_connections_dropped_mid_stream_give_every_change_once(root, database, proxy):
    """The binlog dump connection is cut four times in the middle of a batch (error 2013)."""
    from ingest.sources.mysql.binlog import master_position
    from ingest.sources.mysql.cdc import read_change_batch
    from ingest.sources.mysql.positions import BatchRange
    from ingest.sources.mysql.schema import ConnectionParams

    with root.cursor() as cur:
        cur.execute("CREATE TABLE d (id INT PRIMARY KEY, v INT, pad VARCHAR(200))")
        start = master_position(root)
        cur.execute("INSERT INTO d SELECT seq, 0, REPEAT('x', 200) FROM seq_1_to_2000")
        for lo in range(1, 2001, 100):  # 20 transactions of 100 updates, then deletes
            cur.execute("UPDATE d SET v = v + 1 WHERE id BETWEEN %s AND %s", (lo, lo + 99))
        cur.execute("DELETE FROM d WHERE id % 7 = 0")
        end = master_position(root)
    via_proxy = ConnectionParams("127.0.0.1", proxy.port, "ingest", "ingest-test-pw", database)
    proxy.cut(after_bytes=100_000, times=4)  # the range is about 1.4 MB; only the binlog stream is that big
    records = read_change_batch(via_proxy, "src", BatchRange(start, end).key, {"d": ["id"]}).tables["d"].records
    assert proxy.cuts == 4
    assert len(records) == len({r.pos for r in records}) == 2000 + 2000 + 285  # each change once
    state = {}
    for r in sorted(records, key=lambda r: r.pos):
        if r.op.value == "delete":
            del state[r.row["id"]]
        else:
            state[r.row["id"]] = (r.row["id"], r.row["v"], r.row["pad"])
    with root.cursor() as cur:
        cur.execute("SELECT id, v, pad FROM d")
        assert sorted(state.values()) == sorted(cur.fetchall())


def test_snapshot_chunk_connections_dropped_are_retried_by_wave(spark, root, database, proxy, tmp_path):
    from ingest.lake.deltalog import commits
    from ingest.sources.mysql.schema import ConnectionParams
    from ingest_tests.integration.conftest import snapshot

    with root.cursor() as cur:
        cur.execute("CREATE TABLE c (id INT PRIMARY KEY, pad VARCHAR(200))")
        cur.execute("INSERT INTO c SELECT seq, REPEAT('y', 200) FROM seq_1_to_6000")
    via_proxy = ConnectionParams("127.0.0.1", proxy.port, "ingest", "ingest-test-pw", database)
    path = str(tmp_path / "c")
    proxy.cut(after_bytes=50_000, times=2)  # a chunk of 1000 rows is about 210 kB
    progress = snapshot(spark, via_proxy, "c", path, chunks_per_commit=2)
    assert proxy.cuts == 2 and progress.waves_committed == [0, 1, 2]
    assert [c.metadata["wave"] for c in commits(path)] == [2, 1, 0]  # one commit per wave
    df = spark.read.format("delta").load(path)
    assert df.count() == df.select("id").distinct().count() == 6000


def test_snapshot_wave_that_keeps_losing_its_connection_fails_naming_it(spark, root, database, proxy, tmp_path):
    from ingest.sources.mysql.errors import SourceUnreachable
    from ingest.sources.mysql.schema import ConnectionParams
    from ingest_tests.integration.conftest import snapshot

    with root.cursor() as cur:
        cur.execute("CREATE TABLE e (id INT PRIMARY KEY, pad VARCHAR(200))")
        cur.execute("INSERT INTO e SELECT seq, REPEAT('z', 200) FROM seq_1_to_3000")
    via_proxy = ConnectionParams("127.0.0.1", proxy.port, "ingest", "ingest-test-pw", database)
    proxy.cut(after_bytes=50_000, times=100)
    with pytest.raises(SourceUnreachable, match=r"snapshot wave 0 of e lost its connection .* 4 times \(error 2013\)"):
        snapshot(spark, via_proxy, "e", str(tmp_path / "e"))


def test_dynamodb_local_on_a_taken_port_says_so_and_the_fix():
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = DynamoDBLocal(port)
        try:
            with pytest.raises(RuntimeError, match=rf"DynamoDBLocal: port {port} on 127.0.0.1 is taken\. Fix:"):
                server.start(timeout=60)
        finally:
            server.stop()
