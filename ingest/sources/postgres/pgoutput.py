"""Decoding of pgoutput, PostgreSQL's logical replication protocol (version 1), without I/O (pure).

The messages (https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html) come one
per row of `pg_logical_slot_peek_binary_changes` or per CopyData of a replication connection. Every
transaction is BEGIN, then RELATION (and TYPE) messages before the first change to a table in the
decoding session, then INSERT / UPDATE / DELETE / TRUNCATE, then COMMIT. Values come in text form
('t'), as NULL ('n'), or as 'u': a TOASTed value the UPDATE did not change and did not send (with
REPLICA IDENTITY DEFAULT), which silver must keep rather than overwrite.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ingest.changes import UNCHANGED
from ingest.sources.postgres.positions import Lsn, LsnRange

PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


class ProtocolError(ValueError):
    """Bytes that are not the pgoutput message they claim to be."""


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    key: bool
    """Part of the replica identity (the primary key, with REPLICA IDENTITY DEFAULT)."""


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str
    """'d' default (primary key), 'n' nothing, 'f' full, 'i' an index."""
    columns: tuple[Column, ...]

    @cached_property
    def qualified(self) -> str:
        """schema.table (once: every change of the table asks)"""
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True)
class TypeInfo:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Begin:
    final_lsn: Lsn
    """The LSN of the transaction's COMMIT record: what its changes are ordered by."""
    commit_time: dt.datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: Lsn
    end_lsn: Lsn
    """Where the next transaction's records may start: confirming it releases this one's WAL."""
    commit_time: dt.datetime


@dataclass(slots=True)
class Sent:
    """A row's values as its message holds them, from `at`, not decoded (decode's `sent`): an executor
    decodes a chunk of them a column at a time (sent_columns)."""

    data: bytes
    at: int


# the row changes are not frozen: one is built for every change, and a frozen dataclass's __init__ took
# a third of decode's time beyond the values
@dataclass(slots=True)
class Insert:
    relation: int
    new: tuple[Any, ...] | Sent


@dataclass(slots=True)
class Update:
    relation: int
    new: tuple[Any, ...] | Sent
    """Sent only when no old key or row came (decode's `sent`)."""
    old: tuple[Any, ...] | None = None
    """The old key ('K', when the key changed) or old row ('O', REPLICA IDENTITY FULL); else None."""


@dataclass(slots=True)
class Delete:
    relation: int
    old: tuple[Any, ...] | Sent
    """The old key ('K': other columns NULL) or the whole old row ('O')."""


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class Skipped:
    """A message this decoder has no use for (ORIGIN, a logical decoding MESSAGE)."""

    kind: str


Message = Begin | Commit | Relation | TypeInfo | Insert | Update | Delete | Truncate | Skipped
_ROW_TYPES = frozenset((Insert, Update, Delete))


_STRUCTS: dict[str, struct.Struct] = {}
_COUNT, _USIZE, _OID = struct.Struct("!H"), struct.Struct("!I"), struct.Struct("!I")
_NULL, _UNCHANGED, _TEXT, _BINARY = b"nutb"
_INSERT, _DELETE, _UPDATE, _TRUNCATE, _NEW, _KEY, _OLD = b"IDUTNKO"
_BEGIN, _COMMIT, _RELATION = b"BCR"
_ROW_CHANGES = frozenset(b"IUD")
"""The first bytes of INSERT, UPDATE and DELETE messages, whose next four bytes are the table's OID."""
_CHANGES = frozenset(b"IUDT")
"""And TRUNCATE's."""
_MARKERS = {_INSERT: frozenset(b"N"), _UPDATE: frozenset(b"NKO"), _DELETE: frozenset(b"KO")}
"""What may follow a row change's OID: the new tuple ('N'), the old key ('K') or the old row ('O')."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = memoryview(data), 0

    def take(self, fmt: str) -> Any:
        packed = _STRUCTS.get(fmt) or _STRUCTS.setdefault(fmt, struct.Struct(fmt))
        if self.at + packed.size > len(self.data):
            raise ProtocolError(f"message ends after {len(self.data)} bytes, inside a field at {self.at}")
        (value,) = packed.unpack_from(self.data, self.at)
        self.at += packed.size
        return value

    def byte(self) -> str:
        return chr(self.take("!B"))

    def string(self) -> str:
        end = bytes(self.data[self.at:]).find(b"\0")
        if end < 0:
            raise ProtocolError(f"a string at {self.at} has no terminating NUL")
        text = bytes(self.data[self.at:self.at + end]).decode("utf-8")
        self.at += end + 1
        return text

    def raw(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise ProtocolError(f"a value of {n} bytes at {self.at} runs past the message's end")
        out = bytes(self.data[self.at:self.at + n])
        self.at += n
        return out

    def time(self) -> dt.datetime:
        return PG_EPOCH + dt.timedelta(microseconds=self.take("!q"))

    def lsn(self) -> Lsn:
        return Lsn(self.take("!Q"))


_TUPLE_TOO_SHORT = "a row's values run past the end of its message"


def _tuple(data: bytes, at: int, decoded: bool = True) -> tuple[tuple[Any, ...], int]:
    """A row's values at `at` and where they end: the hot path of every change, so it indexes the bytes
    directly and checks the message's end once, after the loop (a length read as unsigned: a negative one
    runs past the end too). `decoded` False: the values are walked over by their lengths, and each one
    sent is None (a value not sent is UNCHANGED still), for a pass that needs only that: 1.7 against 2.7 µs
    for a ten-column tuple."""
    try:
        (count,) = _COUNT.unpack_from(data, at)
        at += 2
        values: list[Any] = []
        append, size_at = values.append, _USIZE.unpack_from
        for _ in range(count):
            kind = data[at]
            if kind == _TEXT or kind == _BINARY:
                (size,) = size_at(data, at + 1)
                start, at = at + 5, at + 5 + size
                append(None if not decoded else data[start:at].decode() if kind == _TEXT else data[start:at])
            elif kind == _NULL:
                append(None)
                at += 1
            elif kind == _UNCHANGED:
                append(UNCHANGED)
                at += 1
            else:
                raise ProtocolError(f"unknown tuple value kind {chr(kind)!r} at {at}")
    except (IndexError, struct.error):
        raise ProtocolError(_TUPLE_TOO_SHORT) from None
    if at > len(data):
        raise ProtocolError(_TUPLE_TOO_SHORT)
    return tuple(values), at


def decode(data: bytes, sent: bool = False) -> Message:
    """One pgoutput message. `sent`: a row change's values stay as sent (Sent), unless an UPDATE sent an
    old key or row too (whether its key moved is told from both)."""
    if not data:
        raise ProtocolError("an empty message")
    kind = data[0]
    if kind in _ROW_CHANGES:  # the hot path: indexed directly
        if len(data) < 6:
            raise ProtocolError(f"a {chr(kind)} message of {len(data)} bytes")
        (oid,), marker = _OID.unpack_from(data, 1), data[5]
        if kind == _INSERT:
            if marker != _NEW:
                raise ProtocolError(f"INSERT: expected 'N' before the new tuple, got {chr(marker)!r}")
            return Insert(oid, Sent(data, 6) if sent else _tuple(data, 6)[0])
        if kind == _DELETE:
            if marker != _KEY and marker != _OLD:
                raise ProtocolError(f"DELETE: expected 'K' or 'O' before the old tuple, got {chr(marker)!r}")
            return Delete(oid, Sent(data, 6) if sent else _tuple(data, 6)[0])
        old, at = None, 6
        if marker == _KEY or marker == _OLD:
            old, at = _tuple(data, 6)
            marker = data[at] if at < len(data) else None
            at += 1
        if marker != _NEW:
            raise ProtocolError(f"UPDATE: expected 'N' before the new tuple, got {marker and chr(marker)!r}")
        return Update(oid, Sent(data, at) if sent and old is None else _tuple(data, at)[0], old)
    r = _Reader(data)
    kind = r.byte()
    if kind == "B":
        return Begin(r.lsn(), r.time(), r.take("!I"))
    if kind == "C":
        r.take("!B")  # flags, unused
        return Commit(r.lsn(), r.lsn(), r.time())
    if kind == "R":
        oid, namespace, name, identity = r.take("!I"), r.string(), r.string(), r.byte()
        columns = []
        for _ in range(r.take("!H")):
            flags = r.take("!B")
            columns.append(Column(r.string(), r.take("!I"), r.take("!i"), bool(flags & 1)))
        return Relation(oid, namespace, name, identity, tuple(columns))
    if kind == "Y":
        return TypeInfo(r.take("!I"), r.string(), r.string())
    if kind == "T":
        n, options = r.take("!I"), r.take("!B")
        return Truncate(tuple(r.take("!I") for _ in range(n)), bool(options & 1), bool(options & 2))
    if kind in ("O", "M"):
        return Skipped(kind)
    raise ProtocolError(f"unknown pgoutput message {kind!r} (streamed transactions need protocol version 2, "
                        "which this reader does not ask for)")


def resent(values: Sequence[Any]) -> Sent:
    """Values decoded as they would be sent (a key move's old row, an UPDATE's new row decoded with its
    old one), for sent_columns."""
    parts = [_COUNT.pack(len(values))]
    for value in values:
        if value is None or value is UNCHANGED:
            parts.append(b"n" if value is None else b"u")
        else:
            raw = value.encode() if isinstance(value, str) else value
            parts += (b"t", _USIZE.pack(len(raw)), raw)
    return Sent(b"".join(parts), 0)


def sent_columns(sent: Sequence[Sent], width: int, table: str) -> tuple[list[Any], Any]:
    """Rows of `width` values as sent, decoded a column at a time for all rows at once: each column as an
    Arrow string array (NULL where the value is NULL or was not sent), and where a value was not sent (a
    rows x width boolean array). Value by value (_tuple) this was 40 % of an executor's reading of a
    batch (docs/performance.md)."""
    import numpy as np
    import pyarrow as pa

    n = len(sent)
    datas = [s.data for s in sent]
    sizes = np.fromiter(map(len, datas), np.int64, n)
    ends = np.cumsum(sizes)
    buf = np.frombuffer(b"".join(datas), np.uint8)
    pos = np.fromiter((s.at for s in sent), np.int64, n) + ends - sizes
    if n and (pos + 2 > ends).any():
        raise ProtocolError(_TUPLE_TOO_SHORT)
    counts = buf[pos].astype(np.int64) << 8 | buf[pos + 1]
    if (counts != width).any():
        raise ValueError(f"{table}: a tuple of {int(counts[counts != width][0])} values for {width} columns")
    pos += 2
    columns, unsent = [], np.zeros((n, width), bool)
    for j in range(width):
        if (pos >= ends).any():
            raise ProtocolError(_TUPLE_TOO_SHORT)
        kind = buf[pos]
        sized = (kind == _TEXT) | (kind == _BINARY)
        unsent[:, j] = kind == _UNCHANGED
        known = sized | unsent[:, j] | (kind == _NULL)
        if not known.all():
            raise ProtocolError(f"unknown tuple value kind {chr(kind[~known][0])!r}")
        rows = np.flatnonzero(sized)
        at = pos[rows]
        if (at + 5 > ends[rows]).any():
            raise ProtocolError(_TUPLE_TOO_SHORT)
        size = (buf[at + 1].astype(np.int64) << 24 | buf[at + 2].astype(np.int64) << 16
                | buf[at + 3].astype(np.int64) << 8 | buf[at + 4])
        pos += 1
        pos[rows] = at + 5 + size
        if (pos > ends).any():
            raise ProtocolError(_TUPLE_TOO_SHORT)
        lengths = np.zeros(n, np.int64)
        lengths[rows] = size
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = buf[np.repeat(at + 5 - offsets[rows], size) + np.arange(offsets[-1])]
        small = offsets[-1] < 2**31  # else 64-bit offsets
        column = pa.Array.from_buffers(
            pa.string() if small else pa.large_string(), n,
            [pa.py_buffer(np.packbits(sized, bitorder="little")),
             pa.py_buffer(offsets.astype(np.int32) if small else offsets), pa.py_buffer(values)],
            null_count=n - len(rows))
        try:
            column.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise ProtocolError(f"{table}: a value that is not UTF-8 ({exc})") from None
        columns.append(column)
    return columns, unsent


@dataclass
class Transaction:
    begin: Begin
    commit: Commit | None = None
    changes: list[tuple[Relation, Insert | Update | Delete | Truncate]] = field(default_factory=list)
    """Row changes in order, each with its table as the stream described it when it came."""


Change = Insert | Update | Delete | Truncate


def table_name(relation: Relation) -> str:
    """schema.table"""
    return relation.qualified


def transactions(messages: Iterable[bytes], relations: dict[int, Relation] | None = None) -> Iterator[Transaction]:
    """Whole transactions from a stream of messages, in commit order. `relations` carries the tables
    described so far (by OID) from one call to the next; a RELATION message replaces its entry, so a
    change is always read with the columns the table had when it was made."""
    current: Transaction | None = None
    for event in _events(messages, relations):
        if isinstance(event, Begin):
            current = Transaction(event)
        elif isinstance(event, Commit):
            current.commit = event
            yield current
        else:
            current.changes.append(event[1:])


def changes(messages: Iterable[bytes], relations: dict[int, Relation] | None = None,
            tables: Collection[str] | None = None, share: tuple[int, int] | None = None,
            sent: bool = False) -> Iterator[tuple[Begin, Relation, Change]]:
    """Each row change as it comes, with its transaction's BEGIN and its table: what `transactions`
    gives, holding no transaction whole (one can be millions of changes). `tables` (schema.table): only
    their changes; an INSERT, UPDATE or DELETE of another table is passed over undecoded. `share` (k, n): only the changes of transactions whose xid is k modulo n, the others passed
    over undecoded, so that n readers of the same stream take each transaction once between them.
    `sent`: see decode."""
    for event in _events(messages, relations, tables, share, sent):
        if isinstance(event, tuple):
            yield event


def _events(messages: Iterable[bytes], relations: dict[int, Relation] | None, tables: Collection[str] | None = None,
            share: tuple[int, int] | None = None, sent: bool = False
            ) -> Iterator[Begin | Commit | tuple[Begin, Relation, Change]]:
    """BEGIN, each change (with its BEGIN and table) and COMMIT, checked for their order; with `tables`,
    the row changes of other tables left out before decoding (decoding a row is 30 times the check);
    with `share`, those of the other readers' transactions (see changes)."""
    relations = {} if relations is None else relations
    begin: Begin | None = None
    others: set[int] = set()
    """OIDs of described tables not among `tables`."""
    theirs = False
    """Whether the open transaction is another reader's."""
    for data in messages:
        if (theirs or others) and data and data[0] in _CHANGES and (
                theirs or data[0] != _TRUNCATE and _OID.unpack_from(data, 1)[0] in others):
            if begin is None:
                raise ProtocolError("a row change outside a transaction")
            continue
        message = decode(data, sent)
        if type(message) in _ROW_TYPES:  # the most of any stream: asked first
            if begin is None:
                raise ProtocolError(f"a {type(message).__name__} outside a transaction")
            relation = relations.get(message.relation)
            if relation is None:
                raise ProtocolError(f"a change to relation {message.relation}, which no RELATION message described")
            yield begin, relation, message
        elif isinstance(message, Relation):
            relations[message.oid] = message
            if tables is not None and table_name(message) not in tables:
                others.add(message.oid)
            else:
                others.discard(message.oid)
        elif isinstance(message, Begin):
            if begin is not None:
                raise ProtocolError(f"BEGIN of xid {message.xid} inside xid {begin.xid}")
            begin = message
            theirs = share is not None and message.xid % share[1] != share[0]
            yield message
        elif isinstance(message, Commit):
            if begin is None:
                raise ProtocolError(f"COMMIT at {message.commit_lsn} without a BEGIN")
            begin, theirs = None, False
            yield message
        elif isinstance(message, Truncate):
            if begin is None:
                raise ProtocolError(f"a {type(message).__name__} outside a transaction")
            for oid in message.relations:
                if oid not in relations:
                    raise ProtocolError(f"a change to relation {oid}, which no RELATION message described")
                yield begin, relations[oid], message


@dataclass
class BatchPlan:
    """A batch as its planning pass saw it stream by (plan_batch): what the run needs before Spark's
    executors read the changes, and none of the changes."""

    transactions: int = 0
    """The batch's transactions that changed a published table."""
    newest: dt.datetime | None = None
    """When the last of them committed."""
    relations: dict[int, Relation] = field(default_factory=dict)
    """The relations the chosen tables' changes came with, first seen first, by id: a column dropped
    mid-batch keeps the values of the changes made before the drop."""
    newest_of: dict[str, dt.datetime] = field(default_factory=dict)
    """Each chosen table the batch changed: when its newest change committed."""
    oldest_of: dict[str, dt.datetime] = field(default_factory=dict)
    truncates: dict[str, list[int]] = field(default_factory=dict)
    """Each table's TRUNCATE positions (Lsn.row_pos of its COMMIT and place)."""
    unchanged: set[str] = field(default_factory=set)
    """Tables an UPDATE of which did not send a TOASTed value it left as it was."""


class PlacesUnknown(Exception):
    """A TRUNCATE came after changes of its table in its transaction, and the plan's messages left some of
    those out (plan_batch's `runs`): its place needs every change."""


def plan_batch(messages: Iterable[bytes], batch: LsnRange, tables: Collection[str],
               moved: Callable[[Relation, Update], bool], runs: bool = False) -> BatchPlan:
    """The plan of the transactions committing in `batch` among `messages` (a peek's, which may begin
    with transactions of an earlier batch the slot still holds) for `tables` (schema.table): where
    placing every change (changes.placed_changes) puts each TRUNCATE, and the rest of BatchPlan.
    `runs`: the messages are slot.peek_runs' (the first change of each run); PlacesUnknown when a
    TRUNCATE's place then cannot be told.

    A large batch streams by here once a run, so this is one flat loop that looks at each change's
    header and decodes only what can move a place: an UPDATE that sent its old key, which `moved` tells
    a key move (a DELETE and an INSERT: two places). Through changes() and placed_changes it took
    4-8 µs a message, 2 to 4 times the server's decoding (docs/performance.md)."""
    plan = BatchPlan()
    relations: dict[int, Relation] = {}
    chosen: dict[int, Relation] = {}
    """The chosen tables' relations by OID, as last described."""
    begin: Begin | None = None
    inside = counted = False
    places: dict[str, int] = {}
    for data in messages:
        if not data:
            raise ProtocolError("an empty message")
        kind = data[0]
        if kind in _CHANGES:
            if begin is None:
                raise ProtocolError(f"a {chr(kind)} message outside a transaction")
            if not inside:  # an earlier batch's, still in the slot
                continue
            if not counted:
                plan.transactions, plan.newest, counted = plan.transactions + 1, begin.commit_time, True
            if kind == _TRUNCATE:
                message = decode(data)
                oids = message.relations
            elif len(data) < 6:
                raise ProtocolError(f"a {chr(kind)} message of {len(data)} bytes")
            elif data[5] not in _MARKERS[kind]:
                raise ProtocolError(f"a {chr(kind)} message with {chr(data[5])!r} before its tuple")
            else:
                oids = _OID.unpack_from(data, 1)
            for oid in oids:
                relation = chosen.get(oid)
                if relation is None:
                    if oid not in relations:
                        raise ProtocolError(f"a change to relation {oid}, which no RELATION message described")
                    continue
                name = relation.qualified
                place = places.get(name)
                if place is None:  # the table's first change in this transaction
                    place, at = 0, begin.commit_time
                    plan.newest_of[name] = max(plan.newest_of.get(name, at), at)
                    plan.oldest_of[name] = min(plan.oldest_of.get(name, at), at)
                    plan.relations.setdefault(id(relation), relation)  # held here: its id stays its own
                elif id(relation) not in plan.relations:  # described again mid-transaction
                    plan.relations[id(relation)] = relation
                if kind == _UPDATE:
                    marker = data[5]
                    if marker == _KEY or marker == _OLD:
                        update = decode(data)
                        place += moved(relation, update)
                        if UNCHANGED in update.new:
                            plan.unchanged.add(name)
                    elif name not in plan.unchanged and UNCHANGED in _tuple(data, 6, decoded=False)[0]:
                        plan.unchanged.add(name)
                elif kind == _TRUNCATE:
                    if runs and place:
                        raise PlacesUnknown(name)
                    plan.truncates.setdefault(name, []).append(begin.final_lsn.row_pos(place + 1))
                places[name] = place + 1
        elif kind == _BEGIN:
            if begin is not None:
                raise ProtocolError("BEGIN inside a transaction")
            begin = decode(data)
            inside, counted, places = batch.holds(begin.final_lsn), False, {}
        elif kind == _COMMIT:
            if begin is None:
                raise ProtocolError("COMMIT without a BEGIN")
            begin = None
        elif kind == _RELATION:
            relation = decode(data)
            relations[relation.oid] = relation
            if table_name(relation) in tables:
                chosen[relation.oid] = relation
            else:
                chosen.pop(relation.oid, None)
        else:
            decode(data)  # TYPE, ORIGIN, MESSAGE: nothing to plan; another kind is refused there
    return plan
