"""The DynamoDB source's adapter: Scan segments read on Spark's executors and stream batches, committed by
the lake.

ingest/sources/dynamodb/ scans one segment on an executor and records the stream's positions; this
module builds the segments' DataFrame and drives the lake's snapshot protocol (ingest/lake/snapshot.py)
over them: waves of `segments_per_commit` segments, resumed with the segments not yet committed under
the same stream positions.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ingest.sources.dynamodb.cdc import choose_start
from ingest.sources.dynamodb.client import ClientSettings
from ingest.sources.dynamodb.errors import stream_replaced
from ingest.sources.dynamodb.positions import batch_key, batch_ordinal
from ingest.sources.dynamodb.positions import StreamCheckpoint, snapshot_checkpoint
from ingest.sources.dynamodb.scan import read_segment
from ingest.sources.dynamodb.types import TableTypes
from ingest.transforms import TableTransforms

DATA_SOURCE_NAME = "ingest_dynamodb_segments"


def read_segments_df(spark, settings: ClientSettings, table: str, types: TableTypes, segments: list[int],
                     total: int, consistent: bool, page_size: int | None, pos: int,
                     row_filter: dict[str, Any] | None = None):
    """A DataFrame over Scan `segments` of `total`, a Spark partition each, every row tagged `pos`; with a
    `row_filter`, only the items it holds for."""
    from ingest.lake.datasource import register_reader
    from ingest.lake.tables import spark_ident

    register_reader(spark, DATA_SOURCE_NAME, read_segment, "segments")
    ddl = ", ".join([*(f"{spark_ident(n)} {t}" for n, t in types.spark_columns()), "`_pos` decimal(38,0)"])
    spec = {"client": {"region": settings.region, "endpoint_url": settings.endpoint_url,
                       "max_attempts": settings.max_attempts},
            "table": table, "keys": list(types.key_columns), "columns": [(n, t.declared) for n, t in types.columns],
            "segments": segments, "total": total, "consistent": consistent, "page_size": page_size, "pos": str(pos),
            **({"where": row_filter} if row_filter else {})}
    reader = spark.read.format(DATA_SOURCE_NAME).option("ddl", ddl).option("spec", json.dumps(spec))
    settings = settings.resolved()
    # option names with "secret", "key" or "token" are redacted by Spark in plans and the UI
    for name, value in (("access_key_id", settings.access_key_id), ("secret_access_key", settings.secret_access_key),
                        ("session_token", settings.session_token)):
        if value:
            reader = reader.option(name, value)
    return reader.load()


@dataclass(frozen=True)
class ScanSnapshotWrite:
    """A snapshot asset's output: scan `table` into the Delta table the IO manager names."""


    source: str
    table: str
    settings: ClientSettings
    declared: dict[str, str]
    segments: int
    parallelism: int
    segments_per_commit: int
    consistent_read: bool
    page_size: int | None
    transforms: TableTransforms = TableTransforms("")
    row_filter: dict[str, Any] | None = None

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from ingest.lake.commits import waves
        from ingest.lake.deltalog import last_commit, table_version
        from ingest.lake.snapshot import SnapshotCommit, Waves, commit_waves, resume_point, snapshot_table_rows
        from ingest.lake.tables import BRONZE, sibling_location
        from ingest.sources.dynamodb.streams import describe_stream, stream_of

        started = time.monotonic()
        stream_arn, desc = stream_of(self.settings.dynamodb(), self.source, self.table)
        types = TableTypes.build(self.table, desc["KeySchema"], desc["AttributeDefinitions"], self.declared)
        transforms = checked(self.transforms, types)
        if self.row_filter:
            from ingest.sources.dynamodb.conditions import check_with_scan

            check_with_scan(self.settings.dynamodb(), self.table, self.row_filter)
        fingerprint = (types.fingerprint() + (f";transforms:{transforms.metadata()}" if transforms else "")
                       + (f";where:{json.dumps(self.row_filter, sort_keys=True)}" if self.row_filter else ""))
        # a snapshot resumes only with the same segmentation, and on the same stream: a stream replaced
        # mid-snapshot makes its recorded positions meaningless
        resume = resume_point(path, fingerprint, lambda last: last.get("segments_total") == self.segments and
                              StreamCheckpoint.from_metadata(last["stream_positions"]).stream_arn == stream_arn)
        if resume:
            snapshot_id, positions = resume["snapshot_id"], StreamCheckpoint.from_metadata(resume["stream_positions"])
            done, wave_no = list(resume["segments_done"]), resume["wave"] + 1
            log(f"resuming snapshot {snapshot_id} of {self.table}: {len(done)}/{self.segments} segments committed")
        else:
            snapshot_id, done, wave_no = uuid.uuid4().hex[:12], [], 0
            bronze = last_commit(sibling_location(path, BRONZE), kind="bronze")
            anchor = StreamCheckpoint.from_metadata(bronze.metadata["end"]) if bronze else None
            listing = describe_stream(self.settings.streams(), stream_arn, self.table, self.source).shards
            positions = snapshot_checkpoint(stream_arn, listing, anchor, self.table)
            log(f"starting snapshot {snapshot_id} of {self.table}; stream positions {positions.summary()}")
        pos = positions.floor_pos()
        pending = sorted(set(range(self.segments)) - set(done))

        def read(wave):
            df = read_segments_df(spark, self.settings, self.table, types, list(wave), self.segments,
                                  self.consistent_read, self.page_size, pos, self.row_filter)
            return df.coalesce(self.parallelism) if self.parallelism < len(wave) else df

        def progress(wave) -> dict[str, Any]:
            nonlocal done
            done = sorted({*done, *wave})
            return {"segments_done": done, "segments_total": self.segments,
                    "stream_positions": positions.to_metadata()}

        run = SnapshotCommit(self.source, self.table, snapshot_id, fingerprint, types.key_columns,
                             positions.summary(), pos, wave=wave_no)
        work = commit_waves(path, Waves(run, waves(pending, self.segments_per_commit), read, progress,
                                        lambda wave, rows: f"{len(done)}/{self.segments} segments, {rows} rows",
                                        transforms=transforms), log)
        seconds = time.monotonic() - started
        return {"rows": snapshot_table_rows(spark, path, snapshot_id),
                "rows_per_second": round(work.rows / max(seconds, 1e-9), 1), "seconds": round(seconds, 2),
                "snapshot_id": snapshot_id, "segments": self.segments,
                "resumed": bool(resume), "stream_positions": json.loads(positions.to_metadata()),
                "log_start_pos": str(pos), "key_columns": list(types.key_columns),
                "delta_version": table_version(path),
                **({"transformed_columns": transforms.metadata()} if transforms else {}),
                **({"row_filter": self.row_filter["expression"]} if self.row_filter else {})}


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
    transforms: TableTransforms = TableTransforms("")
    row_filter: dict[str, Any] | None = None

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from ingest.lake.bronze import append_changes
        from ingest.sources.dynamodb.conditions import condition
        from ingest.lake.deltalog import last_commit
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
            raise stream_replaced(self.source, self.table, stream_arn, start.stream_arn, "the last batch")
        types = TableTypes.build(self.table, desc["KeySchema"], desc["AttributeDefinitions"], self.declared)
        transforms = checked(self.transforms, types)
        log(f"bronze {self.source}/{self.table} batch {self.batch_key}: reading the stream from {start.summary()}")
        batch = read_stream_batch(self.settings.streams(), self.source, self.table, types, start,
                                  self.max_records, self.page_limit,
                                  condition(self.row_filter) if self.row_filter else None)
        positions = {"start": start.to_metadata(), "end": batch.end.to_metadata(), "records": len(batch.records),
                     "stream": stream_arn}
        meta = append_changes(spark, path, self.source, self.table, self.batch_key, batch.records,
                              types.spark_columns(), positions, log, transforms)
        newest = max((r.committed_at for r in batch.records if r.committed_at), default=None)
        lag = (dt.datetime.now(dt.timezone.utc) - newest).total_seconds() if newest else 0.0
        return {**meta, "pages": batch.pages, "iterator_refreshes": batch.iterator_refreshes,
                "shards_finished": len(batch.shards_finished), "lag_seconds": round(lag, 3),
                "ttl_deletes": sum(r.origin == "ttl" for r in batch.records), "position": batch.end.summary(),
                **({"records_read": batch.read} if self.row_filter else {})}


def checked(transforms: TableTransforms, types: TableTypes) -> TableTransforms:
    """A table's transforms checked against its columns; an attribute without one is transformed in `_item`."""
    return transforms.check(types.spark_columns(), types.key_columns, f"transform.{types.table}", in_image=True)


def silver_checkpoint(silver_path: str, snapshot_path: str) -> tuple[StreamCheckpoint, str] | None:
    """The stream checkpoint silver has merged up to, and what it is, from the Delta logs: the end of the
    newest batch merged since its snapshot, else that snapshot's stream positions (None: no snapshot
    merged)."""
    from ingest.lake.deltalog import commits, last_commit

    history = commits(silver_path)
    snapshot = next((c for c in history if c.metadata.get("from") == "snapshot"), None)
    if snapshot is None:
        return None
    # batches merge in order (each starts at its predecessor's end), so the newest merged is the furthest
    batch = next((c for c in history if c.metadata.get("batch") and c.version > snapshot.version), None)
    if batch is not None:
        return StreamCheckpoint.from_metadata(batch.metadata["end"]), f"the end of batch {batch.metadata['batch']}"
    snapshot_id = snapshot.metadata["snapshot_id"]
    snap = last_commit(snapshot_path, kind="snapshot", snapshot_id=snapshot_id, complete=True)
    if snap is None:
        return None
    return StreamCheckpoint.from_metadata(snap.metadata["stream_positions"]), f"the start of snapshot {snapshot_id}"


def keys_changed_since(settings: ClientSettings, source: str, table: str, types: TableTypes,
                       start: StreamCheckpoint, page_limit: int, per_read: int = 10_000) -> set[tuple]:
    """The keys of every stream record after `start`, up to the newest when it is called: a read that
    stops short of `per_read` records has read every shard to where it was then (reading again for
    records that arrived since could go on as long as a writer keeps writing)."""
    from ingest.sources.dynamodb.streams import read_stream_batch

    keys: set[tuple] = set()
    checkpoint = start
    while True:
        batch = read_stream_batch(settings.streams(), source, table, types, checkpoint, per_read, page_limit)
        keys.update(tuple(r.row.get(k) for k in types.key_columns) for r in batch.records)
        if len(batch.records) < per_read:
            return keys
        checkpoint = batch.end


def reconcile(spark, settings: ClientSettings, source: str, table: str, declared: dict[str, str], silver_path: str,
              snapshot_path: str, *, segments: int, parallelism: int, consistent_read: bool, page_size: int | None,
              page_limit: int, transforms: TableTransforms | None = None, row_filter: dict[str, Any] | None = None):
    """Compare silver's live rows with a parallel Scan of the table now. A Scan is no point in time, so
    every key the stream shows changed after silver's position, up to after the Scan, is left to the next
    batch; the key ranges come from a sample of silver's keys (DynamoDB keeps no order across a table)."""
    from ingest.lake.columns import lake_name
    from ingest.lake.merge import live_rows
    from ingest.lake.reconcile import Reconciliation, compare, sampled_boundaries
    from ingest.lake.write import lake_columns
    from ingest.sources.dynamodb.streams import stream_of

    started = time.monotonic()
    merged = silver_checkpoint(silver_path, snapshot_path)
    if merged is None:
        raise ValueError(f"source {source}, table {table}: silver at {silver_path} has no snapshot merged yet. "
                         f"Fix: materialize {source}/{table}/snapshot and a change batch first")
    position, label = merged
    stream_arn, desc = stream_of(settings.dynamodb(), source, table)
    if stream_arn != position.stream_arn:
        raise stream_replaced(source, table, stream_arn, position.stream_arn, "silver's last batch")
    types = TableTypes.build(table, desc["KeySchema"], desc["AttributeDefinitions"], declared)
    transforms = checked(transforms or TableTransforms(table), types)
    keys = [lake_name(k) for k in types.key_columns]
    silver = live_rows(spark.read.format("delta").load(silver_path))
    scan = read_segments_df(spark, settings, table, types, list(range(segments)), segments, consistent_read,
                            page_size, 0, row_filter).drop("_pos")
    if parallelism < segments:
        scan = scan.coalesce(parallelism)

    def changed_since() -> set[tuple]:
        names = types.key_columns
        return {transforms.key(names, k, [None] * len(k))
                for k in keys_changed_since(settings, source, table, types, position, page_limit)}

    # the ranges are sampled from silver's keys, hashed or not: the scan's rows are transformed alike
    result = compare(lake_columns(transforms.frame(scan)), silver, [lake_name(n) for n, _ in types.columns], keys,
                     sampled_boundaries(silver, keys), changed_since,
                     Reconciliation(table, compared_at=label))
    result.seconds = time.monotonic() - started
    return result
