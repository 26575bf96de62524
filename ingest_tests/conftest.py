"""Shared fixtures. Tiers: unit/ (no services), spark/ (one shared SparkSession),
integration/ (a real MariaDB started here, stopped by PID at the end)."""

from __future__ import annotations

import os
import socket

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def spark():
    from ingest.lake.spark import build_spark_session

    session = build_spark_session("local[2]", "ingest-tests", {"spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    """A throwaway MariaDB with the CDC binlog settings and a least-privilege ingest user."""
    from ingest.localdev.mariadb import MariaDBServer

    # A short path: the server's unix socket path must stay under 108 bytes.
    server = MariaDBServer(tmp_path_factory.mktemp("mdb"), free_port())
    server.start()
    server.create_ingest_user("ingest", "ingest-test-pw")
    os.environ["INGEST_TEST_MYSQL_PASSWORD"] = "ingest-test-pw"
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto():
    """A moto server over HTTP (DynamoDB, Streams, S3), stopped by PID at the end."""
    from ingest.localdev.moto import LOCAL_CREDENTIALS, MotoServer

    for key, value in LOCAL_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    server = MotoServer(free_port()).start()
    yield server
    server.stop()
