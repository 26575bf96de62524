"""pgoutput transactions to change records, in the type contract's values (pure).

Every change of a transaction is ordered by the transaction's COMMIT LSN and its place among the
transaction's changes to its table (positions.py). An UPDATE that moves a row to another primary key
becomes a delete of the old key and an insert of the new one, as for MySQL, so the old key cannot
linger in silver. A
TOASTed value an UPDATE did not change stays UNCHANGED in the record: it was not sent, and silver
must keep the value it has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ingest.changes import ChangeOp, ChangeRecord
from ingest.sources.contract import ColumnType
from ingest.sources.postgres.pgoutput import (
    UNCHANGED, Begin, Change, Delete, Insert, Relation, Truncate, Update, table_name,
)


def change_records(changes: Iterable[tuple[Begin, Relation, Change]], tables: set[str],
                   contracts: Callable[[Relation], Sequence[ColumnType]], keys_only: bool = False,
                   primary_key: Callable[[Relation], Sequence[str]] | None = None) -> Iterator[ChangeRecord]:
    """The changes to `tables` among `changes` (pgoutput.changes: each with its BEGIN), one at a time.

    A change's place counts the changes to its table in its transaction, not to the other tables, so
    a table's records are the same whichever tables are read with it (the driver reads them all, an
    executor one). `keys_only`: the images hold the key columns alone, for a pass that needs the
    records' positions and not their values (converting every value was most of its time).
    `primary_key`: a relation's primary key, for a table with REPLICA IDENTITY FULL, whose RELATION marks
    every column as identity (else an update of any column would look like one of the key)."""
    begin, places = None, {}
    for txn_begin, relation, change in changes:
        name = table_name(relation)
        if name not in tables:
            continue
        if txn_begin is not begin:
            begin, places = txn_begin, {}
        commit, at, xid = begin.final_lsn, begin.commit_time, str(begin.xid)

        def record(op: ChangeOp, row: dict[str, Any], before: dict[str, Any] | None = None) -> ChangeRecord:
            places[name] = index = places.get(name, 0) + 1
            return ChangeRecord(name, op, commit.row_pos(index), row, before, at, xid)

        if isinstance(change, Truncate):
            yield record(ChangeOp.TRUNCATE, {})
            continue
        types = contracts(relation)
        keys = (primary_key(relation) if relation.replica_identity == "f" and primary_key
                else [c.name for c in relation.columns if c.key])
        if isinstance(change, Insert):
            yield record(ChangeOp.INSERT, image(relation, types, change.new, keys_only))
        elif isinstance(change, Delete):
            yield record(ChangeOp.DELETE, image(relation, types, change.old, keys_only))
        elif isinstance(change, Update):
            new = image(relation, types, change.new, keys_only)
            old = None if change.old is None else image(relation, types, change.old, keys_only)
            if old is not None and [old[k] for k in keys] != [new[k] for k in keys]:
                yield record(ChangeOp.DELETE, old)
                yield record(ChangeOp.INSERT, new)
            else:
                yield record(ChangeOp.UPDATE, new, old)


def image(relation: Relation, types: Sequence[ColumnType], values: Sequence[Any] | None, keys_only: bool = False
          ) -> dict[str, Any]:
    """A row image in contract values (`keys_only`: of the key columns); NULL and UNCHANGED stay as they are.
    A tuple left undecoded (None, pgoutput.decode's `rows`) has no image."""
    if values is None:
        return {}
    if len(values) != len(relation.columns):
        raise ValueError(f"{table_name(relation)}: a tuple of {len(values)} values for {len(relation.columns)} "
                         "columns")
    return {c.name: v if v is None or v is UNCHANGED or t.convert is None else t.convert(v)
            for c, t, v in zip(relation.columns, types, values) if c.key or not keys_only}
