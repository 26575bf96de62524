"""Change batches of one DynamoDB table's stream: where a batch starts (ingest/adapters/dynamodb.py reads
and commits it).

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
