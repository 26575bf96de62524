"""The cluster tier's base (issue 47): a Spark standalone cluster started here from pyspark's jars, a
master and two workers in JVMs of their own, and a Spark Connect server submitted to it. Delta writes
and the project's Python code run in executors that are other processes than the Connect server."""

import os
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


def test_a_connect_server_on_a_standalone_cluster_writes_delta_from_executors_in_other_jvms():
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ingest.lake import connect
    from ingest.localdev.cluster import StandaloneCluster
    from ingest.localdev.processes import alive

    folder = Path(tempfile.mkdtemp(prefix="ingest-cluster-test-"))
    cluster = StandaloneCluster(folder / "cluster").start()
    started = [p.pid for p in cluster.processes]
    executors = set()
    state = None
    try:
        state = connect.start_local(folder / "spark", {"spark.master": cluster.url, "spark.executor.memory": "768m",
                                                       "spark.executor.cores": "1"})
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
        path = str(folder / "lake" / "t")
        spark.range(0, 100_000, numPartitions=4).selectExpr("id", "id % 7 AS k").write.format("delta").save(path)
        assert spark.read.format("delta").load(path).where("k = 3").count() == len(range(3, 100_000, 7))

        @F.udf("string")
        def python_worker(_):
            return f"{os.getpid()}:{os.getppid()}"

        rows = spark.range(0, 8, numPartitions=4).select(python_worker("id")).collect()
        executors = {int(r[0].split(":")[1]) for r in rows}
        # each Python worker's parent is the executor JVM that ran its task: not the Connect server
        assert state.pid not in executors and executors
        spark.stop()
    finally:
        connect.stop_local(folder / "spark")
        cluster.stop()
    # the master, the workers and the executors they launched, all gone
    assert [pid for pid in (*started, *executors, state.pid) if alive(pid)] == []
