"""A logical replication slot read through SQL: peek up to a fixed LSN, advance after the lake commits.

`pg_logical_slot_peek_binary_changes` decodes from the slot's confirmed position without consuming
anything, and its `upto_lsn` stops after the last transaction that commits before that LSN, so a
batch holds whole transactions and a re-read returns the same ones. Only
`pg_replication_slot_advance`, called after the batch's bronze commit, lets the server release WAL:
the slot never lets go of changes the lake lacks. A plain connection is enough (no replication
protocol), through a server-side cursor so that no batch is held whole in memory.
"""

from __future__ import annotations

from collections.abc import Iterator

from ingest.sources.postgres.positions import Lsn

PEEK_FETCH = 2000
"""Messages fetched per round trip of the server-side cursor."""


def peek(conn, slot: str, publication: str, upto: Lsn | None = None) -> Iterator[bytes]:
    """The pgoutput messages of the transactions committed before `upto` (None: all there are now)."""
    with conn.transaction(), conn.cursor(name=f"peek_{slot}") as cur:  # a server-side cursor lives in one
        cur.itersize = PEEK_FETCH
        cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
                    "'proto_version', '1', 'publication_names', %s)",
                    (slot, None if upto is None else str(upto), publication))
        for (data,) in cur:
            yield bytes(data)


def current_lsn(conn) -> Lsn:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        return Lsn.parse(cur.fetchone()[0])


def advance(conn, slot: str, to: Lsn) -> None:
    """Confirm everything before `to`: the server may recycle that WAL."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, str(to)))
