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
    UNCHANGED, Begin, Change, Delete, Insert, Relation, Update, table_name,
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
    time (types.column_array, mostly Arrow's casts); converting value by value and building a record and
    a dict per change were most of its time."""

    names: Sequence[str]
    """The columns, in the caller's order (bronze's)."""
    types: list[ColumnType | None]
    """Each column's contract; None: the table has no such column in these changes (all NULL)."""
    rows: list[tuple] = field(default_factory=list)
    """Each change's values in its relation's column order (UNCHANGED: None here, named in `unchanged`)."""
    ops: list[str] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    committed_at: list[Any] = field(default_factory=list)
    txids: list[str] = field(default_factory=list)
    befores: list[str | None] = field(default_factory=list)
    """The image before an update as JSON (images.image_json), else None."""
    unchanged: list[list[str] | None] = field(default_factory=list)
    """The columns a change did not send (TOASTed values it left as they were), else None."""
    layout: list[int | None] = field(default_factory=list)
    """Where each of `names` is in a row (None: not in the relation)."""

    def __len__(self) -> int:
        return len(self.ops)

    def columns(self) -> list[Sequence[str | None]]:
        """Each of `names`' values, in change order."""
        n = len(self.rows)
        spread = list(zip(*self.rows)) if n else []
        return [[None] * n if at is None or not spread else spread[at] for at in self.layout]


def change_columns(changes: Iterable[tuple[Begin, Relation, Change]], table: str, names: Sequence[str],
                   contracts: Callable[[Relation], Sequence[ColumnType]],
                   primary_key: Callable[[Relation], Sequence[str]] | None = None,
                   size: int = 10_000) -> Iterator[TextChanges]:
    """The changes to `table` among `changes`, `size` at most, as TextChanges over the columns `names`:
    the same changes, positions and images as change_records gives for it, in the same order. A new
    TextChanges starts where the table's RELATION changes (a column added or dropped mid-batch)."""
    out: TextChanges | None = None
    relation = None
    for begin, rel, place, op, values, before in placed_changes(changes, {table}, contracts, primary_key):
        new_relation = rel is not relation
        if new_relation:
            relation, types = rel, contracts(rel)
            width, blank = len(rel.columns), (None,) * len(rel.columns)
            where = {c.name: i for i, c in enumerate(rel.columns)}
            layout = [where.get(n) for n in names]
        if out is None or new_relation or len(out) >= size:
            if out:
                yield out
            out = TextChanges(names, [None if i is None else types[i] for i in layout], layout=layout)
        unchanged = None
        if values is None:
            values = blank
        elif len(values) != width:
            raise ValueError(f"{table}: a tuple of {len(values)} values for {width} columns")
        elif op is not ChangeOp.DELETE and UNCHANGED in values:  # an update's (or a key move's new row)
            unchanged = [c.name for c, v in zip(rel.columns, values) if v is UNCHANGED]
            values = tuple(None if v is UNCHANGED else v for v in values)
        out.rows.append(values)
        out.ops.append(op.value)
        out.positions.append(begin.final_lsn.row_pos(place))
        out.committed_at.append(begin.commit_time)
        out.txids.append(str(begin.xid))
        out.befores.append(None if before is None else image_json(image(rel, types, before)))
        out.unchanged.append(unchanged)
    if out:
        yield out
