"""What every commit of ours carries (reading it back from the Delta log: lake/deltalog.py).

A commit that adds rows carries the source position it covers in the same
commit (DESIGN principle 1): `userMetadata` holds a JSON document with the
positions, and Delta's idempotent transaction id (txnAppId / txnVersion) makes
a repeated write a no-op. If Dagster's metadata and the Delta log disagree,
the Delta log wins: readers here look only at the log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

MARKER = "ingest"
"""Key whose presence tells our commits from anybody else's (OPTIMIZE, hand edits)."""


@dataclass(frozen=True)
class Txn:
    """Delta's idempotent transaction id: a write whose version is not above the
    last one committed for the same app id is skipped by Delta itself."""

    app_id: str
    version: int

    def __post_init__(self) -> None:
        if not self.app_id or len(self.app_id) > 200:
            raise ValueError(f"txn app id must be 1..200 characters: {self.app_id!r}")
        if self.version < 0:
            raise ValueError(f"txn version must not be negative: {self.version}")


@dataclass(frozen=True)
class BronzeCommit:
    """What a bronze append records: one table's share of a change batch, with the batch's positions."""

    source: str
    table: str
    batch: str
    positions: dict[str, Any]
    """The batch's start and end (and the like) in the source's terms: the next batch starts at `end`."""
    summary: dict[str, Any] | None = None
    """What silver's merge asks of the batch's rows, when they were counted here (see BatchSummary): the
    merge then reads it from this commit instead of running a Spark job over bronze."""

    @property
    def txn(self) -> Txn:
        return Txn(f"bronze:{self.source}:{self.batch}", 0)

    def metadata(self) -> dict[str, Any]:
        return {"kind": "bronze", "source": self.source, "table": self.table, "batch": self.batch, **self.positions,
                **({"summary": self.summary} if self.summary is not None else {})}


@dataclass(frozen=True)
class SilverCommit:
    """What a silver merge records. One of: a snapshot merged (`log_start`: where its change log starts),
    bronze caught up since a snapshot's log start (`catch_up_from`), or a change batch merged (`batch`,
    ending at `end`). Every one names the snapshot silver is built on."""

    source: str
    table: str
    snapshot_id: str
    log_start: Any = None
    catch_up_from: Any = None
    batch: str | None = None
    end: Any = None

    @property
    def txn(self) -> Txn:
        what = (f"snapshot:{self.snapshot_id}" if self.log_start is not None else
                f"catchup:{self.snapshot_id}" if self.catch_up_from is not None else self.batch)
        return Txn(f"silver:{self.source}.{self.table}:{what}", 0)

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"kind": "silver", "source": self.source, "table": self.table,
                                "snapshot_id": self.snapshot_id}
        if self.log_start is not None:
            return {**meta, "from": "snapshot", "log_start": self.log_start}
        # a commit made after the snapshot's merge and its catch-up: the table is caught up
        if self.catch_up_from is not None:
            return {**meta, "catch_up_from": self.catch_up_from, "caught_up": True}
        return {**meta, "batch": self.batch, "end": self.end, "caught_up": True}


def waves(items: Sequence[T], per_commit: int) -> list[list[T]]:
    """Work units (snapshot chunks, Scan segments) grouped per Delta commit, in order."""
    if per_commit < 1:
        raise ValueError(f"per_commit must be at least 1: {per_commit}")
    return [list(items[i:i + per_commit]) for i in range(0, len(items), per_commit)]


def unfinished_snapshot(last_meta: dict | None, fingerprint: str) -> dict | None:
    """The unfinished snapshot (its newest wave's commit metadata) to resume, or None to start afresh (pure)."""
    if not last_meta or last_meta.get("kind") != "snapshot" or last_meta.get("complete"):
        return None
    if last_meta.get("fingerprint") != fingerprint:
        return None  # the table changed shape mid-snapshot: its waves cannot be mixed with new ones
    return last_meta


def encode_user_metadata(metadata: dict[str, Any], txn: Txn) -> str:
    return json.dumps({MARKER: 1, "txn": [txn.app_id, txn.version], **metadata}, sort_keys=True,
                      separators=(",", ":"), default=str)


def decode_user_metadata(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get(MARKER) == 1 else None


@dataclass(frozen=True)
class CommitInfo:
    version: int
    operation: str
    metadata: dict[str, Any]
    metrics: dict[str, str]
    timestamp: Any = None
    """When Delta committed it (a datetime)."""
