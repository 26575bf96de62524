"""Planning and reading change batches: what the sensor and the changes asset call."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ingest.changes import SourceBatch, TableChanges
from ingest.sources.mysql.binlog import (
    binary_logs, check_available, check_binlog_settings, master_position, plan_batch, read_batch,
)
from ingest.retry import retrying
from ingest.sources.mysql.errors import BinlogGap, SourceUnreachable, is_transient
from ingest.sources.mysql.events import CapturedTable
from ingest.sources.mysql.positions import BatchRange, BinlogPosition, split_binlog_file
from ingest.sources.mysql.schema import ConnectionParams
from ingest.sources.mysql.slices import SLICE_BYTES, cut_slices

PARALLEL_MIN_BYTES = 2 * 2**20
"""A batch with this much binlog or more is decoded on Spark's executors, slice by slice; a smaller one
here, where it costs no Spark job to start (most sensor batches are a few KiB)."""

T = TypeVar("T")


@dataclass(frozen=True)
class BatchPlan:
    batch: BatchRange | None
    reason: str


def plan_next_batch(last_end: BinlogPosition | None, first_start: BinlogPosition | None, head: BinlogPosition,
                    logs: Sequence[str], max_files: int) -> BatchPlan:
    """The next batch from the last end (or the snapshots' log start) to the head (pure).

    Contiguous by construction: a batch starts where the last one ended. A
    backlog longer than `max_files` binlog files is cut at a file start, which
    is always between transactions.
    """
    start = last_end or first_start
    if start is None:
        return BatchPlan(None, "no snapshot yet: materialize the snapshot assets; change batches start from them")
    if head < start:
        raise BinlogGap(f"binlog head {head} is before {'the last batch end' if last_end else 'the snapshot log start'} "
                        f"{start}: RESET MASTER, or another server behind the same address. "
                        "Fix: re-snapshot the source's tables")
    if head == start and last_end is not None:
        return BatchPlan(None, f"binlog head at {head}: nothing new since the last batch")
    end = head
    if head.seq - start.seq >= max_files:
        base = start.basename
        later = sorted(split_binlog_file(f)[1] for f in logs if split_binlog_file(f)[1] > start.seq)
        cut = later[max_files - 1] if len(later) >= max_files else head.seq
        end = min(head, BinlogPosition(f"{base}.{cut:06d}", 4))
    return BatchPlan(BatchRange(start, end), "")


@dataclass(frozen=True)
class SourceState:
    head: BinlogPosition
    logs: list[str]
    tables: list[str]
    """Base tables that exist in the source database now."""


def source_state(params: ConnectionParams, source: str) -> SourceState:
    """What the sensor polls: settings checked, the binlog head, the binlogs and the tables."""
    from ingest.sources.mysql.schema import list_tables

    with params.connect() as conn:
        check_binlog_settings(conn, source)
        head = master_position(conn)
        logs = [f for f, _ in binary_logs(conn)]
        tables = list_tables(conn, params.database)
    return SourceState(head, logs, tables)


def check_server_identity(source: str, previous: int | None, current: int) -> None:
    """Positions only mean something on the server that wrote them (pure)."""
    if previous is not None and previous != current:
        raise BinlogGap(
            f"source {source}: the server's identity changed (server_id {previous} wrote the earlier batches, "
            f"{current} answers now): a failover or another server behind the same address, whose binlog "
            "positions do not continue the old ones. Fix: re-snapshot the source's tables"
        )


def retry_batch_read(read: Callable[[], T], source: str, batch_key: str, params: ConnectionParams,
                     attempts: int = 6) -> T:
    """Run a batch's read again when the connection drops or the server restarts mid-read.

    The range is fixed and nothing is written while reading, so reading the
    whole range again is safe; after `attempts` it fails naming the source.
    """
    def give_up(exc: BaseException, tries: int) -> SourceUnreachable:
        return SourceUnreachable(
            f"source {source}: batch {batch_key} lost its connection to {params.host}:{params.port} {tries} times "
            f"({exc}). Fix: check the server; the batch re-reads its whole range when run again, nothing of it "
            "was written", code=getattr(exc, "code", None))

    return retrying(read, is_transient, give_up, attempts=attempts, base_delay=0.5)


def read_change_batch(params: ConnectionParams, source: str, batch_key: str,
                      key_columns: Mapping[str, CapturedTable | Sequence[str]],
                      all_tables: Sequence[str] | None = None,
                      previous_server_id: int | None = None,
                      skipped: Mapping[str, str] | None = None,
                      parallel_min_bytes: int = PARALLEL_MIN_BYTES,
                      slice_bytes: int = SLICE_BYTES) -> SourceBatch:
    """Read one batch for the tables in `key_columns` (name: CapturedTable or key): the changes of each
    table of `all_tables` (tables with no key known get none). Tables in `skipped` (already
    known to be unreadable) and tables whose rows cannot be decoded get none, and are named in the
    result's `skipped`.

    A batch of at least `parallel_min_bytes` of binlog is only planned here: the result names the
    tables it touched with their columns (`sliced`) and the slices (`slices`) that Spark's executors
    decode (ingest/adapters/mysql.py), so no row of it is held in this process."""
    skipped = dict(skipped or {})
    tables = sorted(t for t in (all_tables or key_columns) if t not in skipped)
    with params.connect() as conn:
        check_binlog_settings(conn, source)
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id")
            server_id = int(cur.fetchone()[0])
        check_server_identity(source, previous_server_id, server_id)
        head = master_position(conn)
        batch = BatchRange.from_key(batch_key, head.basename)
        logs = check_available(conn, source, batch.start, sorted(key_columns))
    if head < batch.end:
        raise BinlogGap(
            f"source {source}: batch {batch_key} ends at {batch.end}, past the binlog head {head}: the binlog was "
            "reset (RESET MASTER) or this is another server. Fix: re-snapshot the source's tables"
        )
    readable = {t: v for t, v in key_columns.items() if t not in skipped}
    sliced = range_bytes(batch, logs) >= parallel_min_bytes
    if sliced:
        # large: plan here (headers and table maps only), decode on Spark's executors, slice by slice
        result, transactions = plan_batch(params, batch, readable)
        slices = cut_slices(batch.start, result.end or batch.end, transactions, slice_bytes)
    else:
        result, slices = read_batch(params, batch, readable), []
    skipped.update(result.skipped)
    now = dt.datetime.now(dt.timezone.utc)
    oldest = BinlogPosition(logs[0][0], 4)
    positions: dict[str, Any] = {
        "start": batch.start.to_metadata(), "end": (result.end or batch.end).to_metadata(),
        "requested_end": batch.end.to_metadata(), "last_gtid": result.last_gtid,
        "transactions": result.transactions, "server_id": server_id,
    }
    extra: dict[str, Any] = {
        "lag_seconds": round((now - result.last_committed_at).total_seconds(), 3) if result.last_committed_at else 0.0,
        "oldest_binlog": oldest.file,
        # how many binlog files the server may still purge before this batch's start is lost
        "retention_headroom_files": batch.start.seq - oldest.seq,
        "ddl": result.ddl,
        **({"slices": len(slices)} if sliced else {}),
    }
    # every table of ours, as a batch read here gives them: the untouched ones without changes
    changes = {t: TableChanges(result.records.get(t, []), columns_of(result.decoders.get(t, [])),
                               sliced=sliced and t in result.touched, truncates=tuple(result.truncates.get(t, ())),
                               newest=result.newest.get(t), oldest=result.oldest.get(t))
               for t in tables if t not in skipped}
    return SourceBatch(batch_key, changes, positions, extra, skipped, [s.to_metadata() for s in slices])


def range_bytes(batch: BatchRange, logs: Sequence[tuple[str, int]]) -> int:
    """Binlog bytes in [batch.start, batch.end), from the files' sizes (SHOW BINARY LOGS) (pure)."""
    if batch.start.file == batch.end.file:
        return batch.end.pos - batch.start.pos
    sizes = {f: size for f, size in logs}
    inside = [f for f in sizes if batch.start.seq < split_binlog_file(f)[1] < batch.end.seq]
    return (sizes.get(batch.start.file, batch.start.pos) - batch.start.pos + sum(sizes[f] for f in inside)
            + batch.end.pos)


def columns_of(decoders: Sequence) -> list[tuple[str, str]]:
    """Every column seen in the batch, first seen first; a later table map's type wins."""
    seen: dict[str, str] = {}
    for decoder in decoders:
        for name, spark_type in decoder.signature:
            seen[name] = spark_type
    return list(seen.items())
