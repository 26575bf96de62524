"""MariaDB benchmarks: snapshot throughput (ours, Spark JDBC, raw scan) and binlog CDC (ours, raw read)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Result, alternating_rounds  # noqa: E402
from ingest.sources.mysql.schema import ConnectionParams  # noqa: E402

DATABASE = "bench"
PASSWORD = "bench-pw"

# About ten mixed columns, like an orders table: integers, text, DECIMAL, DOUBLE,
# ENUM, DATETIME, TIMESTAMP and a flag.
TABLE_DDL = """CREATE TABLE {name} (
  id BIGINT NOT NULL PRIMARY KEY,
  customer_id INT NOT NULL,
  sku VARCHAR(32) NOT NULL,
  qty SMALLINT UNSIGNED NOT NULL,
  price DECIMAL(12,2) NOT NULL,
  weight DOUBLE,
  status ENUM('new','paid','shipped','cancelled') NOT NULL,
  note VARCHAR(200),
  created_at DATETIME(3) NOT NULL,
  updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  gift TINYINT(1) NOT NULL
) ENGINE=InnoDB"""

# Row values as SQL expressions of `seq` (MariaDB's Sequence engine gives 1..N fast).
ROW_EXPRS = ("seq, seq % 10007, CONCAT('sku-', seq % 5003), seq % 40, (seq % 100000) / 100, seq * 0.37, "
             "ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'cancelled'), "
             "IF(seq % 7 = 0, NULL, REPEAT(CHAR(97 + seq % 26), 10 + seq % 50)), "
             "TIMESTAMP('2026-01-01') + INTERVAL seq SECOND, TIMESTAMP('2026-06-01') + INTERVAL seq % 86400 SECOND, "
             "seq % 2")
COLUMNS = "id, customer_id, sku, qty, price, weight, status, note, created_at, updated_at, gift"
LOAD_SLICE = 1_000_000


def setup_database(server) -> ConnectionParams:
    server.create_ingest_user("bench", PASSWORD)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    return ConnectionParams("127.0.0.1", server.port, "bench", PASSWORD, DATABASE, 30)


def load_table(server, name: str, rows: int, log_bin: bool = False) -> float:
    """Create `name` with `rows` rows; seconds taken. Loads outside the binlog unless `log_bin`."""
    started = time.perf_counter()
    with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
        if not log_bin:
            cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(TABLE_DDL.format(name=name))
        for lo in range(0, rows, LOAD_SLICE):
            hi = min(rows, lo + LOAD_SLICE)
            cur.execute(f"INSERT INTO {name} ({COLUMNS}) SELECT {ROW_EXPRS} FROM seq_{lo + 1}_to_{hi}")
            conn.commit()
        cur.execute(f"ANALYZE TABLE {name}")
        cur.fetchall()
    return time.perf_counter() - started


# ------------------------------------------------------------------ snapshot

WARM_ROWS = 500_000

def cursor_scan(params: ConnectionParams, table: str, driver: str) -> tuple[float, int]:
    """One unbuffered SELECT * drained by a streaming cursor of `driver` (pymysql, or mysqlclient as our
    chunk reader opens it), nothing done with the rows."""
    started = time.perf_counter()
    n = 0
    if driver == "pymysql":
        import pymysql.cursors

        conn = params.connect(cursorclass=pymysql.cursors.SSCursor)
        cur = conn.cursor()
    else:
        from MySQLdb.cursors import SSCursor

        conn = params.connect_streaming()
        cur = conn.cursor(SSCursor)
    try:
        cur.execute(f"SELECT * FROM {table}")
        while rows := cur.fetchmany(10_000):
            n += len(rows)
        cur.close()
    finally:
        conn.close()
    return time.perf_counter() - started, n


def client_scan(server, table: str) -> float:
    """The source's limit: the MariaDB command-line client (C) draining SELECT * with --quick
    (row by row, unbuffered) to /dev/null."""
    import subprocess

    from ingest.localdev.mariadb import _binary

    started = time.perf_counter()
    subprocess.run([_binary("mariadb"), "--no-defaults", "--quick", "--batch", "-h", "127.0.0.1",
                    "-P", str(server.port), "-u", "bench", f"-p{PASSWORD}", DATABASE, "-e", f"SELECT * FROM {table}"],
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def jdbc_snapshot(spark, params: ConnectionParams, table: str, rows: int, path: str, partitions: int) -> float:
    """The hand-written Spark way: spark.read.jdbc split on the key, written to Delta."""
    started = time.perf_counter()
    # A jdbc:mysql URL so that Spark picks its MySQL dialect (backtick quoting);
    # permitMysqlScheme lets the MariaDB driver take it.
    df = spark.read.jdbc(
        f"jdbc:mysql://{params.host}:{params.port}/{params.database}?permitMysqlScheme", table, column="id",
        lowerBound=1, upperBound=rows + 1, numPartitions=partitions,
        properties={"user": params.user, "password": params.password, "driver": "org.mariadb.jdbc.Driver",
                    "fetchsize": "10000", "sessionInitStatement": "SET time_zone = '+00:00'"})
    df.write.format("delta").mode("overwrite").save(path)
    return time.perf_counter() - started


def our_snapshot(spark, params: ConnectionParams, table: str, path: str, chunk_size: int, parallelism: int,
                 chunks_per_commit: int) -> tuple[float, int]:
    from ingest.sources.mysql.schema import describe_table
    from ingest.adapters.mysql import run_snapshot

    started = time.perf_counter()
    with params.connect() as conn:
        schema = describe_table(conn, params.database, table)
    progress = run_snapshot(spark, params, schema, path, source="bench", chunk_size=chunk_size,
                            parallelism=parallelism, chunks_per_commit=chunks_per_commit, log=lambda _m: None)
    return time.perf_counter() - started, progress.rows


def snapshot_bench(spark, server, params: ConnectionParams, lake: Path, rows: int, parallelism: int,
                   chunk_size: int, chunks_per_commit: int, log) -> list[Result]:
    table = f"snap_{rows}"
    log(f"loading {rows:,} rows into {DATABASE}.{table}")
    load_s = load_table(server, table, rows)
    log(f"loaded in {load_s:.1f} s; one untimed run of each Spark path on it first")
    # The first large job on a server can be the slow one, the JIT still compiling, and a warm-up on a
    # smaller table did not always take that away: after one of 500k rows our first 10M-row snapshot took
    # 16.1 s and every later one 14.5-14.8 s, whatever the chunk size (docs/performance.md, twenty-ninth
    # session), and alternating_rounds has our path go first in two rounds of three. So both paths run once
    # on the table itself, untimed, the same for each; their times stay in the details.
    ours_first_s, _ = our_snapshot(spark, params, table, str(lake / f"{table}_ours_warm"), chunk_size, parallelism,
                                   chunks_per_commit)
    jdbc_first_s = jdbc_snapshot(spark, params, table, rows, str(lake / f"{table}_jdbc_warm"), parallelism)
    log(f"untimed first runs: ours {ours_first_s:.1f} s, jdbc {jdbc_first_s:.1f} s")

    cursor_s = {}
    # PyMySQL (the driver our reader used before mysqlclient) only where it takes seconds, not minutes
    for driver in ("mysqlclient", "pymysql") if rows <= 1_000_000 else ("mysqlclient",):
        cursor_s[driver], n = cursor_scan(params, table, driver)
        assert n == rows, (driver, n, rows)
    log(f"streaming cursors {cursor_s}")

    def ours(round_no: int) -> float:
        seconds, ours_rows = our_snapshot(spark, params, table, str(lake / f"{table}_ours_{round_no}"), chunk_size,
                                          parallelism, chunks_per_commit)
        assert ours_rows == rows, (ours_rows, rows)
        return seconds

    def jdbc(round_no: int) -> float:
        target = str(lake / f"{table}_jdbc_{round_no}")
        seconds = jdbc_snapshot(spark, params, table, rows, target, parallelism)
        jdbc_rows = spark.read.format("delta").load(target).count()
        assert jdbc_rows == rows, (jdbc_rows, rows)
        return seconds

    # The client's scan is timed in the same rounds as the two Spark paths, its median the baseline: one
    # scan alone took 8.7-10.9 s from run to run of the same table, a spread that moved the ratio by 0.1.
    runs = alternating_rounds({"ours": ours, "jdbc": jdbc, "mariadb_client": lambda _round: client_scan(server, table)},
                              log)
    ours_runs, jdbc_runs, client_runs = runs["ours"], runs["jdbc"], runs["mariadb_client"]
    ours_s, jdbc_s, client_s = (statistics.median(r) for r in (ours_runs, jdbc_runs, client_runs))
    details = {"rows": rows, "parallelism": parallelism, "chunk_size": chunk_size,
               "chunks_per_commit": chunks_per_commit, "ours_seconds": ours_s, "jdbc_seconds": jdbc_s,
               "ours_runs_seconds": ours_runs, "jdbc_runs_seconds": jdbc_runs, "mariadb_client_seconds": client_s,
               "mariadb_client_runs_seconds": client_runs, "load_seconds": load_s,
               "ours_first_run_seconds": ours_first_s, "jdbc_first_run_seconds": jdbc_first_s,
               **{f"{d}_streaming_cursor_rows_per_s": rows / s for d, s in cursor_s.items()}}
    label = _label(rows)
    return [
        Result(f"snapshot_{label}_vs_jdbc", rows / ours_s, "spark_jdbc_to_delta", rows / jdbc_s, "rows/s",
               target=1.0, details=details),
        Result(f"snapshot_{label}_vs_raw_scan", rows / ours_s, "mariadb_client_quick_scan", rows / client_s,
               "rows/s", target=0.7, details=details),
    ]


# ------------------------------------------------------------------ binlog CDC

CDC_TXN_ROWS = 5_000
"""Rows per source transaction in the generated change load."""


def write_changes(server, table: str, events: int) -> dict[str, int]:
    """Half inserts, 30 % updates, 20 % deletes, as row events in transactions of CDC_TXN_ROWS rows."""
    inserts = events // 2
    updates = events * 3 // 10
    deletes = events - inserts - updates
    with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
        for lo in range(0, inserts, CDC_TXN_ROWS):
            hi = min(inserts, lo + CDC_TXN_ROWS)
            cur.execute(f"INSERT INTO {table} ({COLUMNS}) SELECT {ROW_EXPRS} FROM seq_{lo + 1}_to_{hi}")
        for lo in range(0, updates, CDC_TXN_ROWS):
            hi = min(updates, lo + CDC_TXN_ROWS)
            cur.execute(f"UPDATE {table} SET qty = qty + 1, status = 'paid', note = CONCAT('u', id) "
                        f"WHERE id > {lo} AND id <= {hi}")
        for lo in range(0, deletes, CDC_TXN_ROWS):
            hi = min(deletes, lo + CDC_TXN_ROWS)
            cur.execute(f"DELETE FROM {table} WHERE id > {inserts - hi} AND id <= {inserts - lo}")
    return {"insert": inserts, "update": updates, "delete": deletes}


def raw_binlog_read(params: ConnectionParams, start, end) -> tuple[float, int]:
    """The source's limit: python-mysql-replication reading [start, end), decoding each row event's
    rows (`event.rows`) and doing nothing with them."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import RotateEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from ingest.sources.mysql.binlog import reader_server_id
    from ingest.sources.mysql.positions import BinlogPosition

    started = time.perf_counter()
    stream = BinLogStreamReader(
        {"host": params.host, "port": params.port, "user": params.user, "passwd": params.password},
        server_id=reader_server_id(), resume_stream=True, log_file=start.file, log_pos=start.pos,
        blocking=False, is_mariadb=False)
    rows, current = 0, start.file
    try:
        for event in stream:
            if isinstance(event, RotateEvent):  # its own position is in the file it ends
                current = event.next_binlog
                continue
            if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                rows += len(event.rows)
            if event.packet.log_pos and BinlogPosition(current, event.packet.log_pos) >= end:
                break
    finally:
        stream.close()
    return time.perf_counter() - started, rows


def our_cdc(spark, params: ConnectionParams, table: str, lake: Path, log_start, log,
            names: tuple[str, str, str] | None = None) -> tuple[float, int, int]:
    """Every change batch from `log_start` to the head, as the sensor cuts them (one binlog file at most),
    each read into bronze then merged into silver by the batch asset's code (a large batch planned here
    and decoded on Spark's executors). Returns seconds, row changes and batches.
    `names`: the snapshot, bronze and silver folders under `lake` (default `<table>_snap` and so on)."""
    from ingest.adapters.mysql import change_batch_writes
    from ingest.lake.silver import SilverFromBatch
    from ingest.lake.tables import LakeTable
    from ingest.sources.mysql.binlog import binary_logs, master_position
    from ingest.sources.mysql.cdc import plan_next_batch, read_change_batch
    from ingest.sources.mysql.events import CapturedTable
    from ingest.sources.mysql.positions import BinlogPosition

    quiet = lambda _m: None  # noqa: E731
    started = time.perf_counter()
    with params.connect() as conn:
        head = master_position(conn)
        logs = [f for f, _ in binary_logs(conn)]
    snap, bronze, silver = (str(lake / n) for n in names or (f"{table}_{n}" for n in ("snap", "bronze", "silver")))
    captured = {table: CapturedTable(("id",))}
    last_end, changes, batches = None, 0, 0
    while True:
        plan = plan_next_batch(last_end, log_start, head, logs, max_files=1)
        if plan.batch is None or (last_end is not None and last_end >= head):
            break
        key = plan.batch.key
        writes = change_batch_writes("bench", params, read_change_batch(params, "bench", key, captured), captured)
        rows, t0 = 0, time.perf_counter()
        if table in writes:
            rows = writes[table].apply(spark, bronze, quiet)["rows"]
            t1 = time.perf_counter()
            SilverFromBatch("bench", table, LakeTable(spark, bronze, key), LakeTable(spark, snap)).apply(
                spark, silver, quiet)
            log(f"  bronze {t1 - t0:.1f} s, silver {time.perf_counter() - t1:.1f} s")
        changes += rows
        batches += 1
        last_end = BinlogPosition.from_metadata(writes.positions["end"])
        log(f"batch {batches} {key}: {rows:,} changes, {time.perf_counter() - started:.1f} s"
            + (" (executors)" if table in writes and writes[table].frame else ""))
    return time.perf_counter() - started, changes, batches


CDC_WARM_EVENTS = 300_000
"""Changes of another table that go through the batch path before the timed ones: the first MERGE and
the first executor decoding on a server pay Spark's code generation and the JIT (a first 815k-change
batch took 36 s against 18-21 s for the next ones), once in a long-lived server's life, not per batch."""


def empty_snapshotted(spark, server, params: ConnectionParams, lake: Path, table: str):
    """`table` made empty and snapshotted into `<lake>/<table>_snap`: the binlog position its changes
    start from."""
    from ingest.lake.deltalog import last_commit
    from ingest.sources.mysql.positions import BinlogPosition

    load_table(server, table, 0)
    our_snapshot(spark, params, table, str(lake / f"{table}_snap"), 50_000, 2, 8)
    return BinlogPosition.from_metadata(last_commit(str(lake / f"{table}_snap"), kind="snapshot")
                                        .metadata["log_start"])


def cdc_bench(spark, server, params: ConnectionParams, lake: Path, events: int, log, prefix: str = ""
              ) -> list[Result]:
    """`prefix`: of the tables' names, for a second run of it in the same lake (the PostgreSQL comparison)."""
    warm = f"{prefix}cdc_warm"  # before the timed table's snapshot: its log start is after the warm-up's changes
    warm_start = empty_snapshotted(spark, server, params, lake, warm)
    write_changes(server, warm, CDC_WARM_EVENTS)
    warm_s, _, _ = our_cdc(spark, params, warm, lake, warm_start, log)
    log(f"warm-up: {CDC_WARM_EVENTS:,} changes of {warm} through the batch path in {warm_s:.1f} s (not timed)")
    table = f"{prefix}cdc"
    log_start = empty_snapshotted(spark, server, params, lake, table)
    log(f"writing {events:,} row changes")
    t0 = time.perf_counter()
    mix = write_changes(server, table, events)
    from ingest.sources.mysql.binlog import master_position

    with params.connect() as conn:
        head = master_position(conn)
    log(f"written in {time.perf_counter() - t0:.1f} s; binlog {log_start} .. {head}")
    raw_s, raw_rows = raw_binlog_read(params, log_start, head)
    assert raw_rows == events, (raw_rows, events)
    log(f"raw read {raw_s:.1f} s")
    ours_s, changes, batches = our_cdc(spark, params, table, lake, log_start, log)
    assert changes == events, (changes, events)
    silver = spark.read.format("delta").load(str(lake / f"{table}_silver")).where("NOT _deleted").count()
    assert silver == mix["insert"] - mix["delete"], (silver, mix)
    return [Result(f"cdc_{_label(events)}_events", events / ours_s, "raw_python_mysql_replication_read", events / raw_s,
                   "row events/s", target=1.5,
                   details={"events": events, "mix": mix, "batches": batches, "ours_seconds": ours_s,
                            "raw_seconds": raw_s, "warm_up_changes": CDC_WARM_EVENTS, "warm_up_seconds": warm_s,
                            "includes": "binlog read, bronze append, silver merge"})]


# ------------------------------------------------------------------ memory

def large_txn_bench(spark, server, params: ConnectionParams, lake: Path, small: int, large: int, log) -> list[Result]:
    """The run's own process (the client, where a batch is planned and committed) while one batch holding a
    single transaction of `large` row events goes through bronze and silver, against one of `small`:
    flat means the ratio stays near 1 (the rows stay on the executors)."""
    from bench.common import PeakRss
    from ingest.lake.deltalog import last_commit
    from ingest.sources.mysql.positions import BinlogPosition

    peaks, seconds = {}, {}
    for rows in (small, large):
        table = f"txn_{rows}"
        load_table(server, table, 0)
        base = lake / table
        our_snapshot(spark, params, table, str(base / "snap"), 50_000, 2, 8)
        log_start = BinlogPosition.from_metadata(last_commit(str(base / "snap"), kind="snapshot").metadata["log_start"])
        with server.connect(database=DATABASE) as conn, conn.cursor() as cur:  # one transaction, autocommit off
            cur.execute(f"INSERT INTO {table} ({COLUMNS}) SELECT {ROW_EXPRS} FROM seq_1_to_{rows}")
            conn.commit()
        with PeakRss(os.getpid(), tree=False) as rss:  # the client: the Spark server is a child of this process
            seconds[rows], changes, _ = our_cdc(spark, params, table, lake, log_start, log,
                                                names=(f"{table}/snap", f"{table}/bronze", f"{table}/silver"))
        assert changes == rows, (changes, rows)
        peaks[rows] = rss.peak / 2**20
        log(f"one transaction of {rows:,} row events: {seconds[rows]:.1f} s, client peak RSS {peaks[rows]:,.0f} MiB")
    return [Result("large_txn_rss", peaks[large], f"same_for_{_label(small)}_rows", peaks[small], "MiB",
                   higher_is_better=False, target=1.1,
                   details={"small_rows": small, "large_rows": large, "seconds": seconds,
                            "measured": "RSS of this (client) process alone, sampled every 0.2 s, while the batch "
                                        "is read into bronze and merged into silver"})]


def memory_bench(server, lake: Path, small: int, large: int, chunk_size: int, parallelism: int,
                 chunks_per_commit: int, log) -> list[Result]:
    """Peak RSS of a fresh process tree (driver, JVM, Python workers) snapshotting `small` rows
    against `large` rows: flat means the ratio stays near 1."""
    import json
    import subprocess

    from bench.common import BENCH_DIR, PeakRss

    peaks, seconds, live = {}, {}, {}
    for rows in (small, large):
        table = ensure_table(server, rows, log)
        # A state folder of its own: the child starts its own Spark Connect server (the Spark driver, where
        # the rows go), a process of its tree, measured with it; the child stops it at the end.
        env = {**os.environ, "INGEST_SPARK_STATE_DIR": str(lake / f"mem_{rows}_spark")}
        env.pop("INGEST_SPARK_REMOTE", None)
        child = subprocess.Popen([sys.executable, str(BENCH_DIR / "snapshot_child.py"), str(server.port), table,
                                  str(lake / f"mem_{rows}"), str(chunk_size), str(parallelism),
                                  str(chunks_per_commit)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True, env=env)
        with PeakRss(child.pid) as rss:
            out, _ = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"the snapshot child for {rows} rows failed (exit {child.returncode})")
        got = json.loads(out.strip().splitlines()[-1])
        assert got["rows"] == rows, (got, rows)
        peaks[rows], seconds[rows], live[rows] = rss.peak / 2**20, got["seconds"], got["live_heap_mib"]
        held = f"{live[rows]} MiB" if live[rows] is not None else "not measured (no jcmd: it comes with a JDK)"
        log(f"{rows:,} rows: peak RSS {peaks[rows]:,.0f} MiB, {got['seconds']:.1f} s in a fresh process; "
            f"the server's live heap after a full GC at the end: {held}")
    return [Result(f"snapshot_peak_rss_{_label(large)}_rows", peaks[large], f"same_at_{_label(small)}_rows",
                   peaks[small], "MiB", higher_is_better=False, target=1.1,
                   details={"small_rows": small, "large_rows": large, "seconds_in_fresh_process": seconds,
                            "live_heap_after_full_gc_mib": live,
                            "measured": "RSS of the process tree: client, its own Spark Connect server (JVM) and its Python workers; sampled every 0.2 s"})]


def ensure_table(server, rows: int, log) -> str:
    """The generated table of `rows` rows (`snap_<rows>`), loaded unless an earlier benchmark did."""
    table = f"snap_{rows}"
    with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{DATABASE}' "
                    f"AND table_name = '{table}'")
        exists = cur.fetchone()[0]
    if not exists:
        log(f"loading {rows:,} rows into {DATABASE}.{table}")
        load_table(server, table, rows)
    return table


# ------------------------------------------------------------------ reconciliation

def reconcile_bench(spark, server, params: ConnectionParams, lake: Path, small: int, large: int, chunk_size: int,
                    parallelism: int, chunks_per_commit: int, log) -> list[Result]:
    """Reconciliation of a synced silver table with its source, at `small` and `large` rows: its speed
    against a snapshot of the same table (both read the whole source once), and this process's peak
    RSS while it runs (the client's memory: flat means the ratio stays near 1)."""
    from bench.common import PeakRss
    from ingest.reconcile import reconcile
    from ingest.sources.mysql.schema import describe_table

    seconds, snapshot_s, peaks, results = {}, {}, {}, {}
    for rows in (small, large):
        table = ensure_table(server, rows, log)
        base = lake / f"reconcile_{rows}"
        snapshot_s[rows], _ = our_snapshot(spark, params, table, str(base / "snap"), chunk_size, parallelism,
                                           chunks_per_commit)
        from ingest.lake.deltalog import last_commit
        from ingest.sources.mysql.positions import BinlogPosition

        log_start = BinlogPosition.from_metadata(last_commit(str(base / "snap"), kind="snapshot").metadata["log_start"])
        with server.connect(database=DATABASE) as conn, conn.cursor() as cur:  # a batch to merge the snapshot in
            cur.execute("CREATE TABLE IF NOT EXISTS tick (id INT PRIMARY KEY AUTO_INCREMENT)")
            cur.execute("INSERT INTO tick VALUES ()")
            conn.commit()
        our_cdc(spark, params, table, base, log_start, log, names=("snap", "bronze", "silver"))
        with params.connect() as conn:
            schema = describe_table(conn, params.database, table)
        with PeakRss(os.getpid(), tree=False) as rss:  # the client: the Spark server is a child of this process
            got = reconcile(spark, params, schema, str(base / "silver"), chunk_size=chunk_size,
                            parallelism=parallelism)
        assert got.passed and got.source_rows == rows == got.silver_rows, got.summary()
        seconds[rows], peaks[rows], results[rows] = got.seconds, rss.peak / 2**20, got
        log(f"{rows:,} rows: reconciled in {got.seconds:.1f} s (snapshot {snapshot_s[rows]:.1f} s), "
            f"{got.ranges_checked} ranges, peak RSS {peaks[rows]:,.0f} MiB")
    details = {"small_rows": small, "large_rows": large, "reconcile_seconds": seconds, "snapshot_seconds": snapshot_s,
               "ranges_checked": {n: r.ranges_checked for n, r in results.items()}, "chunk_size": chunk_size,
               "parallelism": parallelism, "measured": "reconcile(): range checksums on both sides of a synced table"}
    return [
        Result(f"reconcile_{_label(large)}", large / seconds[large], f"snapshot_{_label(large)}_same_table",
               large / snapshot_s[large], "rows/s", target=1.0, details=details),
        Result(f"reconcile_peak_rss_{_label(large)}_rows", peaks[large], f"same_at_{_label(small)}_rows",
               peaks[small], "MiB", higher_is_better=False, target=1.1,
               details={**details, "measured": "RSS of this (client) process alone, sampled every 0.2 s"}),
    ]


def _label(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"
