"""The batch log: one small Delta table per partition set, a row per change batch fully applied.

A change batch is a run of several steps (bronze for each table, then silver
for each). Only when all of them are committed is the batch done, and only then
may the next batch start after it: a batch whose run died after bronze but
before silver must run again, or its changes never reach silver. The batch log
is committed last, by its own step after every silver step of the batch, so an
entry proves the batch is complete. The sensors read it (without Spark, see
deltalog.py) to decide where the next batch starts.

MySQL: one log per source (`<lake>/<source>/_batch_log`), since a batch reads
the binlog for every table. DynamoDB: one per table (`<lake>/<source>/<table>/
batch_log`), since each table has its own stream and its own batches.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ingest.lake.commits import Txn
from ingest.lake.deltalog import our_commits

KIND = "batch"


@dataclass(frozen=True)
class LoggedBatch:
    """A batch whose every step is committed, as the batch log records it."""

    batch: str
    start: Any
    end: Any
    """Where the batch really ended (the bronze commit's `end`): the next batch starts here."""
    tables: dict[str, int]
    """Changes per table (tables without changes in the batch are left out)."""
    logged_at: dt.datetime | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    """Tables the batch left out (quarantined), with why: their changes in it are not in the lake."""


def logged_batches(log_path: str, client: Any = None) -> Iterator[LoggedBatch]:
    """The batch log's entries, newest commit first (nothing before the first batch)."""
    for info in our_commits(log_path, client):
        meta = info.metadata
        if meta.get("kind") == KIND:
            yield LoggedBatch(meta["batch"], meta["start"], meta["end"], dict(meta.get("tables") or {}),
                              info.timestamp, dict(meta.get("skipped") or {}))


def is_logged(log_path: str, batch: str, client: Any = None, look_back: int = 100) -> bool:
    """Whether `batch` is in the log, looking at the newest `look_back` entries."""
    for n, entry in enumerate(logged_batches(log_path, client)):
        if entry.batch == batch:
            return True
        if n + 1 >= look_back:
            break
    return False


@dataclass(frozen=True)
class BatchLogWrite:
    """Record one batch as complete; safe to repeat (one txn id per batch)."""

    source: str
    scope: str | None
    """The table, for a log of one table's batches (DynamoDB); None for a source-wide log."""
    batch: str
    start: Any
    end: Any
    tables: dict[str, int]
    extra: dict[str, Any] = field(default_factory=dict)
    """Figures for the UI only (e.g. the source's server_id)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Tables left out of the batch, with why: each needs a new snapshot taken after this batch's end."""

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from ingest.lake.write import append

        now = dt.datetime.now(dt.timezone.utc)
        row = (self.batch, self.scope, json.dumps(self.start, sort_keys=True), json.dumps(self.end, sort_keys=True),
               json.dumps(self.tables, sort_keys=True), sum(self.tables.values()), now)
        df = spark.createDataFrame([row], "batch string, scope string, start string, `end` string, tables string, "
                                          "rows long, logged_at timestamp")
        meta = {"kind": KIND, "source": self.source, "scope": self.scope, "batch": self.batch,
                "start": self.start, "end": self.end, "tables": self.tables,
                **({"skipped": self.skipped} if self.skipped else {})}
        scope = f"{self.source}.{self.scope}" if self.scope else self.source
        outcome = append(df, path, meta, Txn(f"batchlog:{scope}:{self.batch}", 0))
        log(f"batch log {scope}: batch {self.batch} complete"
            + ("" if outcome.committed else " (already logged)"))
        return {"batch": self.batch, "start": self.start, "end": self.end, "tables_changed": len(self.tables),
                "rows": sum(self.tables.values()), "committed": outcome.committed, "delta_version": outcome.version,
                **({"skipped": self.skipped} if self.skipped else {}), **self.extra}
