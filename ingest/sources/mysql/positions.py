"""Binlog positions: a frozen, ordered value type and the numeric `_pos` key.

Positions order by (file sequence number, offset), never as strings:
"mysql-bin.000010" sorts before "mysql-bin.000009" as text.

`_pos` packs a position and a row index into one exact integer that Delta
stores as DECIMAL(38,0) and the ordered merge compares:

    _pos = seq * 10**16 + offset * 10**6 + row

offset < 2**32 (the binlog protocol's log_pos is 4 bytes) fits in 10 digits,
row < 10**6, seq < 10**6 (MariaDB's .NNNNNN suffix). Row 0 is reserved for
snapshot rows: a snapshot read at position P holds every transaction that
ended at or before P, and the first row of an event starting at P gets row 1,
so any change logged at or after P is newer than the snapshot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SEQ_FACTOR = 10**16
OFFSET_FACTOR = 10**6
MAX_ROW = OFFSET_FACTOR - 1
MAX_OFFSET = 10**10 - 1
MAX_SEQ = 10**6 - 1
SNAPSHOT_ROW = 0

_FILE_RE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d{1,7})$")


def split_binlog_file(file: str) -> tuple[str, int]:
    """'mysql-bin.000012' -> ('mysql-bin', 12)."""
    match = _FILE_RE.match(file or "")
    if not match:
        raise ValueError(f"binlog file name is not of the form <basename>.<number>: {file!r}")
    return match.group("base"), int(match.group("seq"))


@dataclass(frozen=True)
class BinlogPosition:
    """A point in a server's binlog: the offset where the next event starts."""

    file: str
    pos: int
    gtid: str | None = field(default=None, compare=False)
    """The server's GTID position (gtid_binlog_pos) at this point, when known; not used for ordering."""

    def __post_init__(self) -> None:
        split_binlog_file(self.file)
        if not isinstance(self.pos, int) or isinstance(self.pos, bool) or not 0 <= self.pos <= MAX_OFFSET:
            raise ValueError(f"binlog offset must be an integer in [0, {MAX_OFFSET}]: {self.pos!r}")

    @property
    def seq(self) -> int:
        return split_binlog_file(self.file)[1]

    @property
    def basename(self) -> str:
        return split_binlog_file(self.file)[0]

    def _key(self) -> tuple[int, int]:
        return (self.seq, self.pos)

    def __lt__(self, other: BinlogPosition) -> bool:
        return self._key() < other._key()

    def __le__(self, other: BinlogPosition) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: BinlogPosition) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: BinlogPosition) -> bool:
        return self._key() >= other._key()

    def row_pos(self, row: int = SNAPSHOT_ROW) -> int:
        """The `_pos` of row `row` of an event starting here (row 0: a snapshot read here)."""
        return encode_pos(self.seq, self.pos, row)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    def to_metadata(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file": self.file, "pos": self.pos}
        if self.gtid is not None:
            data["gtid"] = self.gtid
        return data

    @classmethod
    def from_metadata(cls, data: dict[str, Any]) -> BinlogPosition:
        try:
            return cls(file=data["file"], pos=int(data["pos"]), gtid=data.get("gtid"))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a binlog position: {data!r}") from exc

    @classmethod
    def from_pos(cls, value: int, basename: str) -> BinlogPosition:
        """Back from a `_pos` to the position it was read at (the row index is dropped)."""
        seq, offset, _ = decode_pos(value)
        return cls(file=f"{basename}.{seq:06d}", pos=offset)


def encode_pos(seq: int, offset: int, row: int) -> int:
    if not 0 <= seq <= MAX_SEQ:
        raise ValueError(f"binlog sequence number out of range: {seq}")
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"binlog offset out of range: {offset}")
    if not 0 <= row <= MAX_ROW:
        raise ValueError(f"row index out of range: {row}")
    return seq * SEQ_FACTOR + offset * OFFSET_FACTOR + row


def decode_pos(value: int) -> tuple[int, int, int]:
    value = int(value)
    if value < 0:
        raise ValueError(f"_pos must not be negative: {value}")
    seq, rest = divmod(value, SEQ_FACTOR)
    offset, row = divmod(rest, OFFSET_FACTOR)
    return seq, offset, row


@dataclass(frozen=True)
class BatchRange:
    """A change batch: the transactions that begin in [start, end).

    Its partition key spells both ends with fixed-width numbers, e.g.
    `000003.0000001234-000004.0000000004`; the binlog basename is the source's.
    """

    start: BinlogPosition
    end: BinlogPosition

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"batch end {self.end} is before its start {self.start}")

    @property
    def key(self) -> str:
        return f"{self.start.seq:06d}.{self.start.pos:010d}-{self.end.seq:06d}.{self.end.pos:010d}"

    @classmethod
    def from_key(cls, key: str, basename: str) -> BatchRange:
        match = _KEY_RE.match(key or "")
        if not match:
            raise ValueError(f"not a change batch key (want NNNNNN.NNNNNNNNNN-NNNNNN.NNNNNNNNNN): {key!r}")
        a, b, c, d = (int(g) for g in match.groups())
        return cls(BinlogPosition(f"{basename}.{a:06d}", b), BinlogPosition(f"{basename}.{c:06d}", d))

    def to_metadata(self) -> dict[str, Any]:
        return {"start": self.start.to_metadata(), "end": self.end.to_metadata()}


_KEY_RE = re.compile(r"^(\d{6})\.(\d{10})-(\d{6})\.(\d{10})$")
