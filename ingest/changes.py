"""The change shape every source maps onto."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
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
