"""Reading one change batch from the binlog: [start, end), end fixed before the run.

A batch holds the transactions that begin in [start, end). Batch ends come
from SHOW MASTER STATUS, which always stands between transactions, so a batch
never splits one; when a requested end falls inside a transaction anyway, the
reader finishes that transaction and reports where it really ended.

Resuming by file and offset needs python-mysql-replication's MySQL mode
(`is_mariadb=False`, `resume_stream=True`): its MariaDB mode ignores
log_file/log_pos unless it resumes by GTID.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from ingest.changes import ChangeOp, ChangeRecord
from ingest.sources.mysql.ddl import captured_ddl
from ingest.sources.mysql.errors import (
    BatchBoundaryError, BinlogDisabled, BinlogGap, BinlogSettingsError, UnsupportedColumnType,
)
from ingest.sources.mysql.events import (
    CapturedTable, EventChanges, MappedColumn, TableDecoder, change_rows, emptied_tables,
)
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest.sources.mysql.schema import ConnectionParams
from ingest.sources.mysql.slices import Transaction

REQUIRED_SETTINGS = {"log_bin": "1", "binlog_format": "ROW", "binlog_row_image": "FULL",
                     "binlog_row_metadata": "FULL"}


def wrong_binlog_settings(conn) -> dict[str, str]:
    """The settings among REQUIRED_SETTINGS the server has otherwise, with their values ({} when fine)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata")
        values = dict(zip(REQUIRED_SETTINGS, (str(v).upper() for v in cur.fetchone())))
    return {k: v for k, v in values.items() if v != REQUIRED_SETTINGS[k]}


def check_binlog_settings(conn, source: str) -> None:
    """Refuse a server whose binlog cannot feed CDC, naming the setting and the fix."""
    bad = wrong_binlog_settings(conn)
    if bad:
        found = ", ".join(f"{k}={v}" for k, v in bad.items())
        raise BinlogSettingsError(
            f"source {source}: the binlog cannot feed CDC ({found}). Fix: run the server with --log-bin "
            "--binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL (SET GLOBAL works for "
            "the last three), then re-snapshot the tables, since changes logged before the fix cannot be read"
        )


def master_position(conn) -> BinlogPosition:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        if not row:
            raise BinlogDisabled(
                "the source server has binary logging off, so a snapshot has no position to resume changes from. "
                "Fix: start it with --log-bin --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL"
            )
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
    return BinlogPosition(row[0], int(row[1]), gtid or None)


def binary_logs(conn) -> list[tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(r[0], int(r[1])) for r in cur.fetchall()]


def binlog_expiry_seconds(conn) -> int:
    """How long the server keeps binlogs before purging them by itself; 0: it never does."""
    with conn.cursor() as cur:
        try:
            cur.execute("SELECT @@binlog_expire_logs_seconds")
            seconds = int(cur.fetchone()[0] or 0)
        except pymysql.err.MySQLError:  # servers before MySQL 8 / MariaDB 10.6 know only days
            seconds = 0
        if seconds:
            return seconds
        try:
            cur.execute("SELECT @@expire_logs_days")
            return int(float(cur.fetchone()[0] or 0) * 86_400)
        except pymysql.err.MySQLError:  # MySQL 8.4 removed it
            return 0


def check_available(conn, source: str, needed: BinlogPosition, tables: Sequence[str]) -> list[tuple[str, int]]:
    """The server's binlogs, after making sure `needed` is still among them."""
    logs = binary_logs(conn)
    files = {f: size for f, size in logs}
    fix = (f"Fix: re-snapshot the affected tables ({', '.join(tables)}) of source {source}: materialize "
           "their snapshot assets, and the next change batch starts from the new snapshot")
    if needed.file not in files:
        oldest = logs[0][0] if logs else "none"
        raise BinlogGap(
            f"source {source}: binlog {needed.file} (position {needed}) is no longer on the server "
            f"(oldest is {oldest}): it was purged or the server's binlog was reset. {fix}"
        )
    if needed.pos > files[needed.file]:
        raise BinlogGap(
            f"source {source}: position {needed} is past the end of {needed.file} ({files[needed.file]} bytes): "
            f"RESET MASTER or a different server behind the same address. {fix}"
        )
    return logs


@dataclass
class BatchResult:
    records: dict[str, list[ChangeRecord]] = field(default_factory=dict)
    decoders: dict[str, list[TableDecoder]] = field(default_factory=dict)
    end: BinlogPosition | None = None
    last_committed_at: dt.datetime | None = None
    last_gtid: str | None = None
    transactions: int = 0
    ddl: list[dict] = field(default_factory=list)
    """What DDL did to the captured tables (ddl.captured_ddl), never a statement's text."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Tables left out of this batch, with why (a column type outside the contract)."""
    touched: set[str] = field(default_factory=set)
    """Tables of ours with row events or a TRUNCATE in the batch (less those left out)."""
    truncates: dict[str, list[int]] = field(default_factory=dict)
    """The planning pass only: per table, the positions of its TRUNCATE records."""
    newest: dict[str, dt.datetime] = field(default_factory=dict)
    """The planning pass only: per table, when its newest change in the batch committed (from its
    table maps and TRUNCATEs): with `truncates`, what silver's merge asks of a batch it did not count."""
    oldest: dict[str, dt.datetime] = field(default_factory=dict)
    """The planning pass only: per table, when its oldest change in the batch committed."""

    def committed(self, table: str, at: dt.datetime) -> None:
        """The planning pass saw a change to `table` committed at `at`."""
        self.newest[table] = max(self.newest.get(table, at), at)
        self.oldest[table] = min(self.oldest.get(table, at), at)

    def skip(self, table: str, reason: str) -> None:
        """Leave a table out of the batch whole: none of its changes, so none is half-applied."""
        self.records.pop(table, None)
        self.decoders.pop(table, None)
        self.touched.discard(table)
        self.truncates.pop(table, None)
        self.newest.pop(table, None)
        self.oldest.pop(table, None)
        self.skipped[table] = reason


def _mapped_columns(columns) -> list[MappedColumn]:
    out = []
    for c in columns:
        binary = (c.character_set_name or "").lower() == "binary"
        out.append(MappedColumn(
            name=c.name, type_code=c.type, unsigned=bool(c.unsigned), binary=binary,
            precision=getattr(c, "precision", None), scale=getattr(c, "decimals", None),
            fsp=getattr(c, "fsp", None), bits=getattr(c, "bits", None),
            length=getattr(c, "max_length", None) if c.type == 254 and binary else None,
            members=tuple(c.set_values) if getattr(c, "set_values", None) else None,
        ))
    return out


def _read_labels_losslessly(self, length):
    """TableMapEvent._read_type_values (python-mysql-replication 1.0.x), keeping every ENUM and SET
    label: the library decodes them as UTF-8 and puts '' for one it cannot, so a latin1 column's
    label 'ü' became ''. Undecodable bytes are kept as surrogates here; labels_in_their_charset
    decodes them in the column's own character set."""
    result = []
    read_until = self.packet.read_bytes + length
    if self.packet.read_bytes >= read_until:
        return None
    while self.packet.read_bytes < read_until:
        count = self.packet.read_length_coded_binary()
        result.append([self.packet.read_variable_length_string().decode("utf-8", "surrogateescape")
                       for _ in range(count)])
    return result


def fix_library_decoding() -> None:
    """Two of python-mysql-replication's decoders replaced (1.0.x; the rows it reads itself, a table
    map rows.py does not compile, go through them): ENUM and SET labels kept whole, and TIME(fsp)
    values read as the server packs them (rows.time2)."""
    from pymysqlreplication.row_event import RowsEvent, TableMapEvent

    from ingest.sources.mysql.rows import time2

    TableMapEvent._read_type_values = _read_labels_losslessly
    RowsEvent._RowsEvent__read_time2 = lambda self, column: time2(self.packet.read(3 + (column.fsp + 1) // 2))


def labels_in_their_charset(columns) -> None:
    """A table map's ENUM and SET labels decoded in their column's character set (the binlog sends them
    in it), once per column object: rows events use their table map's columns."""
    from pymysqlreplication.row_event import RowsEvent

    for column in columns:
        if getattr(column, "labels_decoded", False):
            continue
        column.labels_decoded = True
        encoding = RowsEvent.charset_to_encoding(column.character_set_name or "utf8mb4")
        for attribute in ("enum_values", "set_values"):
            labels = getattr(column, attribute, None)
            if labels:
                setattr(column, attribute, [label.encode("utf-8", "surrogateescape").decode(encoding, "replace")
                                            for label in labels])


def reader_server_id() -> int:
    """Every binlog reader needs its own server_id; two readers sharing one evict each other."""
    return random.randint(1_000_000, 2_000_000_000)


class CompiledRows:
    """rows.py's readers of the table maps a stream has seen, compiled once per table map."""

    def __init__(self) -> None:
        self._readers: dict[int, tuple[Any, Any]] = {}

    def rows(self, event, update: bool, decoder: TableDecoder) -> list[Any] | None:
        """The event's rows as lists of contract values (`decoder`'s columns), or None: let the library
        read them (a type rows.py does not read, or a row image that is not FULL)."""
        from ingest.sources.mysql.rows import compile_rows

        columns = event.columns
        cached = self._readers.get(event.table_id)
        if cached is None or cached[0] is not columns:  # a new table map: the same id may be another table
            cached = (columns, compile_rows(columns, decoder.converts))
            self._readers[event.table_id] = cached
        reader = cached[1]
        full = (1 << event.number_of_columns) - 1
        bitmaps = [event.columns_present_bitmap, *([event.columns_present_bitmap2] if update else [])]
        if reader is None or len(columns) != event.number_of_columns or any(
                int.from_bytes(b, "little") & full != full for b in bitmaps):
            return None
        return reader.rows(event.packet.read(event.event_size - event.packet.read_bytes), update)


def read_batch(params: ConnectionParams, batch: BatchRange, tables: Mapping[str, CapturedTable | Sequence[str]],
               server_id: int | None = None, fast_rows: bool = True) -> BatchResult:
    """Decode the transactions that begin in [batch.start, batch.end) for `tables` (name: its key, or a
    CapturedTable). A table whose rows cannot be decoded is left out of the result and named in
    `skipped`, so that it does not hold back the others (see BatchResult.skip)."""
    result = BatchResult(end=batch.start)
    for event in scan_batch(params, batch, tables, result, server_id, fast_rows=fast_rows):
        if event.changes and event.table not in result.skipped:
            result.records.setdefault(event.table, []).extend(event.records())
    return result


def plan_batch(params: ConnectionParams, batch: BatchRange, tables: Mapping[str, CapturedTable | Sequence[str]],
               server_id: int | None = None) -> tuple[BatchResult, list[Transaction]]:
    """The planning pass over [batch.start, batch.end): row events are not decoded (their headers are
    read and skipped), so it costs the raw transfer. It gives everything a batch says of itself but its
    rows: the tables it touched (`touched`) with their columns (`decoders`, from the table maps), the
    tables it must leave out, its DDL, end, GTID and transactions; and where each transaction starts and
    how large it is, to cut slices (slices.cut_slices) that executors decode with `scan_batch`."""
    result = BatchResult(end=batch.start)
    transactions: list[Transaction] = []
    for event in scan_batch(params, batch, tables, result, server_id, transactions):
        for r in event.records():  # TRUNCATE records (the slice that holds the statement writes them): noted only
            result.truncates.setdefault(r.table, []).append(int(r.pos))
            result.committed(r.table, r.committed_at)
    return result, transactions


def scan_batch(params: ConnectionParams, batch: BatchRange, tables: Mapping[str, CapturedTable | Sequence[str]],
               result: BatchResult, server_id: int | None = None,
               transactions: list[Transaction] | None = None, fast_rows: bool = True) -> Iterator[EventChanges]:
    """Yield the changes of the transactions that begin in [batch.start, batch.end), one EventChanges per
    rows event (or TRUNCATE), for `tables`, noting in `result` what the batch says of itself as it goes.

    With `transactions` (the planning pass), row events are skipped unparsed and each transaction's
    start and size is appended there instead; tables are then known from their table maps.
    Rows are read by rows.py's compiled readers where they cover the table map (`fast_rows`), else by
    python-mysql-replication; both give the same values.
    A caller that stops early must close the generator (it closes the binlog stream).
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

    fix_library_decoding()
    key_columns = {t: CapturedTable.of(v) for t, v in tables.items()}
    planning = transactions is not None
    if batch.end <= batch.start:
        return
    stream = BinLogStreamReader(
        {"host": params.host, "port": params.port, "user": params.user, "passwd": params.password,
         "connect_timeout": params.connect_timeout},
        server_id=server_id or reader_server_id(), resume_stream=True, log_file=batch.start.file,
        log_pos=batch.start.pos, blocking=False, is_mariadb=False,
        ignored_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent] if planning else None,
    )
    decoders: dict[tuple[str, tuple], TableDecoder] = {}
    key_indexes: dict[int, list[int]] = {}  # per decoder (they live as long as the scan)
    compiled = CompiledRows()
    current_file = batch.start.file
    in_trx = False
    seen_event = False
    gtid = None
    last = batch.start  # where the event before the current one ended
    begun: BinlogPosition | None = None  # where the current transaction's GTID event starts

    def decoder_for(table: str, columns) -> TableDecoder | None:
        """The table's decoder for this table map (None: the table is left out of the batch)."""
        if table in result.skipped:
            return None
        signature = tuple((c.name, c.type, c.unsigned, c.character_set_name) for c in columns)
        decoder = decoders.get((table, signature))
        if decoder is None:
            try:
                decoder = TableDecoder.from_table_map(table, _mapped_columns(columns), key_columns[table])
            except UnsupportedColumnType as exc:
                result.skip(table, str(exc))
                return None
            decoders[(table, signature)] = decoder
            result.decoders.setdefault(table, []).append(decoder)
        result.touched.add(table)
        return decoder

    try:
        for event in stream:
            if isinstance(event, RotateEvent):
                current_file = event.next_binlog
                continue
            end_pos = BinlogPosition(current_file, event.packet.log_pos) if event.packet.log_pos else None
            if end_pos is None:
                continue  # artificial events (format description after a rotate) have no position
            if isinstance(event, MariadbGtidEvent):
                if not in_trx and end_pos > batch.end:
                    # Batch ends stand between transactions, so a GTID event that ends
                    # past one began at or after it: the transaction is the next batch's.
                    break
                in_trx, gtid, seen_event = True, event.gtid, True
                # a GTID event follows the previous event in its file (a rotation starts the file anew)
                begun = last if last.file == current_file else BinlogPosition(current_file, end_pos.pos - event.event_size)
                last = end_pos
                continue
            last = end_pos
            if not seen_event and isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                raise BatchBoundaryError(
                    f"batch {batch.key} starts inside a transaction (a rows event came before any GTID "
                    "event): batch starts must be positions from SHOW MASTER STATUS or earlier batch ends"
                )
            committed_at = dt.datetime.fromtimestamp(event.timestamp, dt.timezone.utc)
            if isinstance(event, TableMapEvent):
                labels_in_their_charset(event.columns)
                if planning and event.schema == params.database and event.table in key_columns:
                    if decoder_for(event.table, event.columns) is not None:
                        result.committed(event.table, committed_at)
            elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                if event.schema != params.database or event.table not in key_columns:
                    continue
                decoder = decoder_for(event.table, event.columns)
                if decoder is None:
                    continue
                kind = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}[type(event)]
                update = kind == "update"
                rows = compiled.rows(event, update, decoder) if fast_rows else None
                if rows is None:
                    rows = decoder.library_rows(event.rows, update)
                # the key silver merges on (the library's primary_key is a bare string for one column)
                key_index = key_indexes.get(id(decoder))
                if key_index is None:
                    key_index = key_indexes[id(decoder)] = decoder.key_index(key_columns[event.table].keys)
                yield EventChanges(event.table, decoder.names, change_rows(kind, rows, key_index, end_pos),
                                   committed_at, gtid)
            elif isinstance(event, QueryEvent):
                query = event.query if isinstance(event.query, str) else event.query.decode("utf-8", "replace")
                if query.strip().upper() in ("BEGIN", "COMMIT"):
                    if query.strip().upper() == "COMMIT":
                        in_trx = False
                        result.transactions += 1
                else:
                    # DDL: MariaDB logs it as its own GTID transaction with no XID
                    in_trx = False
                    result.transactions += 1
                    yield from _note_ddl(result, event, query, params.database, key_columns, end_pos,
                                         committed_at, gtid)
            elif isinstance(event, XidEvent):
                in_trx = False
                result.transactions += 1
            if not in_trx and begun is not None and transactions is not None:
                size = end_pos.pos - begun.pos if end_pos.file == begun.file else end_pos.pos
                transactions.append(Transaction(begun, size))
                begun = None
            result.end = end_pos
            result.last_committed_at = committed_at
            result.last_gtid = gtid
            if not in_trx and end_pos >= batch.end:
                break
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == 1236:
            raise BinlogGap(
                f"the server cannot send binlog from {batch.start} ({exc.args[-1]}): it was purged or reset. "
                "Fix: re-snapshot the affected tables; the next change batch starts from the new snapshot"
            ) from None
        raise
    finally:
        stream.close()
    if result.end < batch.end and not in_trx:
        result.end = batch.end  # nothing of ours between the last event and the requested end


def _note_ddl(result, event, query, database, key_columns, end_pos, committed_at, gtid) -> Iterator[EventChanges]:
    """TRUNCATE and DROP TABLE of a tracked table empty it: a TRUNCATE record at this position."""
    schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
    # what the statement did to a captured table, never its text: a binlog holds every statement of
    # every database, account statements with passwords among them (see ddl.py)
    result.ddl.extend(captured_ddl(query, schema, database, key_columns))
    for table in emptied_tables(query, schema, database):
        if table in key_columns and table not in result.skipped:
            result.touched.add(table)
            yield EventChanges(table, (), [(ChangeOp.TRUNCATE, end_pos.row_pos(1), [], None)], committed_at, gtid)


def keys_changed(params, schema, batch: BatchRange) -> set[tuple]:
    """The primary keys of `schema`'s table that row events in `batch` touched (before and after images)."""
    keys = list(schema.primary_key)
    records = read_batch(params, batch, {schema.table: keys}).records.get(schema.table, [])
    out: set[tuple] = set()
    for r in records:
        for image in (r.row, r.before):
            if image:
                out.add(tuple(image.get(k) for k in keys))
    return out
