"""Freshness: seconds from a commit in MariaDB to the row being live in silver, with the Dagster
daemon and the binlog sensor running under a steady write load.

A writer commits one marker row every `every` seconds and notes, right after the commit, the time
and the binlog head (at or past the marker's end). A marker is live in silver from the first silver
commit whose batch end is at or past that position; the Delta commit's own timestamp says when.
Reading the Delta log (not the table) keeps the measuring out of the two cores the runs need.

Baseline: a bare binlog tail (python-mysql-replication, blocking) in the same run: how soon the
marker's row event can be seen at all.

Each marker's transaction also inserts a row into a second table, so a batch (about 5 s of writes)
changes about ten rows in two tables. `batch_cpu_seconds` is the CPU of every process of the
deployment (Spark Connect server, daemon, code server, run workers) over the measured window, per
batch logged in it, against the CPU of reading and decoding the same batches' binlog ranges bare.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import PROJECT_ROOT, Dagster, Result  # noqa: E402
from bench.mysql_bench import DATABASE, PASSWORD  # noqa: E402

TABLE = "fresh"
LINES = "fresh_lines"
DAGSTER = str(Path(sys.executable).with_name("dagster"))


def silver_commits(path: Path) -> list[tuple[float, dict]]:
    """(commit time in epoch seconds, metadata) of each silver batch merge in the Delta log."""
    from ingest.lake.commits import decode_user_metadata

    out = []
    log_dir = path / "_delta_log"
    if not log_dir.exists():
        return out
    for f in sorted(log_dir.glob("*.json")):
        for line in f.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if not info:
                continue
            meta = decode_user_metadata(info.get("userMetadata"))
            if meta and meta.get("kind") == "silver" and meta.get("end"):
                out.append((info["timestamp"] / 1000, meta))
    return out


def visible_at(commits: list[tuple[float, dict]], position) -> float | None:
    from ingest.sources.mysql.positions import BinlogPosition

    times = [t for t, meta in commits if BinlogPosition.from_metadata(meta["end"]) >= position]
    return min(times) if times else None


def tail_binlog(params, start, stop: threading.Event, seen: dict[int, float]) -> None:
    """Note when each marker's insert arrives on a bare blocking binlog stream."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import WriteRowsEvent

    from ingest.sources.mysql.binlog import reader_server_id

    stream = BinLogStreamReader(
        {"host": params.host, "port": params.port, "user": params.user, "passwd": params.password},
        server_id=reader_server_id(), resume_stream=True, log_file=start.file, log_pos=start.pos,
        blocking=True, is_mariadb=False, only_events=[WriteRowsEvent], only_tables=[TABLE])
    try:
        for event in stream:
            now = time.time()
            for row in event.rows:
                seen.setdefault(row["values"]["id"], now)
            if stop.is_set():
                break
    except Exception:  # noqa: BLE001 - the server stops under the tail at the end of the run
        if not stop.is_set():
            raise
    finally:
        stream.close()


def run_phases(home: Path) -> dict[str, float]:
    """Where the seconds of the sensor's batch runs went, from the Dagster event log: the gap since the
    previous batch run ended, then launch (created to RUN_START: a new process, imports, definitions),
    to STEP_START, the step, and to RUN_SUCCESS; medians over the runs after the first."""
    from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

    os.environ["DAGSTER_HOME"] = str(home)
    phases: dict[str, list[float]] = {}
    try:
        with DagsterInstance.get() as instance:
            records = sorted(instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS],
                                                                 tags={"ingest/source": "bench"})),
                             key=lambda r: r.create_timestamp)
            ended = None
            for record in records:
                run_id = record.dagster_run.run_id
                at = {t: min((e.timestamp for e in instance.get_records_for_run(run_id, of_type=t).records),
                             default=None)
                      for t in (DagsterEventType.RUN_START, DagsterEventType.STEP_START,
                                DagsterEventType.STEP_SUCCESS, DagsterEventType.RUN_SUCCESS)}
                if None in at.values():
                    continue
                created = record.create_timestamp.timestamp()
                if ended is not None:
                    for name, value in (("since_previous_run", created - ended),
                                        ("launch", at[DagsterEventType.RUN_START] - created),
                                        ("to_step_start", at[DagsterEventType.STEP_START] - at[DagsterEventType.RUN_START]),
                                        ("step", at[DagsterEventType.STEP_SUCCESS] - at[DagsterEventType.STEP_START]),
                                        ("to_run_success", at[DagsterEventType.RUN_SUCCESS] - at[DagsterEventType.STEP_SUCCESS])):
                        phases.setdefault(name, []).append(value)
                ended = at[DagsterEventType.RUN_SUCCESS]
            if os.environ.get("BENCH_TIMELINE") and len(records) > 3:  # one run's events, for a closer look
                run_id = records[len(records) // 2].dagster_run.run_id
                events = instance.all_logs(run_id)
                for e in events:
                    what = e.dagster_event.event_type_value if e.dagster_event else e.user_message[:90]
                    print(f"  {e.timestamp - events[0].timestamp:7.3f} {what}", file=sys.stderr)
    finally:
        os.environ.pop("DAGSTER_HOME", None)
    return {name: round(statistics.median(values), 2) for name, values in phases.items()}


def freshness_bench(server, params, work: Path, seconds: float, log, every: float = 1.0,
                    poll_seconds: int = 1, warmup: float = 60.0) -> list[Result]:
    import yaml

    from ingest.sources.mysql.binlog import master_position

    with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, note VARCHAR(40), written_at DATETIME(6))")
        cur.execute(f"INSERT INTO {TABLE} SELECT seq, 'seed', NOW(6) FROM seq_1_to_1000")
        cur.execute(f"DROP TABLE IF EXISTS {LINES}")
        cur.execute(f"CREATE TABLE {LINES} (id INT PRIMARY KEY, marker INT, qty INT)")
    sources = work / "fresh-sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"bench": {
        "kind": "mysql", "host": "127.0.0.1", "port": server.port, "user": "bench", "password_env": "BENCH_MYSQL_PASSWORD",
        "database": DATABASE, "tables": {"include": [TABLE, LINES]},
        "snapshot": {"chunk_size": 50_000, "parallelism": 2, "chunks_per_commit": 8},
        "cdc": {"min_interval_seconds": poll_seconds}}}}))
    home = work / "dagster_home"
    home.mkdir(exist_ok=True)
    # the instance config a deployment starts from: direct run launches, threaded sensors
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "deploy" / "dagster.yaml").read_text())
    lake = work / "fresh-lake"
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_SOURCES": str(sources), "INGEST_LAKE_ROOT": str(lake),
           "BENCH_MYSQL_PASSWORD": PASSWORD}
    snap = subprocess.run([DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions", "--select",
                           f"bench/{TABLE}/snapshot,bench/{LINES}/snapshot"], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True)
    if snap.returncode != 0:
        raise RuntimeError(f"snapshot for the freshness benchmark failed: {snap.stderr[-2000:]}")
    from ingest.lake.tables import table_location

    from bench.cpu import by_role, difference
    from ingest.lake.connect import read_state

    silver = Path(table_location(str(lake), "bench", TABLE, "silver"))
    spark_state = read_state(work / "spark")  # bench/run.py's server
    spark_pid = spark_state.pid if spark_state else -1
    dagster = Dagster(env, work)
    stop = threading.Event()
    seen: dict[int, float] = {}
    tail = None
    try:
        # The first batch merges the snapshot into silver: start measuring once that is done.
        with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {TABLE} VALUES (0, 'first batch', NOW(6))")
        deadline = time.monotonic() + 180
        while not silver_commits(silver):
            if time.monotonic() > deadline or dagster.ended():
                raise RuntimeError(f"silver never appeared; Dagster's logs: {dagster.log_tail()}")
            time.sleep(0.5)
        log("silver is live; writing markers")
        with params.connect() as conn:
            start = master_position(conn)
        tail = threading.Thread(target=tail_binlog, args=(params, start, stop, seen), daemon=True)
        tail.start()
        markers: list[tuple[int, float, object, bool]] = []
        # The first `warmup` seconds of markers are written and checked but not measured: a deployment's
        # Spark server is long-lived, and its JIT compiles the merge's code over its first batches (a
        # cold server's merge takes about twice as long).
        with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
            marker_id, measure_from = 1_000_000, time.monotonic() + warmup
            until = measure_from + seconds
            cpu_before = None
            while time.monotonic() < until:
                measured = time.monotonic() >= measure_from
                if measured and cpu_before is None:
                    cpu_before, window_start = by_role([*dagster.pids, spark_pid]), time.time()
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO {LINES} VALUES (%s, %s, 1)", (marker_id, marker_id))
                cur.execute(f"INSERT INTO {TABLE} VALUES (%s, 'marker', NOW(6))", (marker_id,))
                cur.execute("COMMIT")
                committed = time.time()
                cur.execute("SHOW MASTER STATUS")
                file, pos = cur.fetchone()[:2]
                from ingest.sources.mysql.positions import BinlogPosition

                markers.append((marker_id, committed, BinlogPosition(file, pos), measured))
                marker_id += 1
                time.sleep(every)
        cpu_after, window_end = by_role([*dagster.pids, spark_pid]), time.time()
        log(f"{len(markers)} markers written; waiting for the last to be live in silver")
        deadline = time.monotonic() + 300
        while visible_at(silver_commits(silver), markers[-1][2]) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the last marker never reached silver; Dagster's logs: {dagster.log_tail()}")
            time.sleep(1)
    finally:
        stop.set()
        if tail is not None:
            # Closing a blocking binlog stream from another thread hangs; one more row wakes the tail,
            # which then sees `stop` and closes its own stream.
            with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
                cur.execute(f"INSERT INTO {TABLE} VALUES (-1, 'stop the tail', NOW(6))")
            tail.join(30)
        dagster.stop()
    commits = silver_commits(silver)
    ours = [visible_at(commits, pos) - committed for _, committed, pos, measured in markers if measured]
    raw = [seen[i] - committed for i, committed, _, measured in markers if measured and i in seen]
    # The markers are in silver, not just claimed by the commit metadata.
    from ingest.lake.spark import spark_session

    spark = spark_session()
    ids = {r[0] for r in spark.read.format("delta").load(str(silver)).where("NOT _deleted AND id >= 1000000")
           .select("id").collect()}
    missing = [i for i, *_ in markers if i not in ids]
    assert not missing, f"markers missing from silver: {missing[:10]}"

    def pct(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]

    # CPU per batch: the batches logged within the measured window
    from ingest.lake.batchlog import logged_batches
    from ingest.lake.tables import source_batch_log_location

    windowed = [b for b in logged_batches(source_batch_log_location(str(lake), "bench"))
                if b.logged_at is not None and window_start <= b.logged_at.timestamp() <= window_end]
    spent = difference(cpu_before, cpu_after)
    per_batch = {role: round(v / max(len(windowed), 1), 3) for role, v in spent.items()}
    bare = bare_read_cpu(params, windowed) / max(len(windowed), 1)
    log(f"CPU per batch ({len(windowed)} batches, {sum(b.tables.get(LINES, 0) + b.tables.get(TABLE, 0) for b in windowed) / max(len(windowed), 1):.1f} "
        f"changed rows each): " + ", ".join(f"{k} {v:.2f} s" for k, v in per_batch.items()))
    phases = run_phases(home)
    shown = ui_lags(home, ["bench", TABLE], window_start, window_end)
    log(f"silver's lag_seconds as the UI plots it, median of {len(shown)} batches: "
        f"{statistics.median(shown) if shown else float('nan'):.1f} s (markers timed: {statistics.median(ours):.1f} s)")
    log("batch runs, median seconds per phase: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    details = {"samples": len(ours), "write_every_seconds": every, "sensor_min_interval_seconds": poll_seconds,
               "warmup_seconds": warmup,
               "ours_seconds": [round(v, 2) for v in ours], "batches": len(commits),
               "raw_tail_samples": len(raw), "run_phases_median_seconds": phases,
               "ui_lag_seconds_p50": round(statistics.median(shown), 2) if shown else None}
    return [
        Result("batch_cpu_seconds", sum(per_batch.values()), "bare_binlog_read_cpu_seconds", bare, "s",
               higher_is_better=False, limit=1.5,
               details={"batches": len(windowed), "per_batch_by_process": per_batch,
                        "window_seconds": round(window_end - window_start, 1)}),
        Result("freshness_p50", statistics.median(ours), "raw_binlog_tail_p50", statistics.median(raw), "s",
               higher_is_better=False, limit=3, details=details),
        Result("freshness_p95", pct(ours, 95), "raw_binlog_tail_p95", pct(raw, 95), "s",
               higher_is_better=False, limit=6, details={"samples": len(ours)}),
    ]


def ui_lags(home: Path, asset: list[str], start: float, end: float) -> list[float]:
    """`lag_seconds` of the asset's materializations in [start, end]: the lag the UI plots."""
    from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset), after_timestamp=start, before_timestamp=end), limit=10_000
        ).records
    return [float(r.asset_materialization.metadata["lag_seconds"].value) for r in records
            if "lag_seconds" in r.asset_materialization.metadata]


def bare_read_cpu(params, batches) -> float:
    """CPU seconds of reading and decoding the binlog ranges of `batches` with python-mysql-replication
    alone (rows decoded, nothing written): what any reader of these changes pays."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from ingest.sources.mysql.binlog import reader_server_id
    from ingest.sources.mysql.positions import BinlogPosition

    spent = 0.0
    for batch in batches:
        start, end = BinlogPosition.from_metadata(batch.start), BinlogPosition.from_metadata(batch.end)
        began = time.process_time()
        stream = BinLogStreamReader(
            {"host": params.host, "port": params.port, "user": params.user, "passwd": params.password},
            server_id=reader_server_id(), resume_stream=True, log_file=start.file, log_pos=start.pos,
            blocking=False, is_mariadb=False, only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
        try:
            for event in stream:
                _ = event.rows
                if BinlogPosition(stream.log_file, stream.log_pos) >= end:
                    break
        finally:
            stream.close()
        spent += time.process_time() - began
    return spent
