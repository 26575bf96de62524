"""Change batches of a PostgreSQL source: planned from the slot and the WAL head, read by peeking the slot.

A batch is the transactions that commit in [start, end) (LsnRange). The sensor plans it from the
last logged end to the WAL head; the run peeks the slot up to `end`, which returns whole
transactions, and leaves out any the slot still holds from before `start` (the slot is advanced only
after the batch log commit, so a crash in between makes the next peek begin earlier). Nothing here
advances the slot: `confirm` does, once the lake holds the batch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from contextlib import closing
from dataclasses import dataclass

from ingest.changes import SourceBatch, TableChanges
from ingest.sources.contract import ColumnType
from ingest.sources.postgres.changes import KeyMoves, change_columns, change_records
from ingest.sources.postgres.pgoutput import BatchPlan, PlacesUnknown, Relation, changes, plan_batch, table_name
from ingest.sources.postgres.positions import Lsn, LsnRange
from ingest.sources.postgres.schema import types_of
from ingest.sources.postgres.slot import advance, peek, peek_runs, reading_copy


class SlotLost(RuntimeError):
    """The source's slot is gone, invalidated, or past changes the lake lacks: only a new snapshot helps."""


@dataclass(frozen=True)
class SlotState:
    slot: str
    confirmed: Lsn
    """Where the next peek begins: everything committed before it was released."""
    head: Lsn
    """The WAL's write position now: every transaction committed so far commits before it."""
    retained_bytes: int
    """WAL the server keeps for the slot."""
    safe_wal_bytes: int | None
    """WAL that may still be written before `max_slot_wal_keep_size` invalidates the slot (None: no limit)."""


_SLOT_SQL = """
SELECT confirmed_flush_lsn::text, wal_status, plugin,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, safe_wal_size, pg_current_wal_lsn()::text
FROM pg_replication_slots WHERE slot_name = %s AND database = current_database()
"""


def slot_row(conn, slot: str) -> tuple | None:
    """The slot's confirmed LSN, wal_status, plugin, retained and safe WAL bytes and the WAL head (None: no slot)."""
    with conn.cursor() as cur:
        cur.execute(_SLOT_SQL, (slot,))
        return cur.fetchone()


def slot_state(conn, source: str, slot: str) -> SlotState:
    """The slot's positions and headroom; SlotLost when it cannot give the changes the lake needs."""
    row = slot_row(conn, slot)
    fix = (f"Fix: re-snapshot the tables of source {source} (materialize their snapshot assets): the "
           "snapshot creates the slot again and change batches start from it")
    if row is None:
        raise SlotLost(f"source {source}: replication slot {slot!r} does not exist in this database (dropped, or "
                       f"never created). {fix}")
    confirmed, wal_status, plugin, retained, safe, head = row
    if wal_status == "lost" or confirmed is None:
        raise SlotLost(f"source {source}: replication slot {slot!r} was invalidated (wal_status {wal_status}): the "
                       "server removed WAL it still needed, because it passed max_slot_wal_keep_size. "
                       f"{fix}; raise max_slot_wal_keep_size or run batches more often so it does not recur")
    if plugin != "pgoutput":
        raise SlotLost(f"source {source}: replication slot {slot!r} uses plugin {plugin!r}, not pgoutput. Fix: drop "
                       f"it (SELECT pg_drop_replication_slot('{slot}')) and re-snapshot the source's tables")
    return SlotState(slot, Lsn.parse(confirmed), Lsn.parse(head), int(retained or 0),
                     None if safe is None else int(safe))


MAX_BATCH_WAL_BYTES = 256 * 1024 * 1024
"""The most WAL one batch spans: a backlog becomes several batches, so that a batch's changes fit in
memory (a cut at any LSN falls between commits: a batch is the transactions committing before it)."""


def plan_next_batch(last_end: Lsn | None, first_start: Lsn | None, head: Lsn,
                    max_bytes: int = MAX_BATCH_WAL_BYTES) -> LsnRange | None:
    """The next batch: from the last logged end (or, before the first, the snapshots' start) to the
    WAL head, at most `max_bytes` of WAL; None when nothing can have committed since (pure)."""
    start = last_end or first_start
    if start is None or head <= start:
        return None
    return LsnRange(start, min(head, Lsn(start.value + max_bytes)))


def check_readable(source: str, state: SlotState, batch: LsnRange) -> None:
    """A slot confirmed past the batch's start has released changes of it: reading it would lose them."""
    if state.confirmed > batch.start:
        raise SlotLost(
            f"source {source}: batch {batch.key} starts at {batch.start}, but replication slot {state.slot!r} has "
            f"released everything before {state.confirmed}: the changes in between are no longer on the server. "
            "A batch the batch log holds is rebuilt from bronze (materialize only its silver); otherwise "
            "re-snapshot the source's tables")


def read_change_batch(conn, source: str, slot: str, publication: str, batch: LsnRange,
                      tables: Collection[str], executor_min_bytes: int | None = None) -> SourceBatch:
    """The changes to `tables` (schema.table) committed in the batch's range, read without consuming.

    A batch that spans `executor_min_bytes` of WAL or more is only planned here: it is read as it
    streams by, and each table keeps its columns, TRUNCATE positions and newest commit, not its
    changes (TableChanges.sliced), which Spark's executors read (adapters/postgres.py). One transaction
    can hold millions of changes, and the batch holds it whole."""
    state = slot_state(conn, source, slot)
    check_readable(source, state, batch)
    contracts = RelationContracts(conn)
    wanted = set(tables)
    sliced = executor_min_bytes is not None and batch.end.value - batch.start.value >= executor_min_bytes
    if sliced:  # planned as it streams by: where its TRUNCATEs are and when its transactions committed
        plan = plan_large_batch(conn, slot, publication, batch, wanted, contracts)
        records: dict[str, list] = {name: [] for name in plan.newest_of}
    else:
        plan, records = BatchPlan(), {}

        def in_batch():
            last = None
            for begin, relation, change in batch_changes(conn, slot, publication, batch):
                if begin is not last:
                    last, plan.transactions, plan.newest = begin, plan.transactions + 1, begin.commit_time
                if id(relation) not in plan.relations and table_name(relation) in wanted:
                    plan.relations[id(relation)] = relation  # held here: its id stays its own
                yield begin, relation, change

        for record in change_records(in_batch(), wanted, contracts, primary_key=contracts.primary_key):
            records.setdefault(record.table, []).append(record)
    columns: dict[str, dict[str, str]] = {}
    for relation in plan.relations.values():
        seen = columns.setdefault(table_name(relation), {})
        seen.update((c.name, t.spark) for c, t in zip(relation.columns, contracts(relation)))
    per_table = {name: TableChanges(kept, list(columns.get(name, {}).items()), sliced=sliced,
                                    truncates=tuple(plan.truncates.get(name, ())), newest=plan.newest_of.get(name),
                                    oldest=plan.oldest_of.get(name), unchanged=name in plan.unchanged)
                 for name, kept in records.items()}
    positions = {"start": batch.start.to_metadata(), "end": batch.end.to_metadata(), "transactions": plan.transactions}
    lag = (dt.datetime.now(dt.timezone.utc) - plan.newest).total_seconds() if plan.newest else 0.0
    extra = {"lag_seconds": round(lag, 3), "slot": slot, "retained_wal_bytes": state.retained_bytes,
             "read_on_executors": sliced,
             **({} if state.safe_wal_bytes is None else {"safe_wal_bytes": state.safe_wal_bytes})}
    return SourceBatch(batch.key, per_table, positions, extra)


def plan_large_batch(conn, slot: str, publication: str, batch: LsnRange, tables: Collection[str],
                     contracts: RelationContracts) -> BatchPlan:
    """The plan of a batch the executors read (pgoutput.plan_batch), from the messages the server leaves
    after dropping the row changes that cannot change it (slot.peek_runs), or from every message where
    that cannot place a TRUNCATE: one after other changes of its table in its transaction."""
    with closing(peek_runs(conn, slot, publication, batch.end)) as messages:  # its cursor goes before the next
        try:
            return plan_batch(messages, batch, tables, KeyMoves(contracts, contracts.primary_key), runs=True)
        except PlacesUnknown:
            pass
    return plan_batch(peek(conn, slot, publication, batch.end), batch, tables, KeyMoves(contracts, contracts.primary_key))


def batch_changes(conn, slot: str, publication: str, batch: LsnRange, relations: dict[int, Relation] | None = None,
                  tables: Collection[str] | None = None, share: tuple[int, int] | None = None, sent: bool = False):
    """The row changes of the transactions committed in the batch's range, as they stream from the slot
    (pgoutput.changes; `tables`: only theirs; `share`, `sent`: see pgoutput.changes), without consuming."""
    last = inside = None
    for begin, relation, change in changes(peek(conn, slot, publication, batch.end), relations, tables, share, sent):
        if begin is not last:
            last, inside = begin, batch.holds(begin.final_lsn)
        if inside:  # else an earlier batch's, still in the slot
            yield begin, relation, change


def table_changes(conn, source: str, slot: str, publication: str, batch: LsnRange, table: str,
                  share: tuple[int, int] | None = None):
    """One table's (schema.table) changes in the batch, one record at a time: what read_change_batch
    gives for it, as an executor reads a batch the driver only planned. `share`: see table_stream."""
    stream, contracts = table_stream(conn, source, slot, publication, batch, table, share)
    return change_records(stream, {table}, contracts, primary_key=contracts.primary_key)


def table_change_columns(conn, source: str, slot: str, publication: str, batch: LsnRange, table: str,
                         names: list[str], size: int, share: tuple[int, int] | None = None):
    """The same changes as table_changes, as changes.TextChanges of at most `size` over the columns `names`."""
    stream, contracts = table_stream(conn, source, slot, publication, batch, table, share, sent=True)
    return change_columns(stream, table, names, contracts, contracts.primary_key, size)


def table_stream(conn, source: str, slot: str, publication: str, batch: LsnRange, table: str,
                 share: tuple[int, int] | None = None, sent: bool = False):
    """The table's changes in the batch as they stream from the slot, and the relations' contracts.
    `share` (k, n): only reader k's of n (pgoutput.changes); every reader but the first reads a temporary
    copy of the slot, as the server lets one session at a time use a slot. `sent`: see pgoutput.changes."""
    check_readable(source, slot_state(conn, source, slot), batch)
    if share is not None and share[0] > 0:
        slot = reading_copy(conn, source, slot)
        check_readable(source, slot_state(conn, source, slot), batch)  # a confirm between the two
    return batch_changes(conn, slot, publication, batch, tables={table}, share=share, sent=sent), RelationContracts(conn)


def confirm(conn, source: str, slot: str, end: Lsn) -> None:
    """Let the server release WAL before `end`: call only once the lake's batch log holds every batch
    that ends there. Advancing to where the slot already is, or behind it, does nothing."""
    state = slot_state(conn, source, slot)
    if end > state.confirmed:
        advance(conn, slot, end)


class RelationContracts:
    """A relation's column types, looked up once per relation and shape."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.known: dict[tuple, list[ColumnType]] = {}
        self.seen: dict[int, tuple[Relation, list[ColumnType]]] = {}
        """By the RELATION message object every change of a table shares (hashing it per change is slow)."""
        self.keys: dict[int, list[str]] = {}

    def primary_key(self, relation: Relation) -> list[str]:
        """The relation's primary key from the catalog (looked up once per table)."""
        if relation.oid not in self.keys:
            with self.conn.cursor() as cur:
                cur.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
                            "ORDER BY array_position(i.indkey::int2[], a.attnum)", (relation.oid,))
                self.keys[relation.oid] = [r[0] for r in cur.fetchall()]
        return self.keys[relation.oid]

    def __call__(self, relation: Relation) -> list[ColumnType]:
        seen = self.seen.get(id(relation))
        if seen is not None and seen[0] is relation:
            return seen[1]
        shape = (relation.oid, relation.columns)
        if shape not in self.known:
            types = types_of(self.conn, [c.type_oid for c in relation.columns])
            self.known[shape] = [types[c.type_oid].contract(c.type_modifier) for c in relation.columns]
        self.seen[id(relation)] = (relation, self.known[shape])
        return self.known[shape]

