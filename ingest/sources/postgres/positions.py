"""Log sequence numbers (LSNs) and the numeric `_pos` key of PostgreSQL changes.

An LSN is a 64-bit byte position in the WAL, written `X/Y` (two hex halves).
Changes are ordered by the LSN of their transaction's COMMIT, not by their
own: a transaction that began before a replication slot's consistent point
and commits after it is in the stream and not in the slot's exported
snapshot, although its first changes lie before that point.

    _pos = commit_lsn * 10**18 + index

where `index` counts the transaction's row changes from 1; index 0 is a
snapshot row read at the slot's consistent point, so any transaction that
commits at or after that point is newer than the snapshot. An LSN (< 2**64)
has at most 20 digits, so `_pos` fits Delta's DECIMAL(38,0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

INDEX_FACTOR = 10**18
MAX_INDEX = INDEX_FACTOR - 1
MAX_LSN = 2**64 - 1
SNAPSHOT_INDEX = 0

_LSN_RE = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")


@dataclass(frozen=True, order=True)
class Lsn:
    """A point in the WAL."""

    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool) or not 0 <= self.value <= MAX_LSN:
            raise ValueError(f"an LSN is an integer in [0, 2**64): {self.value!r}")

    @classmethod
    def parse(cls, text: str) -> Lsn:
        """'16/B374D848' -> Lsn(0x16B374D848)."""
        match = _LSN_RE.match(text or "")
        if not match:
            raise ValueError(f"not an LSN (two hex numbers joined by '/', e.g. 0/16B3748): {text!r}")
        return cls((int(match.group(1), 16) << 32) | int(match.group(2), 16))

    def __str__(self) -> str:
        return f"{self.value >> 32:X}/{self.value & 0xFFFFFFFF:X}"

    def row_pos(self, index: int = SNAPSHOT_INDEX) -> int:
        """The `_pos` of change `index` of a transaction committed here (0: a snapshot read here)."""
        return encode_pos(self, index)

    def to_metadata(self) -> dict[str, Any]:
        return {"lsn": str(self)}

    @classmethod
    def from_metadata(cls, data: dict[str, Any]) -> Lsn:
        try:
            return cls.parse(data["lsn"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an LSN position: {data!r}") from exc


def encode_pos(commit: Lsn, index: int) -> int:
    if not 0 <= index <= MAX_INDEX:
        raise ValueError(f"change index out of range: {index}")
    return commit.value * INDEX_FACTOR + index


def decode_pos(value: int) -> tuple[Lsn, int]:
    """Back from a `_pos` to the commit LSN and the change's index."""
    value = int(value)
    if value < 0:
        raise ValueError(f"_pos must not be negative: {value}")
    lsn, index = divmod(value, INDEX_FACTOR)
    return Lsn(lsn), index


@dataclass(frozen=True)
class LsnRange:
    """A change batch: the transactions that commit in [start, end)."""

    start: Lsn
    end: Lsn

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"a batch cannot end ({self.end}) before it starts ({self.start})")

    def holds(self, commit: Lsn) -> bool:
        """Whether a transaction whose COMMIT is at `commit` is the batch's."""
        return self.start <= commit < self.end

    @property
    def key(self) -> str:
        """The batch's partition key: both ends as 16 hex digits, so keys sort as the batches do."""
        return f"{self.start.value:016X}-{self.end.value:016X}"

    @classmethod
    def from_key(cls, key: str) -> LsnRange:
        start, sep, end = key.partition("-")
        try:
            if not sep or len(start) != 16 or len(end) != 16:
                raise ValueError
            return cls(Lsn(int(start, 16)), Lsn(int(end, 16)))
        except ValueError:
            raise ValueError(f"not a PostgreSQL batch key (<16 hex digits>-<16 hex digits>): {key!r}") from None
