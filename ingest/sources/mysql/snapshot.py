"""Lock-free, parallel, resumable snapshots (DESIGN principle 3).

Each chunk of primary keys is read in its own `START TRANSACTION WITH
CONSISTENT SNAPSHOT` and every row is tagged with that transaction's binlog
position (`_pos`, row index 0). Chunks are read by a PySpark Python data
source whose partitions are groups of chunks, so Spark executors open the
connections and a cluster scales the read; `parallelism` partitions means at
most that many source connections. Why a Python data source rather than Spark
JDBC: both paths of the type contract then end in the same Python function
(types.py), so a snapshot row and a binlog row cannot drift apart; the
decoding sits behind `read_chunk`, which a faster reader can replace.

Chunks are committed to Delta in waves of `chunks_per_commit`, each commit
carrying the snapshot id, the wave number (also the txn version) and the key
the next wave starts at. A snapshot that dies resumes after its last
committed wave; a finished one is replaced by the next.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ingest.sources.mysql.chunks import (
    Chunk, boundary_query, chunk_query, group_chunks, key_from_json, key_to_json, plan_chunks,
)
from ingest.lake.tables import spark_ident
from ingest.retry import retrying
from ingest.sources.mysql.errors import SourceUnreachable, executor_error_code, is_transient
from ingest.sources.mysql.binlog import master_position
from ingest.sources.mysql.positions import BinlogPosition
from ingest.sources.mysql.schema import ConnectionParams, TableSchema, describe_table
from ingest.sources.mysql.types import MySQLColumn, column_type, convert_column

T = TypeVar("T")

DATA_SOURCE_NAME = "ingest_mysql_chunks"
FETCH_ROWS = 10_000


def open_consistent_snapshot(conn) -> BinlogPosition:
    """Begin a consistent-snapshot transaction and return the binlog position it sees."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {k.lower(): v for k, v in cur.fetchall()}
    return BinlogPosition(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))


# ---------------------------------------------------------------- executor side

def read_chunk(params: ConnectionParams, spec: dict[str, Any], chunk: Chunk, arrow_schema) -> Iterator[Any]:
    """Yield Arrow record batches of one chunk, each row tagged with the chunk's `_pos`."""
    import pyarrow as pa
    from decimal import Decimal

    from MySQLdb.cursors import SSCursor

    columns = [MySQLColumn(**c) for c in spec["columns"]]
    ctypes = [column_type(c, spec["table"]) for c in columns]
    conn = params.connect_streaming()
    try:
        position = open_consistent_snapshot(conn)
        pos_value = Decimal(position.row_pos())
        sql, args = chunk_query(spec["database"], spec["table"], [c.name for c in columns], spec["key"], chunk)
        # No `with` for the cursor: closing an unbuffered cursor whose connection
        # dropped raises an AttributeError that would hide the 2013 error the
        # wave retry looks for.
        cur = conn.cursor(SSCursor)
        cur.execute(sql, args)
        while True:
            rows = cur.fetchmany(FETCH_ROWS)
            if not rows:
                break
            cols = list(zip(*rows))
            arrays = [
                pa.array(convert_column(ct, list(values)), type=arrow_schema.field(i).type)
                for i, (ct, values) in enumerate(zip(ctypes, cols))
            ]
            arrays.append(pa.array([pos_value] * len(rows), type=arrow_schema.field(len(columns)).type))
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
        cur.close()
        conn.commit()
    finally:
        conn.close()


def read_chunk_group(spec: dict[str, Any], options: dict[str, str], chunks: list[dict], arrow_schema) -> Iterator[Any]:
    """One Spark partition: its chunks in turn (executor side)."""
    params = ConnectionParams(**spec["conn"], password=options["password"])
    for c in chunks:
        yield from read_chunk(params, spec, Chunk(c["index"], key_from_json(c["lo"]), key_from_json(c["hi"])),
                              arrow_schema)


def _register_data_source(spark) -> None:
    from ingest.lake.datasource import register_reader

    register_reader(spark, DATA_SOURCE_NAME, read_chunk_group, "groups")


def snapshot_ddl(schema: TableSchema) -> str:
    cols = [f"{spark_ident(c.name)} {column_type(c, schema.table).spark}" for c in schema.columns]
    return ", ".join([*cols, "`_pos` decimal(38,0)"])


def read_chunks_df(spark, params: ConnectionParams, schema: TableSchema, chunks: list[Chunk], parallelism: int):
    """A DataFrame over `chunks`, in at most `parallelism` Spark partitions."""
    _register_data_source(spark)
    n = max(1, min(parallelism, len(chunks)))
    groups = [[{"index": c.index, "lo": key_to_json(c.lo), "hi": key_to_json(c.hi)} for c in chunks[i::n]]
              for i in range(n)]
    spec = {
        "conn": {"host": params.host, "port": params.port, "user": params.user, "database": params.database,
                 "connect_timeout": params.connect_timeout},
        "database": schema.database, "table": schema.table, "key": list(schema.primary_key),
        "columns": [c.__dict__ for c in schema.columns], "groups": groups,
    }
    # "password" is an option name Spark redacts in plans and the UI.
    return (spark.read.format(DATA_SOURCE_NAME).option("ddl", snapshot_ddl(schema))
            .option("spec", json.dumps(spec, default=str)).option("password", params.password).load())


def plan_boundaries(conn, schema: TableSchema, chunk_size: int, start) -> list[tuple]:
    sql, args = boundary_query(schema.database, schema.table, list(schema.primary_key), chunk_size, start)
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return [tuple(r) for r in cur.fetchall()]


# ---------------------------------------------------------------- driver side

@dataclass
class SnapshotProgress:
    snapshot_id: str
    log_start: BinlogPosition
    resumed_from_wave: int | None
    chunks_total: int = 0
    chunks_done: int = 0
    rows: int = 0
    waves_committed: list[int] = field(default_factory=list)
    seconds: float = 0.0
    shape_restarts: int = 0
    """Times DDL on the table made the snapshot start afresh."""
    key_columns: tuple[str, ...] = ()


class ShapeChanged(Exception):
    """The table's columns or key changed (DDL) while it was being snapshotted."""

    def __init__(self, schema: TableSchema) -> None:
        super().__init__(schema.table)
        self.schema = schema


MAX_SHAPE_RESTARTS = 3


def run_snapshot(spark, params: ConnectionParams, schema: TableSchema, path: str, *, source: str,
                 chunk_size: int, parallelism: int, chunks_per_commit: int,
                 log: Callable[[str], None] = print) -> SnapshotProgress:
    """Snapshot one table into the Delta table at `path`, resuming an unfinished snapshot.

    DDL on the table while it is read (a column added, dropped or retyped, a
    new key) makes the waves already committed a different shape from the
    ones to come, and may fail a chunk's read (error 1412, "table definition
    has changed"). The table is described again after every wave and after a
    failed one; on a change the snapshot starts afresh with the new shape.
    """
    restarts = 0
    while True:
        try:
            progress = _snapshot_once(spark, params, schema, path, source=source, chunk_size=chunk_size,
                                      parallelism=parallelism, chunks_per_commit=chunks_per_commit, log=log)
            progress.shape_restarts = restarts
            return progress
        except ShapeChanged as changed:
            restarts += 1
            if restarts > MAX_SHAPE_RESTARTS:
                raise SnapshotShapeUnstable(
                    f"source {source}: the shape of {schema.database}.{schema.table} changed during "
                    f"{restarts} snapshot attempts in a row. Fix: materialize the snapshot again once the "
                    "schema migration is over") from None
            log(f"snapshot {schema.table}: the table changed shape while being read "
                f"({schema.fingerprint()} -> {changed.schema.fingerprint()}); starting afresh with the new shape")
            schema = changed.schema


class SnapshotShapeUnstable(RuntimeError):
    pass


def _check_shape(params: ConnectionParams, schema: TableSchema, fingerprint: str) -> None:
    """Raise ShapeChanged when the table no longer has the shape the snapshot started with."""
    with params.connect() as conn:
        now = describe_table(conn, schema.database, schema.table, exclude=frozenset(schema.excluded))
    if now.fingerprint() != fingerprint:
        raise ShapeChanged(now)


def _snapshot_once(spark, params: ConnectionParams, schema: TableSchema, path: str, *, source: str,
                   chunk_size: int, parallelism: int, chunks_per_commit: int,
                   log: Callable[[str], None]) -> SnapshotProgress:
    from ingest.lake.commits import Txn, last_commit, unfinished_snapshot
    from ingest.lake.write import append

    started = time.monotonic()
    fingerprint = schema.fingerprint()
    last = last_commit(path, kind="snapshot")
    resume = unfinished_snapshot(last.metadata if last else None, fingerprint)
    conn = params.connect()
    try:
        if resume:
            snapshot_id = resume["snapshot_id"]
            log_start = BinlogPosition.from_metadata(resume["log_start"])
            next_wave, next_chunk = resume["wave"] + 1, resume["chunks_done"]
            start = key_from_json(resume["key_hi"])
            progress = SnapshotProgress(snapshot_id, log_start, resume["wave"], chunks_done=next_chunk)
            log(f"resuming snapshot {snapshot_id} of {schema.table} at wave {next_wave}, key {start!r}")
        else:
            snapshot_id = uuid.uuid4().hex[:12]
            # Every chunk's consistent snapshot is taken after this point, so the
            # change log read from here covers every chunk (older changes lose the
            # ordered merge against the chunk's own, newer `_pos`).
            log_start = master_position(conn)
            next_wave, next_chunk, start = 0, 0, None
            progress = SnapshotProgress(snapshot_id, log_start, None)
            log(f"starting snapshot {snapshot_id} of {schema.table}; change log needed from {log_start}")
        boundaries = plan_boundaries(conn, schema, chunk_size, start)
    finally:
        conn.close()

    progress.key_columns = schema.primary_key
    chunks = plan_chunks(boundaries, start, first_index=next_chunk)
    waves = group_chunks(chunks, chunks_per_commit)
    progress.chunks_total = next_chunk + len(chunks)
    app_id = f"snapshot:{source}.{schema.table}:{snapshot_id}"
    for offset, wave in enumerate(waves):
        wave_no = next_wave + offset
        is_last = offset == len(waves) - 1
        df = read_chunks_df(spark, params, schema, wave, parallelism)
        meta = {
            "kind": "snapshot", "source": source, "table": schema.table, "snapshot_id": snapshot_id,
            "wave": wave_no, "key_hi": key_to_json(wave[-1].hi), "complete": is_last,
            "chunks_done": wave[-1].index + 1, "chunks_total": progress.chunks_total,
            "log_start": log_start.to_metadata(), "log_start_pos": log_start.row_pos(), "fingerprint": fingerprint,
            "key_columns": list(schema.primary_key),
        }
        try:
            outcome = retry_wave(lambda: append(df, path, meta, Txn(app_id, wave_no), overwrite=wave_no == 0,
                                                overwrite_schema=wave_no == 0), source, schema.table, wave_no, params)
        except Exception:
            _check_shape(params, schema, fingerprint)  # DDL explains the failure: start afresh
            raise
        _check_shape(params, schema, fingerprint)
        progress.rows += outcome.rows
        progress.chunks_done = wave[-1].index + 1
        progress.waves_committed.append(wave_no)
        elapsed = time.monotonic() - started
        log(f"snapshot {schema.table}: {progress.chunks_done}/{progress.chunks_total} chunks, "
            f"{progress.rows} rows, {progress.rows / max(elapsed, 1e-9):,.0f} rows/s")
    progress.seconds = time.monotonic() - started
    return progress


def retry_wave(write: Callable[[], T], source: str, table: str, wave: int, params: ConnectionParams,
               attempts: int = 4) -> T:
    """Read and commit a wave again when a chunk's connection drops or the server restarts.

    Safe: the wave commits with its txn id, so a wave that did commit before
    the error is skipped by Delta, and one that did not wrote nothing.
    """
    def give_up(exc: BaseException, tries: int) -> SourceUnreachable:
        return SourceUnreachable(
            f"source {source}: snapshot wave {wave} of {table} lost its connection to {params.host}:{params.port} "
            f"{tries} times (error {executor_error_code(str(exc)) or getattr(exc, 'args', ['?'])[0]}). Fix: check "
            "the server, then materialize the snapshot again: it resumes after the last committed wave",
            code=executor_error_code(str(exc)))

    return retrying(write, is_transient, give_up, attempts=attempts, base_delay=1.0)


@dataclass(frozen=True)
class SnapshotWrite:
    """An asset's output: snapshot `schema` into the table the IO manager names."""

    source: str
    params: ConnectionParams
    schema: TableSchema
    chunk_size: int
    parallelism: int
    chunks_per_commit: int

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from ingest.lake.commits import table_version

        progress = run_snapshot(
            spark, self.params, self.schema, path, source=self.source, chunk_size=self.chunk_size,
            parallelism=self.parallelism, chunks_per_commit=self.chunks_per_commit, log=log,
        )
        df = spark.read.format("delta").load(path)
        stats = df.agg(F.count(F.lit(1)).alias("rows"), F.min("_pos").alias("lo"), F.max("_pos").alias("hi")).first()
        base = progress.log_start.basename
        meta: dict[str, Any] = {
            "rows": stats["rows"],
            "rows_per_second": round(progress.rows / max(progress.seconds, 1e-9), 1),
            "seconds": round(progress.seconds, 2),
            "snapshot_id": progress.snapshot_id,
            "chunks": progress.chunks_total,
            "resumed_from_wave": -1 if progress.resumed_from_wave is None else progress.resumed_from_wave,
            "shape_restarts": progress.shape_restarts,
            "log_start": progress.log_start.to_metadata(),
            "key_columns": list(progress.key_columns),
            "delta_version": table_version(path),
        }
        if self.schema.excluded:
            meta["excluded_columns"] = list(self.schema.excluded)
        if stats["lo"] is not None:
            meta["min_chunk_position"] = BinlogPosition.from_pos(stats["lo"], base).to_metadata()
            meta["max_chunk_position"] = BinlogPosition.from_pos(stats["hi"], base).to_metadata()
        return meta
