"""pgoutput transactions to change records, in the type contract's values (pure).

Every change of a transaction is ordered by the transaction's COMMIT LSN and its place in the
transaction (positions.py). An UPDATE that moves a row to another primary key becomes a delete of
the old key and an insert of the new one, as for MySQL, so the old key cannot linger in silver. A
TOASTed value an UPDATE did not change stays UNCHANGED in the record: it was not sent, and silver
must keep the value it has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ingest.changes import ChangeOp, ChangeRecord
from ingest.sources.contract import ColumnType
from ingest.sources.postgres.pgoutput import UNCHANGED, Delete, Insert, Relation, Transaction, Truncate, Update


def table_name(relation: Relation) -> str:
    return f"{relation.namespace}.{relation.name}"


def change_records(txns: Iterable[Transaction], tables: set[str],
                   contracts: Callable[[Relation], Sequence[ColumnType]]) -> Iterator[ChangeRecord]:
    """The changes to `tables` (schema.table) in `txns`; `contracts` gives a relation's column types."""
    for txn in txns:
        commit, at, xid = txn.begin.final_lsn, txn.begin.commit_time, str(txn.begin.xid)
        index = 0
        for relation, change in txn.changes:
            name = table_name(relation)
            if name not in tables:
                continue

            def record(op: ChangeOp, row: dict[str, Any], before: dict[str, Any] | None = None) -> ChangeRecord:
                nonlocal index
                index += 1
                return ChangeRecord(name, op, commit.row_pos(index), row, before, at, xid)

            if isinstance(change, Truncate):
                yield record(ChangeOp.TRUNCATE, {})
                continue
            types = contracts(relation)
            keys = [c.name for c in relation.columns if c.key]
            if isinstance(change, Insert):
                yield record(ChangeOp.INSERT, image(relation, types, change.new))
            elif isinstance(change, Delete):
                yield record(ChangeOp.DELETE, image(relation, types, change.old))
            elif isinstance(change, Update):
                new = image(relation, types, change.new)
                old = None if change.old is None else image(relation, types, change.old)
                if old is not None and [old[k] for k in keys] != [new[k] for k in keys]:
                    yield record(ChangeOp.DELETE, old)
                    yield record(ChangeOp.INSERT, new)
                else:
                    yield record(ChangeOp.UPDATE, new, old)


def image(relation: Relation, types: Sequence[ColumnType], values: Sequence[Any]) -> dict[str, Any]:
    """A row image in contract values; NULL and UNCHANGED stay as they are."""
    if len(values) != len(relation.columns):
        raise ValueError(f"{table_name(relation)}: a tuple of {len(values)} values for {len(relation.columns)} "
                         "columns")
    return {c.name: v if v is None or v is UNCHANGED or t.convert is None else t.convert(v)
            for c, t, v in zip(relation.columns, types, values)}
