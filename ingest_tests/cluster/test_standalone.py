"""The cluster tier (issue 47): a Spark standalone cluster started here from pyspark's jars, a master and
two workers in JVMs of their own, and a Spark Connect server submitted to it. Delta writes and the
project's Python code run in executors that are other processes than the Connect server, their Python a
virtualenv with the project installed from a wheel built from this tree, as on a cluster's hosts."""

import os
import tempfile
from pathlib import Path

import pytest

from ingest.sources.mysql.schema import ConnectionParams

pytestmark = pytest.mark.cluster


def mysql_table(mariadb, database: str, rows: int) -> ConnectionParams:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {database}")
    with mariadb.connect(database=database) as conn, conn.cursor() as cur:  # seq_1_to_N: in a database
        cur.execute("CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT IGNORE INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_{rows}")
    return ConnectionParams("127.0.0.1", mariadb.port, "ingest", "ingest-test-pw", database)


def python_reader_snapshot(spark, params: ConnectionParams, path: str):
    """A MySQL snapshot whose chunks the project's Python data source reads (not Spark's JDBC reader)."""
    import ingest.sources.mysql.jdbc as jdbc
    from ingest_tests.integration.conftest import snapshot

    with pytest.MonkeyPatch.context() as m:
        m.setattr(jdbc, "jdbc_columns", lambda columns, table="?": None)
        return snapshot(spark, params, "t", path)


def test_a_connect_server_on_a_standalone_cluster_writes_delta_from_executors_in_other_jvms(mariadb, tmp_path):
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ingest.lake import connect
    from ingest.localdev.cluster import StandaloneCluster, worker_python
    from ingest.localdev.processes import alive

    folder = Path(tempfile.mkdtemp(prefix="ingest-cluster-test-"))
    python = worker_python(tmp_path)
    cluster = StandaloneCluster(folder / "cluster").start()
    started = [p.pid for p in cluster.processes]
    executors = set()
    state = None
    try:
        state = connect.start_local(folder / "spark", {"spark.master": cluster.url, "spark.executor.memory": "768m",
                                                       "spark.executor.cores": "1", "spark.pyspark.python": str(python)})
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
        path = str(folder / "lake" / "t")
        spark.range(0, 100_000, numPartitions=4).selectExpr("id", "id % 7 AS k").write.format("delta").save(path)
        assert spark.read.format("delta").load(path).where("k = 3").count() == len(range(3, 100_000, 7))

        @F.udf("string")
        def python_worker(_):
            import ingest

            return f"{os.getpid()}:{os.getppid()}:{ingest.__file__}"

        rows = spark.range(0, 8, numPartitions=4).select(python_worker("id")).collect()
        executors = {int(r[0].split(":")[1]) for r in rows}
        # each Python worker's parent is the executor JVM that ran its task: not the Connect server
        assert state.pid not in executors and executors
        # and the project it imports is the wheel's, in the workers' virtualenv
        (imported,) = {r[0].split(":")[2] for r in rows}
        assert imported.startswith(str(python.parent.parent) + "/lib/") and imported.endswith(
            "/site-packages/ingest/__init__.py")

        # the project's own Python data source, read on those executors: a MySQL snapshot's chunks
        progress = python_reader_snapshot(spark, mysql_table(mariadb, "cluster_t", 2500), str(folder / "lake" / "m"))
        landed = spark.read.format("delta").load(str(folder / "lake" / "m"))
        assert progress.chunks_total >= 2 and landed.count() == 2500
        assert landed.where("v = concat('v', id)").count() == 2500
        spark.stop()
    finally:
        connect.stop_local(folder / "spark")
        cluster.stop()
    # the master, the workers and the executors they launched, all gone
    assert [pid for pid in (*started, *executors, state.pid) if alive(pid)] == []


def test_workers_without_the_project_give_an_error_that_names_it_and_the_fix(mariadb, tmp_path):
    """A worker host whose Python lacks the project: the snapshot fails naming spark.pyspark.python and
    the wheel, and writes nothing."""
    from pyspark.sql import SparkSession

    from ingest.lake import connect
    from ingest.lake.datasource import ProjectMissingOnWorkers
    from ingest.localdev.cluster import worker_python

    bare = worker_python(tmp_path, with_project=False)
    folder = Path(tempfile.mkdtemp(prefix="ingest-bare-worker-test-"))
    params = mysql_table(mariadb, "bare_t", 2)
    try:
        state = connect.start_local(folder / "spark", {"spark.pyspark.python": str(bare)})
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
        with pytest.raises(ProjectMissingOnWorkers) as failed:
            python_reader_snapshot(spark, params, str(folder / "lake" / "t"))
        assert "spark.pyspark.python" in str(failed.value) and "wheel" in str(failed.value)
        assert not (folder / "lake" / "t" / "_delta_log").exists()
        spark.stop()
    finally:
        connect.stop_local(folder / "spark")
