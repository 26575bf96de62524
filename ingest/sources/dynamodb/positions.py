"""Stream positions of DynamoDB: shard lineage, per-shard checkpoints and `_pos` (pure).

Why `_pos` keeps each item's changes in order
---------------------------------------------
DynamoDB writes all changes of one item, in order, to the shard that owns the
item's key at that moment. Shards never merge; a shard that closes (a split,
or the routine roll-over every few hours) hands its key range to child shards
that record their parent (`ParentShardId`). So an item's history is a chain of
shards, each a child of the one before, and within a shard sequence numbers
grow with time.

Each shard gets a generation: its parent's plus one (roots: the anchor's
highest plus one, or 0 on a first read). Then

    _pos = generation * 10**33 + sequence number

orders an item's changes: inside one shard by sequence number, and across a
split by generation, because a child's generation is larger than every
ancestor's whatever the sequence numbers say. Changes of different items may
compare any way; the ordered merge only ever compares changes of one key.

Generations are not in DynamoDB's answers, so they are carried in every
checkpoint, committed with the data, and a shard keeps its generation for
good. A new stream (disabled and enabled again) starts above the old one's
highest generation, so its changes still order after everything before.
Sequence numbers have at most 33 digits here (DynamoDB's are 21 to 28 in
practice); a longer one raises rather than collide.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

SEQ_DIGITS = 33
GENERATION_LIMIT = 10 ** (38 - SEQ_DIGITS)

TRIM_HORIZON = "TRIM_HORIZON"
AFTER_SEQUENCE_NUMBER = "AFTER_SEQUENCE_NUMBER"

OPEN = "open"
"""Records may follow the checkpoint."""
FINISHED = "finished"
"""Closed by DynamoDB and read to its end (or, before a snapshot, wholly older than it)."""


class StreamGap(RuntimeError):
    """Changes were lost from the stream before they were read: only a new snapshot helps."""


def record_pos(generation: int, sequence_number: str | int) -> int:
    seq = int(sequence_number)
    if not 0 <= seq < 10 ** SEQ_DIGITS:
        raise ValueError(f"sequence number {sequence_number} has more than {SEQ_DIGITS} digits")
    if not 0 <= generation < GENERATION_LIMIT:
        raise ValueError(f"shard generation {generation} is outside 0..{GENERATION_LIMIT - 1}")
    return generation * 10 ** SEQ_DIGITS + seq


@dataclass(frozen=True)
class Shard:
    """A shard as DescribeStream lists it."""

    shard_id: str
    parent_id: str | None
    start_seq: str
    end_seq: str | None
    """Set once DynamoDB closed the shard: no record will follow it."""

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> Shard:
        rng = shard.get("SequenceNumberRange", {})
        return cls(shard["ShardId"], shard.get("ParentShardId"), rng.get("StartingSequenceNumber", "0"),
                   rng.get("EndingSequenceNumber"))


@dataclass(frozen=True)
class ShardCheckpoint:
    shard_id: str
    parent_id: str | None
    generation: int
    sequence_number: str | None
    """The last record read (None: nothing read yet)."""
    status: str
    start_seq: str = "0"

    @property
    def iterator_type(self) -> str:
        """TRIM_HORIZON only for a shard never read; AFTER_SEQUENCE_NUMBER to resume."""
        return TRIM_HORIZON if self.sequence_number is None else AFTER_SEQUENCE_NUMBER

    def floor_pos(self) -> int:
        """A `_pos` below every record still to come from this shard."""
        if self.sequence_number is not None:
            return record_pos(self.generation, self.sequence_number)
        return record_pos(self.generation, max(int(self.start_seq) - 1, 0))

    def to_json(self) -> dict[str, Any]:
        return {"shard": self.shard_id, "parent": self.parent_id, "generation": self.generation,
                "seq": self.sequence_number, "iterator": self.iterator_type, "status": self.status,
                "start": self.start_seq}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShardCheckpoint:
        return cls(d["shard"], d.get("parent"), int(d["generation"]), d.get("seq"), d["status"], d.get("start", "0"))


@dataclass(frozen=True)
class StreamCheckpoint:
    """Where a table's stream has been read to, shard by shard."""

    stream_arn: str
    shards: tuple[ShardCheckpoint, ...]

    def get(self, shard_id: str) -> ShardCheckpoint | None:
        return next((s for s in self.shards if s.shard_id == shard_id), None)

    def with_shard(self, shard: ShardCheckpoint) -> StreamCheckpoint:
        others = tuple(s for s in self.shards if s.shard_id != shard.shard_id)
        return replace(self, shards=tuple(sorted((*others, shard), key=lambda s: (s.generation, s.shard_id))))

    def max_generation(self) -> int:
        return max((s.generation for s in self.shards), default=-1)

    def floor_pos(self) -> int:
        """Below every record still to come from the stream: the `_pos` of a snapshot read after this."""
        open_floors = [s.floor_pos() for s in self.shards if s.status == OPEN]
        return min(open_floors) if open_floors else record_pos(self.max_generation() + 1, 0)

    def readable(self) -> list[ShardCheckpoint]:
        """Open shards whose parent is finished or not tracked, parents first: a child's
        records come after its parent's, so it waits until the parent is read to its end."""
        status = {s.shard_id: s.status for s in self.shards}
        return [s for s in self.shards if s.status == OPEN and status.get(s.parent_id, FINISHED) == FINISHED]

    def to_metadata(self) -> str:
        return json.dumps({"stream": self.stream_arn, "shards": [s.to_json() for s in self.shards]},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_metadata(cls, value: str | Mapping[str, Any]) -> StreamCheckpoint:
        data = json.loads(value) if isinstance(value, str) else value
        return cls(data["stream"], tuple(ShardCheckpoint.from_json(s) for s in data["shards"]))

    def summary(self) -> str:
        open_ = sum(s.status == OPEN for s in self.shards)
        return f"{self.stream_arn.rsplit('/', 1)[-1]}: {open_} open of {len(self.shards)} shards"


def _generations(listing: Sequence[Shard], known: Mapping[str, int], root_generation: int) -> dict[str, int]:
    by_id = {s.shard_id: s for s in listing}
    out: dict[str, int] = dict(known)

    def gen(shard_id: str, seen: frozenset[str]) -> int:
        if shard_id in out:
            return out[shard_id]
        if shard_id in seen:
            raise StreamGap(f"shard lineage has a cycle through {shard_id}")
        parent = by_id[shard_id].parent_id
        value = gen(parent, seen | {shard_id}) + 1 if parent in by_id or parent in out else root_generation
        out[shard_id] = value
        return value

    for s in listing:
        gen(s.shard_id, frozenset())
    return out


def snapshot_checkpoint(stream_arn: str, listing: Sequence[Shard], anchor: StreamCheckpoint | None,
                        table: str = "") -> StreamCheckpoint:
    """The positions recorded before a scan starts.

    On the anchor's stream (a re-snapshot while changes sync), the anchor's
    checkpoints, joined with shards it has not seen. Otherwise every listed
    shard: closed ones count as finished (their records are all older than the
    scan), open ones are read from TRIM_HORIZON. Replaying records older than
    the scan is harmless: each carries the item's full new image, and every
    later change of that item is replayed after it.
    """
    if anchor is not None and anchor.stream_arn == stream_arn:
        return advance(anchor, listing, table)
    root = anchor.max_generation() + 1 if anchor is not None else 0
    gens = _generations(listing, {}, root)
    shards = [ShardCheckpoint(s.shard_id, s.parent_id, gens[s.shard_id], None,
                              FINISHED if s.end_seq is not None else OPEN, s.start_seq) for s in listing]
    return StreamCheckpoint(stream_arn, tuple(sorted(shards, key=lambda s: (s.generation, s.shard_id))))


def advance(checkpoint: StreamCheckpoint, listing: Sequence[Shard], table: str) -> StreamCheckpoint:
    """Join a fresh DescribeStream listing into the checkpoint.

    New shards get their generation from their parent. A shard we had not
    finished that the listing lost was trimmed before we read it, and a new
    shard whose parent we never saw and that is gone had records we can no
    longer read: both raise StreamGap. Finished shards that left the listing
    are dropped (their children carry the lineage on).
    """
    listed = {s.shard_id for s in listing}
    lost = [s for s in checkpoint.shards if s.shard_id not in listed and s.status != FINISHED]
    if lost:
        raise StreamGap(f"table {table}: shard {lost[0].shard_id} of stream {checkpoint.stream_arn} was trimmed "
                        f"(older than the stream's 24-hour retention) before it was read to its end"
                        f"{'' if lost[0].sequence_number is None else ' (read up to ' + lost[0].sequence_number + ')'}")
    known = {s.shard_id: s.generation for s in checkpoint.shards}
    by_id = {s.shard_id: s for s in listing}
    for s in listing:
        if s.shard_id in known:
            continue
        # walk up the new shards to the first known ancestor; none means a lost parent
        cur = s
        while cur.parent_id in by_id and cur.parent_id not in known:
            cur = by_id[cur.parent_id]
        if cur.parent_id is not None and cur.parent_id not in known and cur.parent_id not in by_id and checkpoint.shards:
            raise StreamGap(f"table {table}: shard {cur.shard_id} descends from shard {cur.parent_id}, which this "
                            "reader never saw and the stream no longer lists: its records were trimmed unread")
    gens = _generations(listing, known, checkpoint.max_generation() + 1)
    out = StreamCheckpoint(checkpoint.stream_arn,
                           tuple(s for s in checkpoint.shards if s.shard_id in listed or s.status != FINISHED))
    for s in listing:
        if out.get(s.shard_id) is None:
            out = out.with_shard(ShardCheckpoint(s.shard_id, s.parent_id, gens[s.shard_id], None, OPEN, s.start_seq))
    return out


def batch_key(ordinal: int) -> str:
    """Change batches of a stream are numbered; batch n starts where batch n-1 ended."""
    if ordinal < 1:
        raise ValueError(f"batch ordinals start at 1, not {ordinal}")
    return f"{ordinal:08d}"


def batch_ordinal(key: str) -> int:
    if not (len(key) == 8 and key.isdigit() and int(key) >= 1):
        raise ValueError(f"{key!r} is not a stream batch key (eight digits, from 00000001)")
    return int(key)
