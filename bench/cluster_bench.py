"""`bench/run.py --cluster`: the snapshot, CDC and freshness lines on a Spark standalone cluster started
on this machine (a master and two workers of one core each, executors in JVMs of their own whose Python
has the project from a wheel, the Connect server submitted to the master), against the same work on the
local server (`local[*]`, two cores) in the same run:

- `cluster_snapshot_vs_local`: a MySQL snapshot's rows/s (the project's snapshot, JDBC chunks read by
  the executors), median of alternating rounds;
- `cluster_cdc_vs_local`: change events/s through bronze and silver of the same binlog range, each
  server into its own bronze and silver (large batches decoded on the executors);
- `cluster_freshness_p50` / `_p95`: the freshness line with every run on the cluster (informative).

Same machine and cores, so the ratios show the cluster's overhead (tasks shipped to other JVMs, an
executor's Python workers, the driver apart); target >= 0.7 (issue 47).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from bench.common import Result, alternating_rounds

EXECUTOR_MEMORY = "1536m"
WARM_EVENTS = 100_000
"""Changes of another table each server takes through the batch path before the timed ones (the JIT and
the first executors' Python workers)."""


def cluster_bench(local_spark, server, params, work: Path, lake: Path, rows: int, events: int,
                  freshness_seconds: float, log, snapshot: dict) -> list[Result]:
    from ingest.lake.connect import start_local, stop_local
    from ingest.lake.spark import spark_session
    from ingest.localdev.cluster import StandaloneCluster, worker_python

    from bench import mysql_bench

    python = worker_python(work)
    cluster = StandaloneCluster(work / "cluster", memory_per_worker="2g").start()
    log(f"standalone cluster {cluster.url}: 2 workers of 1 core")
    try:
        state = start_local(work / "cluster-spark", {
            "spark.master": cluster.url, "spark.executor.memory": EXECUTOR_MEMORY, "spark.executor.cores": "1",
            "spark.pyspark.python": str(python)})
        spark = {"local": local_spark, "cluster": spark_session(state.url)}

        # the snapshot: both servers warmed on a small table, then alternating rounds
        table = f"cl_snap_{rows}"
        mysql_bench.load_table(server, table, rows)
        mysql_bench.load_table(server, "cl_warm", mysql_bench.WARM_ROWS)
        for where in spark:
            mysql_bench.our_snapshot(spark[where], params, "cl_warm", str(lake / f"cl_warm_{where}"),
                                     mysql_bench.WARM_ROWS // 4, snapshot["parallelism"], 2)

        def snapshot_on(where: str):
            def run(round_no: int) -> float:
                seconds, got = mysql_bench.our_snapshot(spark[where], params, table,
                                                        str(lake / f"{table}_{where}_{round_no}"), **snapshot)
                assert got == rows, (where, got, rows)
                return seconds

            return run

        runs = alternating_rounds({where: snapshot_on(where) for where in ("local", "cluster")},
                                  lambda said: log(f"snapshot {said}"))
        snap_s = {w: statistics.median(r) for w, r in runs.items()}

        # CDC: one binlog range, read by each server into its own bronze and silver
        warm_start = mysql_bench.empty_snapshotted(local_spark, server, params, lake, "cl_cdc_warm")
        mysql_bench.write_changes(server, "cl_cdc_warm", WARM_EVENTS)
        for where in spark:
            mysql_bench.our_cdc(spark[where], params, "cl_cdc_warm", lake, warm_start, lambda _m: None,
                                names=("cl_cdc_warm_snap", f"cl_cdc_warm_bronze_{where}", f"cl_cdc_warm_silver_{where}"))
        start = mysql_bench.empty_snapshotted(local_spark, server, params, lake, "cl_cdc")
        mix = mysql_bench.write_changes(server, "cl_cdc", events)
        cdc_s = {}
        for where in ("cluster", "local"):
            seconds, changes, batches = mysql_bench.our_cdc(
                spark[where], params, "cl_cdc", lake, start, log,
                names=("cl_cdc_snap", f"cl_cdc_bronze_{where}", f"cl_cdc_silver_{where}"))
            assert changes == events, (where, changes, events)
            live = spark[where].read.format("delta").load(str(lake / f"cl_cdc_silver_{where}")).where("NOT _deleted")
            assert live.count() == mix["insert"] - mix["delete"], where
            cdc_s[where] = seconds
            log(f"cdc {where}: {events:,} changes in {batches} batches, {seconds:.1f} s")

        # freshness with every run (and the sensor's Dagster) on the cluster
        from bench.freshness import freshness_bench

        local_remote = os.environ["INGEST_SPARK_REMOTE"]
        os.environ["INGEST_SPARK_REMOTE"] = state.url
        (work / "cluster-freshness").mkdir(exist_ok=True)
        try:
            fresh = {r.name: r for r in freshness_bench(server, params, work / "cluster-freshness",
                                                        freshness_seconds, log)}
        finally:
            os.environ["INGEST_SPARK_REMOTE"] = local_remote
        spark["cluster"].stop()
    finally:
        stop_local(work / "cluster-spark")
        cluster.stop()

    details = {"workers": 2, "cores_per_worker": 1, "executor_memory": EXECUTOR_MEMORY, "local_master": "local[*]"}
    results = [
        Result("cluster_snapshot_vs_local", rows / snap_s["cluster"], "local_server_snapshot", rows / snap_s["local"],
               "rows/s", target=0.7, details={**details, "rows": rows, **snapshot, "runs_seconds": runs}),
        Result("cluster_cdc_vs_local", events / cdc_s["cluster"], "local_server_cdc", events / cdc_s["local"],
               "row events/s", target=0.7,
               details={**details, "events": events, "mix": mix, "seconds": cdc_s, "warm_up_changes": WARM_EVENTS}),
    ]
    for line in ("freshness_p50", "freshness_p95"):
        if line in fresh:
            r = fresh[line]
            results.append(Result(f"cluster_{line}", r.ours, r.baseline_name, r.baseline, r.unit,
                                  higher_is_better=False, details={**details, **r.details}))
    return results

