"""Runs for months: many small change batches in a row, with maintenance on.

soak_<N>_batches: N batches (500 quick, 5,000 full) of a few row changes each on a 1-table source.
Each is the sensor's tick (planning from the batch log in the lake, looking up runs in the instance)
and the batch run it asks for (bronze, silver, history, batch log), run in this process against the
warm Spark Connect server and a Dagster instance on disk, as the daemon's runs use them; the
daemon's spawned process adds the same ~2 s to every run, first or last, so it is left out. Every
`maintain_every` batches the maintenance job's step runs on each of the source's tables (retention
properties, OPTIMIZE, VACUUM), as its schedule would; VACUUM keeps 0 h here (nothing else reads).

ours: median wall time of a batch (tick and run) among the last 10 %; baseline: the same among the
first 10 %. Target: ratio <= 1.2. Details: the files of each table and its `_delta_log` at the end.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench.common import Result

TABLE = "soak"


def log_size(path: str) -> tuple[int, int]:
    """(files, bytes) of a local Delta table's `_delta_log`."""
    files = [p for p in Path(path, "_delta_log").rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def soak_bench(server, params, work: Path, batches: int, log, maintain_every: int = 100) -> list[Result]:
    import os

    from dagster import AssetKey, DagsterInstance

    from bench.batch_bench import Source, create_tables
    from bench.mysql_bench import DATABASE, PASSWORD
    from ingest.lake.maintenance import Retention, maintain
    from ingest.lake.tables import location_for_asset_key

    os.environ["BENCH_MYSQL_PASSWORD"] = PASSWORD
    create_tables(server, [TABLE])
    home = work / "soak-dagster"
    home.mkdir(parents=True, exist_ok=True)
    source = Source(work, "soak", server.port, [TABLE], history=[TABLE], instance=DagsterInstance.local_temp(str(home)))
    source.snapshot()
    tables = sorted({location_for_asset_key(str(source.lake), key.path) for a in source.assets for key in a.keys
                     if key != AssetKey(["soak", TABLE, "snapshot"])})
    spark = source.resources["spark"].spark_session
    seconds: list[float] = []
    started = time.perf_counter()
    with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
        for n in range(batches):
            # a few changes: an update, an insert, now and then a delete
            cur.execute(f"UPDATE {TABLE} SET v = v + 1, note = %s WHERE id = %s", (f"change {n}", 1 + n % 20))
            cur.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, 'soak')", (1000 + n, n))
            if n % 5 == 4:
                cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (1000 + n - 2,))
            conn.commit()
            tick = time.perf_counter()
            source.batch()
            seconds.append(time.perf_counter() - tick)
            if (n + 1) % maintain_every == 0:
                for path in tables:
                    maintain(spark, path, Retention(txn_days=7, vacuum_hours=0), lambda _: None)
            if (n + 1) % max(1, batches // 10) == 0:
                log(f"soak: {n + 1}/{batches} batches, last {seconds[-1]:.2f} s, "
                    f"{time.perf_counter() - started:.0f} s so far")
    tenth = max(1, batches // 10)
    first, last = seconds[:tenth], seconds[-tenth:]
    end = {}
    for path in tables:
        files = int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").select("numFiles").first()[0])
        log_files, log_bytes = log_size(path)
        end[path.rsplit("/", 1)[-1]] = {
            "data_files": files, "delta_log_files": log_files, "delta_log_bytes": log_bytes}
    return [Result(f"soak_{batches}_batches", statistics.median(last), "first_10_percent_of_the_batches",
                   statistics.median(first), "s", higher_is_better=False, target=1.2,
                   details={"mean_last": statistics.mean(last), "mean_first": statistics.mean(first),
                            "maintain_every": maintain_every, "tables_at_end": end,
                            "total_seconds": round(time.perf_counter() - started, 1)})]
