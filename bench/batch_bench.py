"""What one change batch costs: its fixed overhead, and how it grows with the number of tables.

batch_overhead: one batch holding 1 change, run as Dagster runs it (the source's batch asset, in this
process, on the warm Spark Connect server), from the run's RUN_START event to the silver commit in the
Delta log. Baseline: python-mysql-replication reading the same range (what the batch must do at least).

table_scaling_<N>: the same 1-change batch on a source of N tables against a source of 1 table, wall
time from the sensor's tick that plans it to the end of its run; median of a few batches each. The
instance keeps its runs and events in SQLite files, Dagster's default storage: creating a run writes a
planned event for each asset it names.

definitions_load_<N>: what every run's process does before its first step, load the code location
(`ingest.defs.definitions` over the source's file, in a new process), for N tables against 1; median of
a few loads. No target.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import yaml

from bench.common import Result
from bench.mysql_bench import DATABASE, PASSWORD

REPEATS = 3


class Source:
    """A source of `tables` over the bench database, its definitions, instance and lake."""

    def __init__(self, work: Path, name: str, port: int, tables: list[str], history: list[str] | None = None,
                 instance=None):
        from dagster import DagsterInstance

        from ingest.config import load_config
        from ingest.defs.sources import build_source_defs
        from ingest.defs.io_managers import DeltaLakeIOManager
        from ingest.defs.resources import SparkResource

        self.name, self.tables, self.lake = name, tables, work / f"{name}-lake"
        path = self.sources = work / f"{name}-sources.yaml"
        path.write_text(yaml.safe_dump({"sources": {name: {
            "kind": "mysql", "host": "127.0.0.1", "port": port, "user": "bench", "password_env": "BENCH_MYSQL_PASSWORD",
            "database": DATABASE, "tables": {"include": tables, **({"history": history} if history else {})}}}}))
        (defs,) = build_source_defs(load_config(path), str(self.lake))
        self.assets, self.sensor = defs.assets, defs.sensor
        spark = SparkResource(spark_config={})
        self.resources = {"spark": spark, "lake": DeltaLakeIOManager(lake_root=str(self.lake), spark=spark)}
        self.instance = instance or DagsterInstance.ephemeral()

    def materialize(self, keys, partition=None):
        from dagster import materialize

        return materialize(self.assets, selection=keys, partition_key=partition, instance=self.instance,
                           resources=self.resources, raise_on_error=True)

    def snapshot(self) -> None:
        from dagster import AssetKey

        self.materialize([AssetKey([self.name, t, "snapshot"]) for t in self.tables])

    def batch(self):
        """The sensor's next batch, run; (partition key, its run's result, wall seconds from the tick)."""
        from dagster import SensorResult, build_sensor_context

        started = time.perf_counter()
        with build_sensor_context(instance=self.instance) as context:
            result = self.sensor(context)
        if not isinstance(result, SensorResult) or not result.run_requests:
            raise RuntimeError(f"source {self.name}: the sensor planned no batch ({result})")
        (request,) = [r for r in result.run_requests if r.partition_key]
        self.instance.add_dynamic_partitions(f"{self.name}_batches", [request.partition_key])
        run = self.materialize(list(request.asset_selection), request.partition_key)
        return request.partition_key, run, time.perf_counter() - started


def create_tables(server, names: list[str]) -> None:
    with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
        for t in names:
            cur.execute(f"DROP TABLE IF EXISTS {t}")
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
            cur.execute(f"INSERT INTO {t} SELECT seq, seq, 'seed' FROM seq_1_to_20")


def touch(server, table: str, n: int) -> None:
    with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE {table} SET v = v + 1, note = %s WHERE id = 1", (f"change {n}",))


def run_start_to_silver(source: Source, run, table: str) -> float:
    """Seconds from the run's RUN_START event to the silver commit of `table` it made."""
    from dagster import DagsterEventType

    from ingest.lake.deltalog import last_commit
    from ingest.lake.tables import table_location

    (started,) = source.instance.get_records_for_run(run.run_id, of_type=DagsterEventType.RUN_START).records
    merged = last_commit(table_location(str(source.lake), source.name, table, "silver"), kind="silver")
    return merged.timestamp.timestamp() - started.event_log_entry.timestamp


def raw_read_seconds(params, batch_key: str) -> float:
    """python-mysql-replication reading the batch's range, decoding its rows."""
    from pymysqlreplication import BinLogStreamReader

    from ingest.sources.mysql.binlog import reader_server_id
    from ingest.sources.mysql.positions import BatchRange

    started = time.perf_counter()
    with params.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        basename = cur.fetchone()[0].rsplit(".", 1)[0]
    batch = BatchRange.from_key(batch_key, basename)
    stream = BinLogStreamReader(
        {"host": params.host, "port": params.port, "user": params.user, "passwd": params.password},
        server_id=reader_server_id(), resume_stream=True, log_file=batch.start.file, log_pos=batch.start.pos,
        blocking=False, is_mariadb=False)
    try:
        for event in stream:
            getattr(event, "rows", None)
            if stream.log_file == batch.end.file and stream.log_pos >= batch.end.pos:
                break
    finally:
        stream.close()
    return time.perf_counter() - started


def batch_bench(server, params, work: Path, tables: int, log) -> list[Result]:
    import os

    from dagster import DagsterInstance

    os.environ["BENCH_MYSQL_PASSWORD"] = PASSWORD
    many = [f"t{i:03d}" for i in range(tables)]
    create_tables(server, [*many, "solo"])
    (work / "dagster_home").mkdir(exist_ok=True)
    instance = DagsterInstance.local_temp(str(work / "dagster_home"))  # SQLite, as bin/demo's instance
    wide, solo = (Source(work, "wide", server.port, many, instance=instance),
                  Source(work, "solo", server.port, ["solo"], instance=instance))
    for source in (wide, solo):
        log(f"{source.name}: snapshot of {len(source.tables)} table(s), then the first batch")
        source.snapshot()
        touch(server, source.tables[0], 0)
        source.batch()  # brings every snapshot into silver

    timings: dict[str, list[float]] = {"wide": [], "solo": []}
    overhead, raw = [], []
    for n in range(1, REPEATS + 1):
        for source in (solo, wide):
            touch(server, source.tables[0], n)
            key, run, seconds = source.batch()
            timings[source.name].append(seconds)
            if source is solo:
                overhead.append(run_start_to_silver(source, run, "solo"))
                raw.append(raw_read_seconds(params, key))
        log(f"batch {n}: 1 table {timings['solo'][-1]:.2f} s, {tables} tables {timings['wide'][-1]:.2f} s, "
            f"run start to silver {overhead[-1]:.2f} s")
    loads = {source.name: [definitions_load_seconds(source) for _ in range(REPEATS)] for source in (wide, solo)}
    log(f"definitions load: {tables} tables {loads['wide']}, 1 table {loads['solo']}")
    return [
        Result("batch_overhead", statistics.median(overhead), "raw_binlog_read_of_the_batch", statistics.median(raw),
               "s", higher_is_better=False, limit=5.0,
               details={"run_start_to_silver_seconds": overhead, "raw_read_seconds": raw}),
        Result(f"table_scaling_{tables}", statistics.median(timings["wide"]), "same_batch_on_1_table_source",
               statistics.median(timings["solo"]), "s", higher_is_better=False, target=1.5,
               details={"seconds": timings}),
        Result(f"definitions_load_{tables}", statistics.median(loads["wide"]), "same_for_1_table",
               statistics.median(loads["solo"]), "s", higher_is_better=False, details={"seconds": loads}),
    ]


def definitions_load_seconds(source: Source) -> float:
    """Seconds a new process takes to import the code location over `source`'s file (imports included)."""
    import os
    import subprocess
    import sys

    code = ("import time; t = time.perf_counter(); import ingest.defs.definitions as d; "
            "d.defs.get_repository_def(); print(time.perf_counter() - t)")
    env = {**os.environ, "INGEST_SOURCES": str(source.sources), "INGEST_LAKE_ROOT": str(source.lake)}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])
