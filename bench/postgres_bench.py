"""PostgreSQL: the snapshot against Spark's JDBC reader, and change batches against a bare pgoutput reader.

    pg_snapshot_<N>_vs_jdbc   ours: PgSnapshotWrite (chunks at an exported snapshot, Spark's JDBC reader) into Delta;
                              baseline: spark.read.jdbc with the PostgreSQL driver, split on the key, into Delta;
                              medians of alternating rounds, as the MySQL snapshot's
    pg_cdc_<N>_events         ours: every batch the sensor would cut, read from the slot into bronze, then merged
                              into silver; baseline: psycopg draining the same range of pgoutput messages from
                              the slot (pg_logical_slot_peek_binary_changes, no decoding). Informative: no
                              decoding reader approaches an undecoded drain
    pg_cdc_vs_mysql_cdc       ours: the same as pg_cdc_<N>_events; baseline: MySQL's CDC line (mysql_bench.cdc_bench)
                              run here on MariaDB with the same row shape (MySQL's orders table in PostgreSQL's
                              types, the same values), the same changes in the same transactions, and batches of
                              the same size (PostgreSQL's cut at MySQL's changes per batch), both after a warm-up
    pg_large_txn_rss          the run's process (the client) while one batch of a single transaction of 1M
                              inserts lands, against one of 10k: flat when executors read large batches
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench.common import SNAPSHOT, Result, alternating_rounds, free_port
from bench.mysql_bench import _label

TABLE_DDL = ("(id bigint PRIMARY KEY, customer int NOT NULL, note text, amount numeric(12,2), "
             "created timestamptz NOT NULL, tags text[])")
FILL = ("SELECT g, g % 1000, 'note ' || g, g * 0.01, '2026-01-01 00:00+00'::timestamptz + g * interval '1 second', "
        "ARRAY['a', 'b'] FROM generate_series({lo}, {hi}) g")


def load(conn, table: str, rows: int) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} {TABLE_DDL}")
    step = 1_000_000
    for lo in range(1, rows + 1, step):
        conn.execute(f"INSERT INTO {table} " + FILL.format(lo=lo, hi=min(rows, lo + step - 1)))
    conn.execute(f"VACUUM ANALYZE {table}")


def our_snapshot(spark, params, table: str, path: str, log) -> tuple[float, int]:
    from ingest.adapters.postgres import PgSnapshotWrite

    started = time.perf_counter()
    meta = PgSnapshotWrite("bench", params, "bench_slot", f"public.{table}", **SNAPSHOT).apply(
        spark, path, lambda _m: None)
    return time.perf_counter() - started, meta["rows"]


def jdbc_snapshot(spark, params, table: str, rows: int, path: str) -> float:
    started = time.perf_counter()
    df = spark.read.jdbc(f"jdbc:postgresql://{params.host}:{params.port}/{params.database}", table, column="id",
                         lowerBound=1, upperBound=rows + 1, numPartitions=2,
                         properties={"user": params.user, "password": params.password,
                                     "driver": "org.postgresql.Driver", "fetchsize": "10000"})
    df.write.format("delta").mode("overwrite").save(path)
    return time.perf_counter() - started


# MySQL's CDC table (mysql_bench.TABLE_DDL) and its row values (ROW_EXPRS) in PostgreSQL's types: the row
# shape the two CDC lines share
CDC_DDL = ("(id bigint PRIMARY KEY, customer_id int NOT NULL, sku varchar(32) NOT NULL, qty smallint NOT NULL, "
           "price numeric(12,2) NOT NULL, weight double precision, status order_status NOT NULL, note varchar(200), "
           "created_at timestamp(3) NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), gift boolean NOT NULL)")
CDC_FILL = ("SELECT g, g % 10007, 'sku-' || (g % 5003), g % 40, (g % 100000) / 100.0, g * 0.37, "
            "(ARRAY['new', 'paid', 'shipped', 'cancelled'])[1 + g % 4]::order_status, "
            "CASE WHEN g % 7 = 0 THEN NULL ELSE repeat(chr(97 + g % 26), 10 + g % 50) END, "
            "'2026-01-01'::timestamp + g * interval '1 second', "
            "'2026-06-01'::timestamptz + (g % 86400) * interval '1 second', g % 2 = 1 "
            "FROM generate_series({lo}, {hi}) g")


def create_cdc_table(conn, table: str) -> None:
    conn.execute("DO $$ BEGIN CREATE TYPE order_status AS ENUM ('new', 'paid', 'shipped', 'cancelled'); "
                 "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} {CDC_DDL}")


def write_cdc_changes(conn, table: str, events: int) -> None:
    """What mysql_bench.write_changes writes, here: half inserts, 30 % updates, 20 % deletes, in
    transactions of the same number of rows."""
    from bench.mysql_bench import CDC_TXN_ROWS

    inserts, updates = events // 2, events * 3 // 10
    deletes = events - inserts - updates
    for lo in range(0, inserts, CDC_TXN_ROWS):
        conn.execute(f"INSERT INTO {table} " + CDC_FILL.format(lo=lo + 1, hi=min(inserts, lo + CDC_TXN_ROWS)))
    for lo in range(0, updates, CDC_TXN_ROWS):
        conn.execute(f"UPDATE {table} SET qty = qty + 1, status = 'paid', note = 'u' || id "
                     f"WHERE id > {lo} AND id <= {min(updates, lo + CDC_TXN_ROWS)}")
    for lo in range(0, deletes, CDC_TXN_ROWS):
        hi = min(deletes, lo + CDC_TXN_ROWS)
        conn.execute(f"DELETE FROM {table} WHERE id > {inserts - hi} AND id <= {inserts - lo}")


def drain(conn, slot: str, publication: str, upto) -> tuple[float, int]:
    """The source's limit: every pgoutput message of the range, fetched and not decoded."""
    from ingest.sources.postgres.slot import peek

    started = time.perf_counter()
    n = sum(1 for _ in peek(conn, slot, publication, upto))
    return time.perf_counter() - started, n


def our_cdc(spark, conn, params, table: str, lake: Path, start, head, log, max_bytes: int | None = None
            ) -> tuple[float, int, int, dict]:
    """Every batch the sensor would cut from `start` to `head`, as a batch run lands it (a large one read
    by executors, `cdc.executor_min_bytes` and `executor_readers` at their defaults); `max_bytes`: of WAL
    per batch (default the sensor's)."""
    from ingest.adapters.postgres import change_batch_writes
    from ingest.config import PostgresCdcSettings
    from ingest.lake.silver import SilverFromBatch
    from ingest.lake.tables import LakeTable
    from ingest.sources.postgres.cdc import confirm, plan_next_batch, read_change_batch

    quiet = lambda _m: None  # noqa: E731
    started = time.perf_counter()
    snap, bronze, silver = (str(lake / f"{table}_{n}") for n in ("snap", "bronze", "silver"))
    last_end, changes, batches = None, 0, 0
    phases = {"read": 0.0, "bronze": 0.0, "silver": 0.0}
    cut = {} if max_bytes is None else {"max_bytes": max_bytes}
    while (batch := plan_next_batch(last_end, start, head, **cut)) is not None:
        t0 = time.perf_counter()
        got = read_change_batch(conn, "bench", "bench_slot", "bench_pub", batch, [f"public.{table}"],
                                PostgresCdcSettings().executor_min_bytes)
        t1 = time.perf_counter()
        for write in change_batch_writes("bench", params, "bench_slot", "bench_pub", got,
                                         {f"public.{table}": f"public.{table}"},
                                         readers=PostgresCdcSettings().executor_readers).values():
            changes += write.apply(spark, bronze, quiet)["rows"]
        t2 = time.perf_counter()
        SilverFromBatch("bench", table, LakeTable(spark, bronze, batch.key), LakeTable(spark, snap),
                        batch_required=False).apply(spark, silver, quiet)
        # as the sensor does before it plans the next batch, once the batch log holds this one: the slot
        # then keeps only what the lake lacks, and the next batch's readers do not decode this one's WAL again
        confirm(conn, "bench", "bench_slot", batch.end)
        phases["read"] += t1 - t0
        phases["bronze"] += t2 - t1
        phases["silver"] += time.perf_counter() - t2
        batches += 1
        last_end = batch.end
        log(f"batch {batches} {batch.key}: {changes:,} changes so far, {time.perf_counter() - started:.1f} s "
            f"(read {t1 - t0:.1f} s, bronze {t2 - t1:.1f} s, silver {time.perf_counter() - t2:.1f} s)")
    return time.perf_counter() - started, changes, batches, phases


def large_txn(spark, conn, params, lake: Path, small: int, large: int, log) -> Result:
    """The run's own process while one batch holding a single transaction of `large` inserts goes through
    bronze and silver, against one of `small`: flat means the ratio stays near 1 (executors read it)."""
    import os

    from bench.common import PeakRss
    from ingest.sources.postgres.slot import advance, current_lsn

    peaks, seconds = {}, {}
    for rows in (small, large):
        table = f"txn_{rows}"
        load(conn, table, 0)
        conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
        our_snapshot(spark, params, table, str(lake / f"{table}_snap"), log)
        start = current_lsn(conn)
        advance(conn, "bench_slot", start)
        conn.execute(f"INSERT INTO {table} " + FILL.format(lo=1, hi=rows))  # autocommit: one transaction
        head = current_lsn(conn)
        with PeakRss(os.getpid(), tree=False) as rss:  # the client: the Spark server is a child of this process
            seconds[rows], changes, _, _ = our_cdc(spark, conn, params, table, lake, start, head, log)
        assert changes == rows, (changes, rows)
        peaks[rows] = rss.peak / 2**20
        log(f"one transaction of {rows:,} inserts: {seconds[rows]:.1f} s, client peak RSS {peaks[rows]:,.0f} MiB")
    return Result("pg_large_txn_rss", peaks[large], f"same_for_{_label(small)}_rows", peaks[small], "MiB",
                  higher_is_better=False, target=1.1,
                  details={"small_rows": small, "large_rows": large, "seconds": seconds,
                           "measured": "RSS of this (client) process alone, sampled every 0.2 s, while the batch "
                                       "is read into bronze and merged into silver"})


def postgres_bench(spark, work: Path, lake: Path, rows: int, events: int, log, mysql=None) -> list[Result]:
    """`mysql`: the MariaDB server and its bench user's ConnectionParams, for pg_cdc_vs_mysql_cdc."""
    from ingest.adapters.postgres import PgParams
    from ingest.localdev.postgres import PostgresServer

    from bench.mysql_bench import CDC_WARM_EVENTS, cdc_bench

    server = PostgresServer(free_port(), settings={"shared_buffers": "1GB",  # its own temp folder: postgres owns it
                                                                      "max_wal_size": "4GB"}).start()
    try:
        params = PgParams(server.host, server.port, server.user, server.password, "postgres")
        with server.connect() as conn:
            label = _label(rows).lower()
            log(f"loading {rows:,} rows into snap_{label}")
            load(conn, "warm", 20_000)
            load(conn, f"snap_{label}", rows)
            log("warming up both Spark paths on a small table")
            our_snapshot(spark, params, "warm", str(lake / "pg_warm_ours"), log)
            jdbc_snapshot(spark, params, "warm", 20_000, str(lake / "pg_warm_jdbc"))

            def ours(round_no: int) -> float:
                seconds, ours_rows = our_snapshot(spark, params, f"snap_{label}",
                                                  str(lake / f"pg_snap_ours_{round_no}"), log)
                assert ours_rows == rows, (ours_rows, rows)
                return seconds

            def jdbc(round_no: int) -> float:
                target = str(lake / f"pg_snap_jdbc_{round_no}")
                seconds = jdbc_snapshot(spark, params, f"snap_{label}", rows, target)
                assert spark.read.format("delta").load(target).count() == rows
                return seconds

            snapshot_runs = alternating_rounds({"ours": ours, "jdbc": jdbc}, log)
            ours_s, jdbc_s = (statistics.median(snapshot_runs[path]) for path in ("ours", "jdbc"))

            # change batches: the table's snapshot first (it creates the slot), then the load
            conn.execute(f"DROP TABLE IF EXISTS snap_{label}")
            for table in ("cdc_warm", "cdc"):
                create_cdc_table(conn, table)
            conn.execute("CREATE PUBLICATION bench_pub FOR TABLE cdc_warm, cdc")
            large = large_txn(spark, conn, params, lake, 10_000, 1_000_000, log)  # first: no earlier batch's RSS
            mysql_line = None
            if mysql is not None:
                log(f"MySQL's CDC line with {events:,} changes, for the comparison")
                (mysql_line,) = cdc_bench(spark, *mysql, lake / "mysql", events, log, prefix="pg_")
            # as MySQL's line does: another table's changes through the batch path first, not timed (the
            # first MERGE and executor read on a server pay code generation and the JIT)
            warm_s = changes_through(spark, conn, params, lake, "cdc_warm", CDC_WARM_EVENTS, log)[0]
            log(f"warm-up: {CDC_WARM_EVENTS:,} changes through the batch path in {warm_s:.1f} s (not timed)")
            per_batch = None if mysql_line is None else events / mysql_line.details["batches"]
            cdc_s, changes, batches, phases, drain_s, messages, wal = changes_through(
                spark, conn, params, lake, "cdc", events, log, drain_first=True, changes_per_batch=per_batch)
            assert changes == events, (changes, events)
            silver = spark.read.format("delta").load(str(lake / "cdc_silver")).where("NOT _deleted").count()
            assert silver == events // 2 - (events - events // 2 - events * 3 // 10), silver
        details_snap = {"rows": rows, "ours_seconds": ours_s, "jdbc_seconds": jdbc_s,
                        "ours_runs_seconds": snapshot_runs["ours"], "jdbc_runs_seconds": snapshot_runs["jdbc"],
                        **SNAPSHOT}
        details_cdc = {"events": events, "batches": batches, "ours_seconds": cdc_s, "drain_seconds": drain_s,
                       "messages": messages, "wal_bytes": wal, "warm_up_changes": CDC_WARM_EVENTS,
                       "warm_up_seconds": warm_s, **{f"{k}_seconds": round(v, 2) for k, v in phases.items()}}
        results = [
            Result(f"pg_snapshot_{_label(rows)}_vs_jdbc", rows / ours_s, "spark_jdbc_postgresql_to_delta", rows / jdbc_s,
                   "rows/s", target=1.0, details=details_snap),
            Result(f"pg_cdc_{_label(events)}_events", events / cdc_s, "psycopg_pgoutput_drain", events / drain_s,
                   "events/s", details=details_cdc),
            large,
        ]
        if mysql_line is not None:
            results.append(Result("pg_cdc_vs_mysql_cdc", events / cdc_s, "mysql_cdc_same_shape", mysql_line.ours,
                                  "events/s", target=1.0, details={**details_cdc, "mysql": mysql_line.details}))
        return results
    finally:
        server.stop()


def changes_through(spark, conn, params, lake: Path, table: str, events: int, log, drain_first: bool = False,
                    changes_per_batch: float | None = None):
    """`table`'s snapshot, then `events` changes (write_cdc_changes) through every batch the sensor would
    cut: seconds, changes, batches and phases (our_cdc), the drain's seconds and messages (`drain_first`;
    else None) and the WAL they span. `changes_per_batch`: batches cut at that many changes' WAL."""
    from ingest.sources.postgres.slot import advance, current_lsn

    our_snapshot(spark, params, table, str(lake / f"{table}_snap"), log)
    start = current_lsn(conn)
    advance(conn, "bench_slot", start)  # the readers decode from here, not from the loads before
    log(f"writing {events:,} row changes to {table}")
    write_cdc_changes(conn, table, events)
    head = current_lsn(conn)
    wal = head.value - start.value
    drain_s = messages = None
    if drain_first:
        drain_s, messages = drain(conn, "bench_slot", "bench_pub", head)
        log(f"bare pgoutput drain: {messages:,} messages in {drain_s:.1f} s")
    max_bytes = None if changes_per_batch is None else max(1, int(wal * changes_per_batch / events) + 1)
    return (*our_cdc(spark, conn, params, table, lake, start, head, log, max_bytes), drain_s, messages, wal)
