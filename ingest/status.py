"""`ingest status`: where each table stands, read from the Delta log (and the source, when it answers).

The Delta log is the record of what is committed (DESIGN principle 1), so
this reads it rather than Dagster's event log: a run that committed and died
before its Dagster event still shows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.sources.mysql.positions import BinlogPosition

COLUMNS = ("source", "table", "snapshot", "last batch", "committed through", "silver merged", "changes waiting",
           "headroom")


@dataclass(frozen=True)
class TableStatus:
    source: str
    table: str
    snapshot: str
    last_batch: str
    committed_through: str
    silver_merged: str
    waiting: str
    headroom: str

    def cells(self) -> tuple[str, ...]:
        return (self.source, self.table, self.snapshot, self.last_batch, self.committed_through,
                self.silver_merged, self.waiting, self.headroom)


def format_table(rows: Sequence[TableStatus]) -> str:
    """A plain text table, one line per source table (pure)."""
    cells = [COLUMNS, *(r.cells() for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def ago(when: dt.datetime | None, now: dt.datetime) -> str:
    """'12 s ago', '5 min ago', '3 h ago' (pure)."""
    if when is None:
        return "-"
    seconds = max(0, int((now - when).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def covered_through(own: Any, logged: Iterable[tuple[Any, Collection[str]]], table: str) -> Any:
    """Where a table's changes are in the lake through (pure): its own newest end (bronze's, else its
    snapshot's log start), or later, the newest end of the source's batch log (`logged`: (end, tables
    left out) newest first), since a logged batch applied every change it held and the tables it did
    not name had none. Not past a batch that left the table out: its changes there are not in."""
    newest = None
    for end, skipped in logged:
        if end <= own:
            break
        if table in skipped:
            return own
        newest = newest or end
    return newest or own


def pending(unread_bytes: int, touched: Collection[str] | None, table: str) -> bool | None:
    """Whether the source has changes for `table` that the lake lacks (pure): `unread_bytes` of its log
    after the table's committed position, `touched` the tables changed there (None: not known)."""
    if unread_bytes <= 0:
        return False
    return None if touched is None else table in touched


def waiting(unread_bytes: int, touched: Collection[str] | None, table: str, log: str) -> str:
    """The "changes waiting" cell (pure): see `pending`."""
    answer = pending(unread_bytes, touched, table)
    if answer is False:
        return "none"
    return f"{'yes' if answer else 'unknown'}: {unread_bytes:,} bytes of {log} not read yet"


def binlog_bytes(logs: Sequence[tuple[str, int]], start: BinlogPosition, head: BinlogPosition) -> int:
    """Bytes of binlog from `start` to `head` (pure), from SHOW BINARY LOGS' (file, size)."""
    total = 0
    for name, size in logs:
        seq = BinlogPosition(name, 4).seq
        if start.seq <= seq <= head.seq:
            first = start.pos if seq == start.seq else 4  # every file starts with a 4-byte magic number
            last = head.pos if seq == head.seq else size
            total += max(0, last - first)
    return total


def headroom(oldest_log: str, end: BinlogPosition, expiry_seconds: int | None = None) -> str:
    """Binlog files the server may purge before the next batch's start is gone (pure). A server that
    never expires binlogs purges only by hand: "0 file(s)" there is no alarm, so it says so."""
    oldest = BinlogPosition(oldest_log, 4)
    if oldest.seq > end.seq:
        return "GONE: purged past the committed end; re-snapshot"
    kept = f"{end.seq - oldest.seq} older binlog file(s)"
    if expiry_seconds == 0:
        return f"{kept}; the server purges none by itself"
    if expiry_seconds:
        return f"{kept}; purged after {expiry_seconds / 86_400:g} d" if expiry_seconds >= 86_400 else \
            f"{kept}; purged after {expiry_seconds / 3600:g} h"
    return kept


@dataclass(frozen=True)
class Committed:
    """What the lake says of one table, read from its Delta logs."""

    source: str
    table: str
    snapshot: str
    last_batch: str
    silver_merged: str
    end: Any
    """Where the table's changes are in the lake through (see covered_through); None before its snapshot."""


def committed(lake_root: str, name: str, table: str, parse: Callable[[Any], Any] | None,
              logged: Sequence[tuple[Any, Collection[str]]]) -> Committed:
    """One table as its Delta logs say; `parse` reads a recorded position (None: a DynamoDB source,
    whose positions are per-shard checkpoints, not shown here)."""
    from ingest.lake.deltalog import last_commit
    from ingest.lake.tables import table_location

    now = dt.datetime.now()  # Delta's history timestamps are local, naive
    snap = last_commit(table_location(lake_root, name, table, "snapshot"), kind="snapshot")
    bronze = last_commit(table_location(lake_root, name, table, "bronze"), kind="bronze")
    silver = last_commit(table_location(lake_root, name, table, "silver"), kind="silver")
    snapshot = "-" if snap is None else (
        f"{snap.metadata['snapshot_id']} {'complete' if snap.metadata.get('complete') else 'UNFINISHED'} "
        f"({ago(snap.timestamp, now)})")
    recorded = bronze.metadata["end"] if bronze else snap.metadata["log_start"] if snap else None
    end = None
    if parse is not None and recorded:
        own = parse(recorded)
        if snap is not None and snap.metadata.get("complete"):
            own = max(own, parse(snap.metadata["log_start"]))
        end = covered_through(own, logged, table)
    return Committed(name, table, snapshot,
                     f"{bronze.metadata['batch']} ({ago(bronze.timestamp, now)})" if bronze else "-",
                     ago(silver.timestamp, now) if silver else "-", end)


def logged_ends(lake_root: str, name: str, parse: Callable[[Any], Any], look_back: int = 200
                ) -> list[tuple[Any, Collection[str]]]:
    """(end, tables left out) of the source's newest logged batches, newest first."""
    from itertools import islice

    from ingest.lake.batchlog import logged_batches
    from ingest.lake.tables import source_batch_log_location

    return [(parse(b.end), set(b.skipped)) for b in islice(logged_batches(source_batch_log_location(lake_root, name)),
                                                          look_back)]


@dataclass(frozen=True)
class SourceView:
    """What a source says of the tables of one source, asked once per source."""

    unread: Callable[[Any], tuple[int, Collection[str] | None]]
    """A table's committed end -> (bytes of log after it, the tables changed there or None: not known)."""
    log: str
    """What the bytes are of: "binlog", "WAL"."""
    headroom: Callable[[Any], str]
    name: Callable[[str], str]
    """A table as `unread` names it (PostgreSQL: schema.table)."""

    def pending(self, end: Any, table: str) -> bool | None:
        """Whether the source has changes for `table` after `end` (None: not known)."""
        unread, touched = self.unread(end)
        return pending(unread, touched, self.name(table))


def row(table: Committed, view: SourceView | str) -> TableStatus:
    """One line: what the lake says, and what the source says past it (`view`, or why it could not)."""
    if isinstance(view, str):
        wait, room = view, "-"
    elif table.end is None:
        wait, room = "-", "-"
    else:
        wait, room = waiting(*view.unread(table.end), view.name(table.table), view.log), view.headroom(table.end)
    return TableStatus(table.source, table.table, table.snapshot, table.last_batch,
                       "-" if table.end is None else str(table.end) if not isinstance(table.end, BinlogPosition)
                       else f"{table.end.file}:{table.end.pos}", table.silver_merged, wait, room)


def unreachable(exc: BaseException) -> str:
    """The cell of a source that could not be asked: a missing secret names its variable."""
    from ingest.config import MissingSecret

    if isinstance(exc, MissingSecret):
        return f"not asked: {exc.env} is not set"
    return f"source unreachable ({exc.__class__.__name__})"


def binlog_view(source, ends: Collection[BinlogPosition]) -> SourceView | str:
    """A MySQL source's binlog past each of `ends`: which tables it changes (SHOW BINLOG EVENTS, as the
    sensor asks), how many bytes, and the files the server may purge."""
    from ingest.sources.mysql.binlog import binary_logs, binlog_expiry_seconds, master_position
    from ingest.sources.mysql.peek import peek_batch_tables
    from ingest.sources.mysql.positions import BatchRange
    from ingest.sources.mysql.schema import connection_params

    try:
        with connection_params(source).connect() as conn:
            head, logs, expiry = master_position(conn), binary_logs(conn), binlog_expiry_seconds(conn)
            touched = {end: peek_batch_tables(conn, source.database, BatchRange(end, head), [f for f, _ in logs])
                       for end in set(ends) if end < head}
    except Exception as exc:  # noqa: BLE001 - shown in the table instead of stopping it
        return unreachable(exc)
    return SourceView(lambda end: (binlog_bytes(logs, end, head), touched.get(end)), "binlog",
                      lambda end: headroom(logs[0][0], end, expiry), lambda table: table)


def slot_view(name: str, source) -> SourceView | str:
    """A PostgreSQL source's WAL past the committed ends: which tables its slot holds changes for (a
    peek, as the sensor's), how many bytes, and the slot's headroom."""
    from ingest.adapters.postgres import PgParams
    from ingest.checks import slot_headroom
    from ingest.sources.postgres.cdc import slot_row
    from ingest.sources.postgres.slot import current_lsn, peek_batch_tables

    slot = source.slot_name(name)
    try:
        with PgParams.of(source).connect() as conn:
            found, head = slot_row(conn, slot), current_lsn(conn)
            peeked = peek_batch_tables(conn, slot, source.publication, head).tables if found else None
    except Exception as exc:  # noqa: BLE001 - shown in the table instead of stopping it
        return unreachable(exc)
    if found is None:
        verdict = slot_headroom(slot, None, 0, None)
    else:
        _, wal_status, _, retained, safe, _ = found
        verdict = slot_headroom(slot, wal_status, int(retained or 0), None if safe is None else int(safe))
    return SourceView(lambda end: (head.value - end.value, peeked), "WAL", lambda end: verdict.description,
                      source.qualified)


def source_position(source) -> tuple[BinlogPosition, str, int] | str:
    """The binlog head, oldest binlog and binlog expiry (seconds) of a MySQL source, or why they could
    not be read."""
    from ingest.sources.mysql.binlog import binary_logs, binlog_expiry_seconds, master_position
    from ingest.sources.mysql.schema import connection_params

    try:
        with connection_params(source).connect() as conn:
            return master_position(conn), binary_logs(conn)[0][0], binlog_expiry_seconds(conn)
    except Exception as exc:  # noqa: BLE001 - shown instead of stopping
        return unreachable(exc)


def source_is_ahead(source, end: BinlogPosition | None, table: str) -> bool:
    """Whether a MySQL source has changes to `table` after `end` (unknown counts as ahead)."""
    if end is None:
        return True
    view = binlog_view(source, [end])
    return isinstance(view, str) or view.pending(end, table) is not False
