"""Sources that go away: retried within bounds, then a clear error; a restart in between is survived."""

import threading
import time

import boto3
import pytest

from ingest.localdev.moto import MotoServer
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
    server = MotoServer(port).start()
    try:
        boto3.client("dynamodb", endpoint_url=server.endpoint_url, region_name="us-east-1",
                     aws_access_key_id="local", aws_secret_access_key="local").list_tables()
        server.stop()
        restarted = threading.Timer(1.0, server.start)
        restarted.start()
        result = call(client(port).list_tables, "ListTables", attempts=8, base_delay=0.3)
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
