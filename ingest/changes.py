"""The change shape every source maps onto."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ChangeOp(str, Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    TRUNCATE = "truncate"
    """Every row of the table older than this change is gone."""


@dataclass(frozen=True)
class ChangeRecord:
    """One row change, in the type contract's values.

    `row` is the image after the change (for a delete: the image before it),
    `before` the image before an update. `pos` orders all changes of a source.
    """

    table: str
    op: ChangeOp
    pos: int
    row: dict[str, Any]
    before: dict[str, Any] | None = None
    committed_at: dt.datetime | None = None
    txid: str | None = None
    origin: str | None = None
    """Who made the change, when the source says: `ttl` for DynamoDB's TTL expiry deletes."""


class Unchanged:
    """A value the source did not send because the change left it as it was (PostgreSQL: a TOASTed
    value an UPDATE did not touch). Silver keeps the value it has; it is never a NULL."""

    _instance: Unchanged | None = None

    def __new__(cls) -> Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged()


@dataclass(frozen=True)
class TableChanges:
    """One table's share of a change batch."""

    records: list[ChangeRecord]
    columns: list[tuple[str, str]]
    """Every column the records carry, with its Spark type, in the table's order."""
    sliced: bool = False
    """The batch was too large to read here: `records` is empty and Spark's executors read this table's
    changes, one slice of the batch each (SourceBatch.slices)."""
    truncates: tuple[int, ...] = ()
    """Sliced only: the positions of the table's TRUNCATE records, as the planning pass saw them."""
    newest: dt.datetime | None = None
    """Sliced only: when the table's newest change in the batch committed, as the planning pass saw it."""
    oldest: dt.datetime | None = None
    """Sliced only: when its oldest change committed (silver's lag is that change's: the longest wait)."""
    unchanged: bool = False
    """Sliced only: a change did not send a value it left as it was (PostgreSQL's TOAST): bronze gets
    `_unchanged`."""


@dataclass(frozen=True)
class SourceBatch:
    """What a change reader produces for one batch: the changes per table it touched, and the
    batch's positions (committed with the rows) and figures (for the UI only)."""

    key: str
    tables: dict[str, TableChanges]
    positions: dict[str, Any]
    extra: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)
    """Tables left out of the batch (unreadable until fixed), with why."""
    slices: list[dict[str, Any]] = field(default_factory=list)
    """For a batch read on Spark's executors: the parts of its range that decode on their own, in the
    source's terms (metadata), which together are the whole batch."""
