"""Change batches of one DynamoDB table's stream: where a batch starts, reading it, committing it.

Batches are numbered per table (`00000001`, ...). Batch n starts where batch
n-1 ended, as committed in bronze; batch 1 starts at the snapshot's stream
positions. Why not a range fixed by the sensor, as for the binlog: DynamoDB
has no cheap head position to read (only reading records tells where a shard
ends), so a batch's end is the checkpoint after the records it read,
committed in the same Delta commit as the rows. A committed batch never
reads again (Delta's txn id); one that died before committing had written
nothing, and its re-run reads from the same start.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ingest.sources.dynamodb.client import ClientSettings
from ingest.sources.dynamodb.errors import StreamGap, resnapshot_fix
from ingest.sources.dynamodb.positions import StreamCheckpoint, batch_key, batch_ordinal


class BatchOrderError(RuntimeError):
    """A batch asked for before the one it continues from was committed."""


def choose_start(source: str, table: str, key: str, previous_end: StreamCheckpoint | None,
                 snapshot_positions: StreamCheckpoint | None) -> StreamCheckpoint:
    """Where batch `key` starts (pure): the previous batch's end, or the snapshot's positions for the
    first batch and after a snapshot taken on a new stream."""
    n = batch_ordinal(key)
    if n > 1 and previous_end is None:
        raise BatchOrderError(
            f"{source}/{table}: batch {key} continues batch {batch_key(n - 1)}, which has not committed to bronze. "
            f"Fix: materialize {source}/{table}/changes for partition {batch_key(n - 1)} first (the sensor does "
            "this in order)")
    if snapshot_positions is not None and (previous_end is None
                                           or snapshot_positions.stream_arn != previous_end.stream_arn):
        return snapshot_positions
    if previous_end is None:
        raise BatchOrderError(f"{source}/{table}: batch {key} needs a finished snapshot to start from. Fix: "
                              f"materialize {source}/{table}/snapshot first")
    return previous_end


@dataclass(frozen=True)
class StreamBatchWrite:
    """The changes asset's output: read batch `batch_key` of the table's stream and append it to bronze."""

    source: str
    table: str
    batch_key: str
    settings: ClientSettings
    declared: dict[str, str]
    max_records: int
    page_limit: int

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from ingest.lake.bronze import append_changes
        from ingest.lake.commits import last_commit
        from ingest.lake.tables import SNAPSHOT, sibling_location
        from ingest.sources.dynamodb.streams import read_stream_batch, stream_of
        from ingest.sources.dynamodb.types import TableTypes

        committed = last_commit(path, kind="bronze", batch=self.batch_key)
        if committed is not None:
            log(f"bronze {self.source}/{self.table} batch {self.batch_key}: already committed; nothing read")
            return {"committed": False, "delta_version": committed.version,
                    **{k: committed.metadata[k] for k in ("start", "end", "records") if k in committed.metadata}}
        n = batch_ordinal(self.batch_key)
        previous = None if n == 1 else last_commit(path, kind="bronze", batch=batch_key(n - 1))
        snap = last_commit(sibling_location(path, SNAPSHOT), kind="snapshot", complete=True)
        start = choose_start(
            self.source, self.table, self.batch_key,
            StreamCheckpoint.from_metadata(previous.metadata["end"]) if previous else None,
            StreamCheckpoint.from_metadata(snap.metadata["stream_positions"]) if snap else None)
        stream_arn, desc = stream_of(self.settings.dynamodb(), self.source, self.table)
        if stream_arn != start.stream_arn:
            raise StreamGap(
                f"source {self.source}, table {self.table}: the table's stream is now {stream_arn}, not "
                f"{start.stream_arn} where the last batch ended (the stream was replaced: disabled and enabled "
                f"again, or the table re-created); "
                f"changes in between are lost. {resnapshot_fix(self.source, self.table)}")
        types = TableTypes.build(self.table, desc["KeySchema"], desc["AttributeDefinitions"], self.declared)
        log(f"bronze {self.source}/{self.table} batch {self.batch_key}: reading the stream from {start.summary()}")
        batch = read_stream_batch(self.settings.streams(), self.source, self.table, types, start,
                                  self.max_records, self.page_limit)
        positions = {"start": start.to_metadata(), "end": batch.end.to_metadata(), "records": len(batch.records),
                     "stream": stream_arn}
        meta = append_changes(spark, path, self.source, self.table, self.batch_key, batch.records,
                              types.spark_columns(), positions, log)
        newest = max((r.committed_at for r in batch.records if r.committed_at), default=None)
        lag = (dt.datetime.now(dt.timezone.utc) - newest).total_seconds() if newest else 0.0
        return {**meta, "pages": batch.pages, "iterator_refreshes": batch.iterator_refreshes,
                "shards_finished": len(batch.shards_finished), "lag_seconds": round(lag, 3),
                "ttl_deletes": sum(r.origin == "ttl" for r in batch.records), "position": batch.end.summary()}
