"""pgoutput transactions to change records, in the type contract's values (pure).

Every change of a transaction is ordered by the transaction's COMMIT LSN and its place among the
transaction's changes to its table (positions.py). An UPDATE that moves a row to another primary key
becomes a delete of the old key and an insert of the new one, as for MySQL, so the old key cannot
linger in silver. A
TOASTed value an UPDATE did not change stays UNCHANGED in the record: it was not sent, and silver
must keep the value it has.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest.changes import ChangeOp, ChangeRecord
from ingest.images import image_json
from ingest.sources.contract import ColumnType
from ingest.sources.postgres.pgoutput import (
    UNCHANGED, Begin, Change, Delete, Insert, Relation, Sent, Update, resent, sent_columns, table_name,
)


def placed_changes(changes: Iterable[tuple[Begin, Relation, Change]], tables: Collection[str],
                   contracts: Callable[[Relation], Sequence[ColumnType]],
                   primary_key: Callable[[Relation], Sequence[str]] | None = None
                   ) -> Iterator[tuple[Begin, Relation, int, ChangeOp, tuple | None, tuple | None]]:
    """The changes to `tables` among `changes` (pgoutput.changes: each with its BEGIN), each with its place:
    (begin, relation, place, op, values, before), the values as the tuple came (before: the old tuple of
    an update that kept its key, else None; a TRUNCATE's values: None).

    A change's place counts the changes to its table in its transaction, not to the other tables, so
    a table's changes are the same whichever tables are read with it (the driver reads them all, an
    executor one). An UPDATE that moves its row to another key is a DELETE of the old tuple, then an
    INSERT of the new. `primary_key`: a relation's primary key, for a table with REPLICA IDENTITY FULL,
    whose RELATION marks every column as identity (else an update of any column would look like one of
    the key)."""
    begin, places, moved = None, {}, KeyMoves(contracts, primary_key)
    for txn_begin, relation, change in changes:
        name = table_name(relation)
        if name not in tables:
            continue
        if txn_begin is not begin:
            begin, places = txn_begin, {}
        if isinstance(change, Insert):
            op, values, before = ChangeOp.INSERT, change.new, None
        elif isinstance(change, Delete):
            op, values, before = ChangeOp.DELETE, change.old, None
        elif isinstance(change, Update):
            op, values, before = ChangeOp.UPDATE, change.new, change.old
            if moved(relation, change):
                places[name] = place = places.get(name, 0) + 1
                yield begin, relation, place, ChangeOp.DELETE, before, None
                op, before = ChangeOp.INSERT, None
        else:
            op, values, before = ChangeOp.TRUNCATE, None, None
        places[name] = place = places.get(name, 0) + 1
        yield begin, relation, place, op, values, before


class KeyMoves:
    """Whether an UPDATE moved its row to another key: its old key (sent only when it changed, or the
    old row with REPLICA IDENTITY FULL) against its new one. `primary_key`: see placed_changes."""

    def __init__(self, contracts: Callable[[Relation], Sequence[ColumnType]],
                 primary_key: Callable[[Relation], Sequence[str]] | None = None) -> None:
        self.contracts, self.primary_key = contracts, primary_key
        self.keys_of: dict[int, tuple[Relation, list[str]]] = {}
        """By relation id, with the relation itself: its id stays its own while held."""

    def __call__(self, relation: Relation, update: Update) -> bool:
        if update.old is None:
            return False
        if id(relation) not in self.keys_of:
            self.keys_of[id(relation)] = (relation, list(
                self.primary_key(relation) if relation.replica_identity == "f" and self.primary_key
                else [c.name for c in relation.columns if c.key]))
        keys, types = self.keys_of[id(relation)][1], self.contracts(relation)
        old, new = image(relation, types, update.old, True), image(relation, types, update.new, True)
        return [old[k] for k in keys] != [new[k] for k in keys]


def change_records(changes: Iterable[tuple[Begin, Relation, Change]], tables: Collection[str],
                   contracts: Callable[[Relation], Sequence[ColumnType]],
                   primary_key: Callable[[Relation], Sequence[str]] | None = None) -> Iterator[ChangeRecord]:
    """The changes to `tables` among `changes`, placed (placed_changes), as records in contract values."""
    for begin, relation, place, op, values, before in placed_changes(changes, tables, contracts, primary_key):
        types = contracts(relation)
        yield ChangeRecord(table_name(relation), op, begin.final_lsn.row_pos(place),
                           image(relation, types, values),
                           None if before is None else image(relation, types, before),
                           begin.commit_time, str(begin.xid))


def image(relation: Relation, types: Sequence[ColumnType], values: Sequence[Any] | None, keys_only: bool = False
          ) -> dict[str, Any]:
    """A row image in contract values (`keys_only`: of the key columns); NULL and UNCHANGED stay as they are.
    None (a TRUNCATE's) has no image."""
    if values is None:
        return {}
    if len(values) != len(relation.columns):
        raise ValueError(f"{table_name(relation)}: a tuple of {len(values)} values for {len(relation.columns)} "
                         "columns")
    return {c.name: v if v is None or v is UNCHANGED or t.convert is None else t.convert(v)
            for c, t, v in zip(relation.columns, types, values) if c.key or not keys_only}


@dataclass
class TextChanges:
    """Changes of one table in columns: what change_records gives as records, with each column's values
    in the server's text and the contract that converts them. An executor converts a whole column at a
    time (types.column_array, mostly Arrow's casts), and decodes the rows as sent a column at a time
    (pgoutput.sent_columns); converting value by value and building a record and a dict per change were
    most of its time."""

    table: str
    names: Sequence[str]
    """The columns, in the caller's order (bronze's)."""
    types: list[ColumnType | None]
    """Each column's contract; None: the table has no such column in these changes (all NULL)."""
    relation_columns: Sequence[str] = ()
    """The relation's columns, in its order: each row's values."""
    rows: list[Sent] = field(default_factory=list)
    """Each change's values as sent (a TRUNCATE's all NULL)."""
    ops: list[str] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    committed_at: list[Any] = field(default_factory=list)
    txids: list[str] = field(default_factory=list)
    befores: list[str | None] = field(default_factory=list)
    """The image before an update as JSON (images.image_json), else None."""
    layout: list[int | None] = field(default_factory=list)
    """Where each of `names` is in a row (None: not in the relation)."""
    _decoded: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.ops)

    def _decode(self) -> tuple:
        if self._decoded is None:
            self._decoded = sent_columns(self.rows, len(self.relation_columns), self.table)
        return self._decoded

    def columns(self) -> list[Any]:
        """Each of `names`' values in change order, an Arrow string array (all NULL: not in the relation)."""
        import pyarrow as pa

        decoded = self._decode()[0]
        return [pa.nulls(len(self), pa.string()) if at is None else decoded[at] for at in self.layout]

    @property
    def unchanged(self) -> list[list[str] | None]:
        """Each change's columns it did not send (TOASTed values it left as they were), else None."""
        import numpy as np

        unsent = self._decode()[1]
        out: list[list[str] | None] = [None] * len(self)
        for row in np.flatnonzero(unsent.any(axis=1)):
            if self.ops[row] != ChangeOp.DELETE.value:  # an update's (or a key move's new row)
                out[row] = [self.relation_columns[j] for j in np.flatnonzero(unsent[row])]
        return out


def change_columns(changes: Iterable[tuple[Begin, Relation, Change]], table: str, names: Sequence[str],
                   contracts: Callable[[Relation], Sequence[ColumnType]],
                   primary_key: Callable[[Relation], Sequence[str]] | None = None,
                   size: int = 10_000) -> Iterator[TextChanges]:
    """The changes to `table` among `changes` (best decoded with pgoutput.changes' `sent`), `size` at most,
    as TextChanges over the columns `names`: the same changes, positions and images as change_records gives
    for it, in the same order. A new TextChanges starts where the table's RELATION changes (a column added
    or dropped mid-batch)."""
    out: TextChanges | None = None
    relation = None
    for begin, rel, place, op, values, before in placed_changes(changes, {table}, contracts, primary_key):
        new_relation = rel is not relation
        if new_relation:
            relation, types = rel, contracts(rel)
            blank = resent((None,) * len(rel.columns))
            where = {c.name: i for i, c in enumerate(rel.columns)}
            layout = [where.get(n) for n in names]
        if out is None or new_relation or len(out.ops) >= size:
            if out:
                yield out
            out = TextChanges(table, names, [None if i is None else types[i] for i in layout],
                              [c.name for c in rel.columns], layout=layout)
        out.rows.append(blank if values is None else values if type(values) is Sent else resent(values))
        out.ops.append(op.value)
        out.positions.append(begin.final_lsn.row_pos(place))
        out.committed_at.append(begin.commit_time)
        out.txids.append(str(begin.xid))
        out.befores.append(None if before is None else image_json(image(rel, types, before)))
    if out:
        yield out
