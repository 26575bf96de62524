"""A logical replication slot read through SQL: peek up to a fixed LSN, advance after the lake commits.

`pg_logical_slot_peek_binary_changes` decodes from the slot's confirmed position without consuming
anything, and its `upto_lsn` stops after the last transaction that commits before that LSN, so a
batch holds whole transactions and a re-read returns the same ones. Only
`pg_replication_slot_advance`, called after the batch's bronze commit, lets the server release WAL:
the slot never lets go of changes the lake lacks. A plain connection is enough (no replication
protocol), through a server-side cursor so that no batch is held whole in memory.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ingest.sources.postgres.positions import Lsn

PEEK_FETCH = 2000
"""Messages fetched per round trip of the server-side cursor."""

PEEK_MAX_MESSAGES = 5000
"""Messages the sensor decodes at most to tell which tables a batch touches: a larger batch names every
table, whose cost is then small against the batch's own."""

PEEK_SECONDS = 10.0
"""How long the sensor lets the server decode for a peek. The decoder stops only at a transaction's end, and
one transaction of tens of millions of rows takes minutes (2.3 s a million rows here): unbounded, such a
peek outlasts the sensor's tick (Dagster cancels a tick after 60 s), on every tick, and no batch ever runs."""


SLOT_BUSY_SECONDS = 60.0
"""How long a read waits while another session decodes from the slot (a check's peek, a reconciliation):
the server lets one session at a time use a slot and refuses the others at once."""


class SlotBusy(RuntimeError):
    """The slot stayed in use by another session for longer than a read waits."""


def _wait_for_slot(slot: str, deadline: float, waited: float, exc: Exception) -> None:
    """Sleep a little before trying the slot again, or raise SlotBusy once past `deadline`."""
    if time.monotonic() >= deadline:
        raise SlotBusy(f"replication slot {slot!r} stayed in use by another session for {waited:.0f} s ({exc}). "
                       "A slot serves one session at a time: find the other one in pg_stat_replication or "
                       "pg_replication_slots.active_pid; a batch that failed on this runs again on its own") from exc
    time.sleep(0.2)


_PEEK_SQL = ("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
             "'proto_version', '1', 'publication_names', %s)")

# 73, 85, 68, 78: 'I', 'U', 'D' and an UPDATE's 'N' (its new row, no old key before it). A window with no
# ORDER BY takes its rows in the function's order, which `n` keeps for the rows that are left. A value an
# UPDATE did not send is a 'u' (117) followed by the next value's kind ('n', 'u', 't', 'b') or the message's
# end: an UPDATE with none of those bytes has no such value (text that holds them only makes it come).
_PLAN_PEEK_SQL = r"""
SELECT data FROM (
    SELECT n, data, get_byte(data, 0) AS kind, substring(data FROM 2 FOR 4) AS oid,
           lag(CASE WHEN get_byte(data, 0) IN (73, 85, 68) THEN substring(data FROM 2 FOR 4) END) OVER () AS previous
    FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', %s)
         WITH ORDINALITY AS m(lsn, xid, data, n)) m
WHERE kind NOT IN (73, 85, 68) OR previous IS DISTINCT FROM oid
   OR kind = 85 AND (get_byte(data, 5) <> 78 OR get_byte(data, length(data) - 1) = 117
                     OR position('\x756e'::bytea IN data) > 0 OR position('\x7575'::bytea IN data) > 0
                     OR position('\x7574'::bytea IN data) > 0 OR position('\x7562'::bytea IN data) > 0)
ORDER BY n"""


def peek(conn, slot: str, publication: str, upto: Lsn | None = None,
         wait_seconds: float = SLOT_BUSY_SECONDS) -> Iterator[bytes]:
    """The pgoutput messages of the transactions committed before `upto` (None: all there are now);
    while another session uses the slot, tried again for up to `wait_seconds`."""
    return _peek(conn, slot, _PEEK_SQL, (slot, None if upto is None else str(upto), publication), wait_seconds)


def peek_runs(conn, slot: str, publication: str, upto: Lsn, wait_seconds: float = SLOT_BUSY_SECONDS
              ) -> Iterator[bytes]:
    """What peek gives, less the row changes a batch's plan has no use for, left out by the server: of each
    run of INSERTs, UPDATEs and DELETEs of one relation in a row only the first comes, and every UPDATE
    that sent an old key or row or may have left a TOASTed value unsent. The server decodes as much; the
    plan of a batch of 445k-875k changes took 3.1-5.7 s from peek, 2.0-2.9 s from this
    (docs/performance.md)."""
    return _peek(conn, slot, _PLAN_PEEK_SQL, (slot, str(upto), publication), wait_seconds)


def _peek(conn, slot: str, sql: str, params: tuple, wait_seconds: float) -> Iterator[bytes]:
    import psycopg

    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            # a server-side cursor lives in one transaction; binary: the messages as they are, not in hex
            with conn.transaction(), conn.cursor(name=f"peek_{slot}", binary=True) as cur:
                cur.itersize = PEEK_FETCH
                cur.execute(sql, params)
                first = cur.fetchmany(PEEK_FETCH)  # the server decodes the whole range here, holding the slot
                yield from (bytes(data) for (data,) in first)
                for (data,) in cur:
                    yield bytes(data)
            return
        except psycopg.errors.ObjectInUse as exc:  # only before the first message: the slot is free after
            _wait_for_slot(slot, deadline, wait_seconds, exc)


class SlotCopyRefused(RuntimeError):
    """The server cannot make a reader's temporary copy of the source's slot: no replication slot is
    free, or it is older than PostgreSQL 12."""


def reading_copy(conn, source: str, slot: str) -> str:
    """A temporary copy of `slot`, dropped when this session ends: at the same position, so it gives the
    same changes, while another session reads the slot itself (the server lets one session at a time
    use a slot). Its name. SlotCopyRefused when the server has no slot free for it, or cannot copy one."""
    import os
    import secrets

    import psycopg

    name = f"{slot[:40]}_r{os.getpid()}_{secrets.token_hex(3)}"  # at most 63 characters
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)", (slot, name))
    except psycopg.errors.UndefinedFunction:
        raise SlotCopyRefused(f"source {source}: this PostgreSQL cannot copy replication slot {slot!r} for a second "
                              "reader (pg_copy_logical_replication_slot came with PostgreSQL 12). Fix: set "
                              "cdc.executor_readers to 1 for this source") from None
    except psycopg.errors.ConfigurationLimitExceeded as exc:  # one line: an executor's error is rebuilt from it
        raise SlotCopyRefused(
            f"source {source}: no replication slot is free for a reader's temporary copy of slot {slot!r} "
            f"({exc.diag.message_primary or type(exc).__name__}). Each table of a batch read on Spark's executors "
            "takes cdc.executor_readers - 1 slots while it is read. Fix: raise max_replication_slots on the server "
            "(a restart), or set cdc.executor_readers to 1 for this source") from None
    return name


def current_lsn(conn) -> Lsn:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        return Lsn.parse(cur.fetchone()[0])


def advance(conn, slot: str, to: Lsn, wait_seconds: float = PEEK_SECONDS) -> None:
    """Confirm everything before `to`: the server may recycle that WAL. Waits for a slot another session
    uses as a peek does, for `wait_seconds` (the sensor confirms within its tick)."""
    import psycopg

    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, str(to)))
            return
        except psycopg.errors.ObjectInUse as exc:
            _wait_for_slot(slot, deadline, wait_seconds, exc)


@dataclass(frozen=True)
class SlotStart:
    """A slot just created, and the snapshot it exported: the database exactly at `consistent_point`."""

    slot: str
    consistent_point: Lsn
    snapshot: str
    """For SET TRANSACTION SNAPSHOT; valid while the connection that created the slot stays open and idle."""


@contextmanager
def exported_snapshot(params: dict[str, Any], slot: str, temporary: bool = False) -> Iterator[SlotStart]:
    """Create `slot` on a replication connection and hold its exported snapshot open for the block.

    Every chunk read in a transaction that sets this snapshot sees the database as of the slot's
    consistent point: no transaction the slot will stream is in it, and every one it will not
    stream is. A temporary slot goes with the connection (a snapshot's resume takes one: its
    chunks are read at its own point, later than the source's slot's, and tagged with it)."""
    import psycopg

    conn = psycopg.connect(**params, autocommit=True, replication="database")
    try:
        command = (f"CREATE_REPLICATION_SLOT {quote_slot(slot)}{' TEMPORARY' if temporary else ''} "
                   "LOGICAL pgoutput (SNAPSHOT 'export')")
        result = conn.pgconn.exec_(command.encode())
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            raise SlotError(f"creating replication slot {slot!r}: {result.error_message.decode().strip()}")
        yield SlotStart(slot, Lsn.parse(result.get_value(0, 1).decode()), result.get_value(0, 2).decode())
    finally:
        conn.close()


class SlotError(RuntimeError):
    """A replication slot that cannot be created or read."""


def quote_slot(name: str) -> str:
    """Slot names are lower-case letters, digits and underscores (the server refuses others)."""
    if not name or not all(c.islower() or c.isdigit() or c == "_" for c in name) or len(name) > 63:
        raise ValueError(f"not a replication slot name (a-z, 0-9, _; at most 63): {name!r}")
    return name


def ensure_slot(conn, slot: str) -> bool:
    """Create the source's logical slot (pgoutput) unless it exists; True when this call created it.
    From its creation on the server keeps every change the slot has not confirmed."""
    import psycopg

    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if cur.fetchone():
            return False
        try:
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (quote_slot(slot),))
        except psycopg.errors.DuplicateObject:
            return False  # another snapshot of the source created it meanwhile
    return True


def has_changes(conn, slot: str, publication: str, upto: Lsn, seconds: float = PEEK_SECONDS) -> bool:
    """Whether a transaction that changed a published table commits before `upto`: the decoder stops at
    the first one. pgoutput (PostgreSQL 15) sends nothing for transactions that changed no published
    table, so activity elsewhere in the database makes no batch. A peek cut at `seconds` says yes: it may."""
    return peek_batch_tables(conn, slot, publication, upto, limit=1, seconds=seconds).messages != 0


def relation_names(messages: Iterable[bytes]) -> frozenset[str]:
    """schema.table of each RELATION message among `messages` (pure)."""
    from ingest.sources.postgres.pgoutput import decode, table_name

    return frozenset(table_name(decode(m)) for m in messages if m[:1] == b"R")


@dataclass(frozen=True)
class SlotPeek:
    messages: int | None
    """pgoutput messages of the transactions looked at (0: no transaction changed a published table; None:
    the decoding took longer than the peek's time, so there may be any number)."""
    tables: frozenset[str] | None
    """schema.table of every table they change; None when there were more than the limit to look at, or
    the decoding took longer than the peek's time."""


def peek_batch_tables(conn, slot: str, publication: str, upto: Lsn, limit: int = PEEK_MAX_MESSAGES,
                      seconds: float = PEEK_SECONDS) -> SlotPeek:
    """Whether the slot holds changes before `upto`, and to which tables (schema.table).

    Each peek is a decoding session of its own, and pgoutput describes a table (RELATION) before the
    session's first change to it, so the RELATION messages name every table changed: those of the
    batch, and of any older transaction the slot still holds (the batch's reader leaves these out; naming
    a table too many costs a planned event). Only RELATION messages cross the wire. The server cancels
    the decoding after `seconds` (statement_timeout), and a slot another session uses is waited for
    within them: the peek then cannot tell."""
    import psycopg

    deadline = time.monotonic() + seconds
    while True:
        try:
            with conn.transaction(), conn.cursor() as cur:  # 82 is 'R', a RELATION message's first byte
                left_ms = max(1, round((deadline - time.monotonic()) * 1000))
                cur.execute("SELECT set_config('statement_timeout', %s, true)", (f"{left_ms}ms",))
                cur.execute("SELECT count(*), coalesce(array_agg(data) FILTER (WHERE get_byte(data, 0) = 82), '{}') "
                            "FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, 'proto_version', '1', "
                            "'publication_names', %s)", (slot, str(upto), limit, publication))
                count, relations = cur.fetchone()
            break
        except psycopg.errors.QueryCanceled:
            return SlotPeek(None, None)
        except psycopg.errors.ObjectInUse:  # another session decodes from the slot: wait, within the time
            if time.monotonic() >= deadline:
                return SlotPeek(None, None)
            time.sleep(0.2)
    # the decoder finishes the transaction in which it reaches `limit`: at `limit` it may have stopped early
    return SlotPeek(count, None if count >= limit else relation_names(bytes(r) for r in relations))
