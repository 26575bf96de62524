"""The MySQL/MariaDB source's adapter: its snapshot chunks read on Spark's executors, committed by the lake.

ingest/sources/mysql/ plans chunks, reads one on an executor and checks the table's shape; this module
builds the chunks' DataFrame and drives the lake's snapshot protocol (ingest/lake/snapshot.py) over them:
waves of `chunks_per_commit` chunks, resumed after the last committed wave, started afresh when DDL
changed the table while it was read.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ingest.sources.mysql.chunks import Chunk, key_from_json, key_to_json, plan_chunks
from ingest.sources.mysql.positions import BinlogPosition
from ingest.sources.mysql.schema import ConnectionParams, TableSchema
from ingest.filters import RowFilter, predicate
from ingest.transforms import TableTransforms
from ingest.sources.mysql.snapshot import (
    ShapeChanged, check_shape, plan_boundaries, read_chunk_group, retry_wave,
)
from ingest.sources.mysql.types import column_type

DATA_SOURCE_NAME = "ingest_mysql_chunks"
SLICES_SOURCE_NAME = "ingest_mysql_binlog_slices"


def snapshot_ddl(schema: TableSchema) -> str:
    from ingest.lake.tables import spark_ident

    cols = [f"{spark_ident(c.name)} {column_type(c, schema.table).spark}" for c in schema.columns]
    return ", ".join([*cols, "`_pos` decimal(38,0)"])


def read_chunks_df(spark, params: ConnectionParams, schema: TableSchema, chunks: list[Chunk], parallelism: int,
                   row_filter: RowFilter | None = None):
    """A DataFrame over `chunks` (only the rows `row_filter` holds for), read by at most `parallelism`
    connections at once: Spark's JDBC reader where every column has a JDBC form
    (ingest/sources/mysql/jdbc.py), the Python data source otherwise."""
    from ingest.sources.mysql.jdbc import jdbc_columns

    columns = jdbc_columns(schema.columns, schema.table)
    if columns is None:
        return read_chunks_python_df(spark, params, schema, chunks, parallelism, row_filter)
    return read_chunks_jdbc_df(spark, params, schema, chunks, parallelism, columns, row_filter)


def read_chunks_jdbc_df(spark, params: ConnectionParams, schema: TableSchema, chunks: list[Chunk],
                        parallelism: int, columns, row_filter: RowFilter | None = None):
    """One Spark partition per chunk, each its own connection and consistent snapshot; coalesced so
    that at most `parallelism` read at once."""
    from ingest.lake.tables import spark_ident
    from ingest.sources.contract import custom_schema
    from ingest.sources.mysql.filters import captured_rows
    from ingest.sources.mysql.jdbc import (
        DRIVER, POSITION_COLUMN, SESSION_INIT, chunk_predicate, chunk_table, jdbc_url,
    )

    key = list(schema.primary_key)
    # the filter over the captured columns, in a derived table of its own: the key ranges still reach the
    # table's index (the server merges derived tables), and no name of ours can clash with the predicate's
    rows = (f"(SELECT * FROM {captured_rows(schema.database, schema.table, schema.columns)} AS `_f` "
            f"WHERE {predicate(row_filter.where)})" if row_filter else None)
    # fetchsize: rows the driver buffers per connection. A task reads its chunks one after another, and
    # a finished chunk's closed result set stays reachable (with its last buffer) until the task ends:
    # with 10,000, the live heap in the middle of a 64-chunk wave held 29 such buffers and 94 MiB of byte
    # arrays; with 1,000, no buffers worth listing and 49-67 MiB (most of it the JVM's own strings).
    df = spark.read.jdbc(
        jdbc_url(params.host, params.port, params.database),
        chunk_table(schema.database, schema.table, columns, key, rows),
        predicates=[chunk_predicate(key, c) for c in chunks],
        properties={"user": params.user, "password": params.password, "driver": DRIVER, "fetchsize": "1000",
                    "sessionInitStatement": SESSION_INIT, "connectTimeout": str(params.connect_timeout * 1000),
                    **custom_schema(columns)})
    out = df.selectExpr(*[f"{c.spark} AS {spark_ident(c.name)}" for c in columns], f"`{POSITION_COLUMN}`")
    return out.coalesce(max(1, min(parallelism, len(chunks))))


def read_chunks_python_df(spark, params: ConnectionParams, schema: TableSchema, chunks: list[Chunk],
                          parallelism: int, row_filter: RowFilter | None = None):
    """The chunks through the project's Python data source (ingest/sources/mysql/snapshot.py)."""
    from ingest.lake.datasource import register_reader

    register_reader(spark, DATA_SOURCE_NAME, read_chunk_group, "groups")
    n = max(1, min(parallelism, len(chunks)))
    groups = [[{"index": c.index, "lo": key_to_json(c.lo), "hi": key_to_json(c.hi)} for c in chunks[i::n]]
              for i in range(n)]
    spec = {
        "conn": {"host": params.host, "port": params.port, "user": params.user, "database": params.database,
                 "connect_timeout": params.connect_timeout},
        "database": schema.database, "table": schema.table, "key": list(schema.primary_key),
        "columns": [c.__dict__ for c in schema.columns], "groups": groups,
        **({"where": row_filter.where} if row_filter else {}),
    }
    # "password" is an option name Spark redacts in plans and the UI.
    return (spark.read.format(DATA_SOURCE_NAME).option("ddl", snapshot_ddl(schema))
            .option("spec", json.dumps(spec, default=str)).option("password", params.password).load())


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


MAX_SHAPE_RESTARTS = 3


class SnapshotShapeUnstable(RuntimeError):
    pass


def run_snapshot(spark, params: ConnectionParams, schema: TableSchema, path: str, *, source: str,
                 chunk_size: int, parallelism: int, chunks_per_commit: int,
                 log: Callable[[str], None] = print, transforms: TableTransforms | None = None,
                 row_filter: RowFilter | None = None) -> SnapshotProgress:
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
                                      transforms=transforms, row_filter=row_filter,
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


def _snapshot_once(spark, params: ConnectionParams, schema: TableSchema, path: str, *, source: str,
                   chunk_size: int, parallelism: int, chunks_per_commit: int,
                   log: Callable[[str], None], transforms: TableTransforms | None = None,
                   row_filter: RowFilter | None = None) -> SnapshotProgress:
    from ingest.lake.commits import waves
    from ingest.lake.connect import jdbc_driver
    from ingest.lake.snapshot import SnapshotCommit, Waves, commit_waves, resume_point
    from ingest.sources.mysql.binlog import master_position
    from ingest.sources.mysql.jdbc import DRIVER

    started = time.monotonic()
    fingerprint = schema.fingerprint()
    # waves written under other transforms or another filter never mix with these
    shape = (fingerprint + (f";transforms:{transforms.metadata()}" if transforms else "")
             + (row_filter.shape() if row_filter else ""))
    resume = resume_point(path, shape)
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
    progress.chunks_total = next_chunk + len(chunks)

    def write(wave_no: int, commit):
        try:
            outcome = retry_wave(commit, source, schema.table, wave_no, params)
        except Exception:
            check_shape(params, schema, fingerprint)  # DDL explains the failure: start afresh
            raise
        check_shape(params, schema, fingerprint)
        return outcome

    def said(wave: list[Chunk], rows: int) -> str:
        return (f"{wave[-1].index + 1}/{progress.chunks_total} chunks, {rows} rows, "
                f"{rows / max(time.monotonic() - started, 1e-9):,.0f} rows/s")

    run = SnapshotCommit(source, schema.table, snapshot_id, shape, schema.primary_key,
                         log_start.to_metadata(), log_start.row_pos(), wave=next_wave)
    with jdbc_driver(DRIVER, "MariaDB"):
        done = commit_waves(path, Waves(
            run, waves(chunks, chunks_per_commit),
            lambda wave: read_chunks_df(spark, params, schema, wave, parallelism, row_filter),
            lambda wave: {"key_hi": key_to_json(wave[-1].hi), "chunks_done": wave[-1].index + 1,
                          "chunks_total": progress.chunks_total},
            said, write, transforms), log)
    progress.rows, progress.waves_committed = done.rows, done.committed
    progress.chunks_done = progress.chunks_total  # every wave committed (a failed one raised)
    progress.seconds = time.monotonic() - started
    return progress


@dataclass(frozen=True)
class SnapshotWrite:
    """An asset's output: snapshot `schema` into the table the IO manager names."""


    source: str
    params: ConnectionParams
    schema: TableSchema
    chunk_size: int
    parallelism: int
    chunks_per_commit: int
    transforms: TableTransforms | None = None
    row_filter: RowFilter | None = None

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from ingest.lake.deltalog import table_version
        from ingest.lake.snapshot import snapshot_positions

        progress = run_snapshot(
            spark, self.params, self.schema, path, source=self.source, chunk_size=self.chunk_size,
            parallelism=self.parallelism, chunks_per_commit=self.chunks_per_commit, log=log,
            transforms=self.transforms, row_filter=self.row_filter,
        )
        found = snapshot_positions(path, progress.snapshot_id)
        if found is None:  # the log no longer reaches the first wave: count and read `_pos` from the table
            df = spark.read.format("delta").load(path)
            found = tuple(df.agg(F.count(F.lit(1)), F.min("_pos"), F.max("_pos")).first())
        rows, lowest, highest = found
        base = progress.log_start.basename
        meta: dict[str, Any] = {
            "rows": rows,
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
        if self.transforms:
            meta["transformed_columns"] = self.transforms.metadata()
        if self.row_filter:
            meta["row_filter"] = self.row_filter.where
        if lowest is not None:
            meta["min_chunk_position"] = BinlogPosition.from_pos(lowest, base).to_metadata()
            meta["max_chunk_position"] = BinlogPosition.from_pos(highest, base).to_metadata()
        return meta


# ---------------------------------------------------------------- change batches read on executors

def change_batch_writes(source: str, params: ConnectionParams, batch, captured, transforms=None,
                        filters: dict[str, tuple[RowFilter, TableSchema | None]] | None = None) -> Any:
    """A change batch as bronze writes (lake.bronze.ChangeBatch). A batch the source only planned
    (`batch.slices`) gets, for each table it touched, a DataFrame whose partitions are the slices,
    each decoded on an executor (`read_slice`): the binlog is fetched once per table, and each read
    decodes only that table's rows, so the work is the batch's rows, not rows times tables. A table in
    `filters` (its row filter and schema) has its slices judged by the server on the executors too."""
    from functools import partial

    from ingest.lake.bronze import bronze_writes

    frames = {t: partial(read_slices_df, params=params, table=t, captured=captured[t], slices=batch.slices,
                         columns=changes.columns, batch_key=batch.key, row_filter=(filters or {}).get(t))
              for t, changes in batch.tables.items() if changes.sliced}
    return bronze_writes(source, batch, frames, transforms)


def read_slices_df(spark, *, params: ConnectionParams, table: str, captured, slices: list[dict],
                   columns: list[tuple[str, str]], batch_key: str,
                   row_filter: tuple[RowFilter, TableSchema | None] | None = None):
    """One table's changes in a batch, one Spark partition per slice, in bronze's schema; with a
    `row_filter` (and the table's schema, None for a table dropped since), what they land as under it."""
    from ingest.lake.bronze import bronze_ddl
    from ingest.lake.datasource import register_reader

    register_reader(spark, SLICES_SOURCE_NAME, read_slice, "slices")
    spec = {
        "conn": {"host": params.host, "port": params.port, "user": params.user, "database": params.database,
                 "connect_timeout": params.connect_timeout},
        "table": table, "keys": list(captured.keys), "excluded": sorted(captured.excluded),
        "declared": dict(captured.declared), "columns": [list(c) for c in columns], "batch": batch_key,
        "slices": slices,
    }
    if row_filter:
        where, schema = row_filter
        spec["filter"] = {"where": where.where, "dropped": True} if schema is None else {
            "where": where.where, "database": schema.database, "columns": [c.__dict__ for c in schema.columns],
            "keys": list(schema.primary_key)}
    return (spark.read.format(SLICES_SOURCE_NAME).option("ddl", bronze_ddl(columns))
            .option("spec", json.dumps(spec)).option("password", params.password).load())


def read_slice(spec: dict[str, Any], options: dict[str, str], part: dict, arrow_schema) -> Any:
    """One slice of a batch (executor side): its rows events for one table decoded by the same code as
    a batch read in the driver (binlog.scan_batch), as Arrow record batches of bronze rows."""
    from ingest.lake.bronze import BronzeRows
    from ingest.lake.datasource import ARROW_ROWS
    from ingest.sources.mysql.binlog import BatchResult, scan_batch
    from ingest.sources.mysql.events import CapturedTable
    from ingest.sources.mysql.positions import BatchRange

    params = ConnectionParams(**spec["conn"], password=options["password"])
    piece = BatchRange(BinlogPosition.from_metadata(part["start"]), BinlogPosition.from_metadata(part["end"]))
    table = spec["table"]
    captured = CapturedTable(tuple(spec["keys"]), frozenset(spec["excluded"]), spec["declared"])
    result = BatchResult(end=piece.start)
    rows = BronzeRows([tuple(c) for c in spec["columns"]], spec["batch"], arrow_schema)
    judge = SliceFilter(params, table, spec["filter"]) if "filter" in spec else None
    events = scan_batch(params, piece, {table: captured}, result)
    try:
        for event in events:
            if table in result.skipped:
                # the planning pass saw every table map of the batch: it would have left the table out
                raise RuntimeError(f"slice {piece.key} of table {table}: {result.skipped[table]}")
            if judge is None:
                rows.add(event.names, event.changes, event.committed_at, event.txid)
            else:
                judge.add(event)
            if len(rows) >= ARROW_ROWS or (judge is not None and len(judge) >= ARROW_ROWS):
                if judge is not None:
                    judge.flush(rows)
                yield from rows.arrow().to_batches()
        if judge is not None:
            judge.flush(rows)
    finally:
        events.close()
        if judge is not None:
            judge.close()
    if len(rows):
        yield from rows.arrow().to_batches()


class SliceFilter:
    """A slice's changes of a filtered table, held until judged by the server in one call per ARROW_ROWS
    (ingest/sources/mysql/filters.py) and then added to bronze's rows as what they land as."""

    def __init__(self, params: ConnectionParams, table: str, spec: dict[str, Any]) -> None:
        from ingest.filters import RowFilter
        from ingest.sources.mysql.types import MySQLColumn

        self.table, self.row_filter, self.held = table, RowFilter(table, spec["where"]), []
        # a table dropped since: nothing to judge by, and its DROP empties silver (filters.filter_batch)
        self.dropped = spec.get("dropped", False)
        if not self.dropped:
            self.database, self.keys = spec["database"], spec["keys"]
            self.columns = [MySQLColumn(**c) for c in spec["columns"]]
            self.conn = params.connect()

    def __len__(self) -> int:
        return len(self.held)

    def add(self, event) -> None:
        self.held += event.records()

    def flush(self, rows) -> None:
        from ingest.changes import ChangeOp
        from ingest.sources.mysql.filters import filtered_records

        landed = ([r for r in self.held if r.op is ChangeOp.TRUNCATE] if self.dropped else filtered_records(
            self.conn, self.database, self.table, self.columns, self.keys, self.row_filter, self.held))
        for r in landed:
            names = tuple(r.row)
            before = None if r.before is None else [r.before.get(n) for n in names]
            rows.add(names, [(r.op, r.pos, list(r.row.values()), before)], r.committed_at, r.txid)
        self.held = []

    def close(self) -> None:
        if not self.dropped:
            self.conn.close()
