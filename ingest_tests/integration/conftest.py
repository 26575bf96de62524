from __future__ import annotations

import itertools

import pytest

from ingest.sources.mysql.schema import ConnectionParams, describe_table

_db_counter = itertools.count()


@pytest.fixture
def database(mariadb):
    """A fresh database per test, so tests never see each other's tables."""
    name = f"t{next(_db_counter)}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
    return name


@pytest.fixture
def root(mariadb, database):
    """A root connection with the test database selected and a permissive sql_mode (zero dates)."""
    conn = mariadb.connect(database=database)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
    yield conn
    conn.close()


@pytest.fixture
def params(mariadb, database) -> ConnectionParams:
    return ConnectionParams("127.0.0.1", mariadb.port, "ingest", "ingest-test-pw", database)


def describe(params: ConnectionParams, table: str):
    with params.connect() as conn:
        return describe_table(conn, params.database, table)


def snapshot(spark, params, table, path, **kw):
    from ingest.adapters.mysql import run_snapshot

    settings = {"chunk_size": 1000, "parallelism": 2, "chunks_per_commit": 4, **kw}
    return run_snapshot(spark, params, describe(params, table), path, source="test", log=lambda m: None,
                        **settings)
