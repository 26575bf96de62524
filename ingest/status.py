"""`ingest status`: where each table stands, read from the Delta log (and the source, when it answers).

The Delta log is the record of what is committed (DESIGN principle 1), so
this reads it rather than Dagster's event log: a run that committed and died
before its Dagster event still shows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from ingest.sources.mysql.positions import BinlogPosition

COLUMNS = ("source", "table", "snapshot", "last batch", "committed through", "silver merged", "behind head",
           "headroom")


@dataclass(frozen=True)
class TableStatus:
    source: str
    table: str
    snapshot: str
    last_batch: str
    committed_through: str
    silver_merged: str
    behind_head: str
    headroom: str

    def cells(self) -> tuple[str, ...]:
        return (self.source, self.table, self.snapshot, self.last_batch, self.committed_through,
                self.silver_merged, self.behind_head, self.headroom)


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


def behind(head: BinlogPosition, end: BinlogPosition) -> str:
    """How far the binlog head is past what is committed (pure)."""
    if head.seq > end.seq:
        return f"{head.seq - end.seq} binlog file(s)"
    return f"{max(0, head.pos - end.pos)} bytes"


def headroom(oldest_log: str, end: BinlogPosition, expiry_seconds: int | None = None) -> str:
    """Binlog files the server may purge before the next batch's start is gone (pure). A server that
    never expires binlogs purges only by hand: "0 file(s)" there is no alarm, so it says so."""
    oldest = BinlogPosition(oldest_log, 4)
    if oldest.seq > end.seq:
        return "GONE: purged past the committed end; re-snapshot"
    kept = f"{end.seq - oldest.seq} file(s)"
    if expiry_seconds == 0:
        return f"no expiry set ({kept} before)"
    if expiry_seconds:
        return f"{kept}, expiry {expiry_seconds / 86_400:g} d" if expiry_seconds >= 86_400 else \
            f"{kept}, expiry {expiry_seconds / 3600:g} h"
    return kept


def table_status(lake_root: str, name: str, table: str, source_state, binlog: bool, lsn: bool = False) -> TableStatus:
    """One table: `source_state` is a MySQL source's (binlog head, oldest binlog, expiry), a PostgreSQL
    source's (WAL head, slot headroom text), or a text to show instead (the source did not answer; a
    DynamoDB source). `binlog`: positions are binlog positions (MySQL); `lsn`: LSNs (PostgreSQL); a
    DynamoDB source's are per-shard checkpoints, not shown here."""
    from ingest.lake.deltalog import last_commit
    from ingest.lake.tables import table_location

    now = dt.datetime.now()  # Delta's history timestamps are local, naive
    snap = last_commit(table_location(lake_root, name, table, "snapshot"), kind="snapshot")
    bronze = last_commit(table_location(lake_root, name, table, "bronze"), kind="bronze")
    silver = last_commit(table_location(lake_root, name, table, "silver"), kind="silver")
    snapshot = "-" if snap is None else (
        f"{snap.metadata['snapshot_id']} {'complete' if snap.metadata.get('complete') else 'UNFINISHED'} "
        f"({ago(snap.timestamp, now)})")
    end = None
    if binlog:
        recorded = bronze.metadata["end"] if bronze else snap.metadata["log_start"] if snap else None
        end = BinlogPosition.from_metadata(recorded) if recorded else None
    if lsn:
        from ingest.sources.postgres.positions import Lsn

        recorded = bronze.metadata["end"] if bronze else snap.metadata["log_start"] if snap else None
        end = Lsn.from_metadata(recorded) if recorded else None
    if isinstance(source_state, str):
        head_text, room = source_state, "-"
    elif end is None:
        head_text, room = "-", "-"
    elif lsn:
        head, room = source_state
        head_text = f"{max(0, head.value - end.value):,} bytes of WAL"
    else:
        head, oldest, expiry = source_state
        head_text, room = behind(head, end), headroom(oldest, end, expiry)
    return TableStatus(
        name, table, snapshot,
        f"{bronze.metadata['batch']} ({ago(bronze.timestamp, now)})" if bronze else "-",
        "-" if end is None else str(end) if lsn else f"{end.file}:{end.pos}",
        ago(silver.timestamp, now) if silver else "-",
        head_text, room)


def source_position(source) -> tuple[BinlogPosition, str, int] | str:
    """The binlog head, oldest binlog and binlog expiry (seconds) of a MySQL source, or why they could
    not be read."""
    from ingest.sources.mysql.binlog import binary_logs, binlog_expiry_seconds, master_position
    from ingest.sources.mysql.schema import connection_params

    try:
        with connection_params(source).connect() as conn:
            return master_position(conn), binary_logs(conn)[0][0], binlog_expiry_seconds(conn)
    except Exception as exc:  # noqa: BLE001 - shown in the table instead of stopping it
        return f"source unreachable ({exc.__class__.__name__})"


def slot_position(name: str, source) -> tuple | str:
    """A PostgreSQL source's WAL head and its slot's headroom, or why they could not be read."""
    from ingest.checks import slot_headroom
    from ingest.defs.postgres import pg_params
    from ingest.sources.postgres.cdc import slot_row
    from ingest.sources.postgres.slot import current_lsn

    try:
        with pg_params(source).connect() as conn:
            row, head = slot_row(conn, source.slot_name(name)), current_lsn(conn)
    except Exception as exc:  # noqa: BLE001 - shown in the table instead of stopping it
        return f"source unreachable ({exc.__class__.__name__})"
    if row is None:
        return head, slot_headroom(source.slot_name(name), None, 0, None).description
    _, wal_status, _, retained, safe, _ = row
    verdict = slot_headroom(source.slot_name(name), wal_status, int(retained or 0), None if safe is None else int(safe))
    return head, verdict.description
