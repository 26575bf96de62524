"""Parallel Scan snapshots of DynamoDB tables, resumable by segment.

Before the scan starts, the stream position of every shard is recorded
(`positions.snapshot_checkpoint`), and every scanned item gets the `_pos`
below all records still to come from those positions. So the ordered merge
of the scan plus the stream read from there gives the exact table: a record
newer than the scan wins over the scanned item, and replaying one older than
the scan is harmless (each record carries the item's whole new image, and
every later change of the item is replayed after it).

Segments (`Segment` / `TotalSegments`) are read by a PySpark Python data
source, one Spark partition per segment, so they run in parallel on the
executors; each pages with `ExclusiveStartKey`. Segments are committed to
Delta in waves; a snapshot that dies resumes with the segments not yet
committed, under the same positions.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ingest.lake.tables import spark_ident
from ingest.sources.dynamodb.client import ClientSettings, call
from ingest.sources.dynamodb.deserialize import from_item
from ingest.sources.dynamodb.positions import StreamCheckpoint, snapshot_checkpoint
from ingest.sources.dynamodb.types import TableTypes

DATA_SOURCE_NAME = "ingest_dynamodb_segments"


def scan_segment(settings: ClientSettings, table: str, types: TableTypes, segment: int, total: int,
                 consistent: bool, page_size: int | None, pos: int, arrow_schema) -> Iterator[Any]:
    """Arrow record batches of one Scan segment, a page at a time, each row tagged with `pos`."""
    import pyarrow as pa

    client = settings.dynamodb()
    names = [n for n, _ in types.columns]
    kwargs: dict[str, Any] = {"TableName": table, "Segment": segment, "TotalSegments": total,
                              "ConsistentRead": consistent}
    if page_size:
        kwargs["Limit"] = page_size
    pos_value = Decimal(pos)
    while True:
        page = call(client.scan, f"Scan of {table} segment {segment}/{total}", **kwargs)
        rows = [types.row(from_item(item)) for item in page.get("Items", [])]
        if rows:
            arrays = [pa.array([r[n] for r in rows], type=arrow_schema.field(i).type) for i, n in enumerate(names)]
            arrays.append(pa.array([pos_value] * len(rows), type=arrow_schema.field(len(names)).type))
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def read_segment(spec: dict[str, Any], options: dict[str, str], segment: int, arrow_schema) -> Iterator[Any]:
    """One Spark partition: one Scan segment (executor side)."""
    from ingest.sources.dynamodb.types import parse_type

    settings = ClientSettings(**spec["client"], access_key_id=options.get("access_key_id"),
                              secret_access_key=options.get("secret_access_key"),
                              session_token=options.get("session_token"))
    types = TableTypes(spec["table"], tuple(spec["keys"]), tuple((n, parse_type(t)) for n, t in spec["columns"]))
    yield from scan_segment(settings, spec["table"], types, segment, spec["total"], spec["consistent"],
                            spec["page_size"], int(spec["pos"]), arrow_schema)


def _register_data_source(spark) -> None:
    from ingest.lake.datasource import register_reader

    register_reader(spark, DATA_SOURCE_NAME, read_segment, "segments")


def read_segments_df(spark, settings: ClientSettings, table: str, types: TableTypes, segments: list[int],
                     total: int, consistent: bool, page_size: int | None, pos: int):
    _register_data_source(spark)
    ddl = ", ".join([*(f"{spark_ident(n)} {t}" for n, t in types.spark_columns()), "`_pos` decimal(38,0)"])
    spec = {"client": {"region": settings.region, "endpoint_url": settings.endpoint_url,
                       "max_attempts": settings.max_attempts},
            "table": table, "keys": list(types.key_columns), "columns": [(n, t.declared) for n, t in types.columns],
            "segments": segments, "total": total, "consistent": consistent, "page_size": page_size, "pos": str(pos)}
    reader = spark.read.format(DATA_SOURCE_NAME).option("ddl", ddl).option("spec", json.dumps(spec))
    settings = settings.resolved()
    # option names with "secret", "key" or "token" are redacted by Spark in plans and the UI
    for name, value in (("access_key_id", settings.access_key_id), ("secret_access_key", settings.secret_access_key),
                        ("session_token", settings.session_token)):
        if value:
            reader = reader.option(name, value)
    return reader.load()


def resumable(last_meta: dict | None, fingerprint: str, total: int) -> dict | None:
    """The unfinished snapshot to resume, or None to start afresh (pure)."""
    if not last_meta or last_meta.get("kind") != "snapshot" or last_meta.get("complete"):
        return None
    if last_meta.get("fingerprint") != fingerprint or last_meta.get("segments_total") != total:
        return None
    return last_meta


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

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from ingest.lake.commits import Txn, last_commit, table_version, waves
        from ingest.lake.tables import BRONZE, sibling_location
        from ingest.lake.write import append
        from ingest.sources.dynamodb.streams import describe_stream, stream_of

        started = time.monotonic()
        stream_arn, desc = stream_of(self.settings.dynamodb(), self.source, self.table)
        types = TableTypes.build(self.table, desc["KeySchema"], desc["AttributeDefinitions"], self.declared)
        fingerprint = types.fingerprint()
        last = last_commit(path, kind="snapshot")
        resume = resumable(last.metadata if last else None, fingerprint, self.segments)
        if resume and StreamCheckpoint.from_metadata(resume["stream_positions"]).stream_arn != stream_arn:
            resume = None  # the stream was replaced mid-snapshot: its positions no longer apply
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
        app_id = f"snapshot:{self.source}.{self.table}:{snapshot_id}"
        rows = 0
        groups = waves(pending, self.segments_per_commit)
        for i, wave in enumerate(groups):
            df = read_segments_df(spark, self.settings, self.table, types, wave, self.segments,
                                  self.consistent_read, self.page_size, pos)
            if self.parallelism < len(wave):
                df = df.coalesce(self.parallelism)
            done = sorted({*done, *wave})
            complete = i == len(groups) - 1
            meta = {"kind": "snapshot", "source": self.source, "table": self.table, "snapshot_id": snapshot_id,
                    "wave": wave_no, "segments_done": done, "segments_total": self.segments, "complete": complete,
                    "stream_positions": positions.to_metadata(), "log_start": positions.summary(),
                    "log_start_pos": pos, "key_columns": list(types.key_columns), "fingerprint": fingerprint}
            outcome = append(df, path, meta, Txn(app_id, wave_no), overwrite=wave_no == 0,
                             overwrite_schema=wave_no == 0)
            rows += outcome.rows
            log(f"snapshot {self.table}: {len(done)}/{self.segments} segments, {rows} rows")
            wave_no += 1
        seconds = time.monotonic() - started
        total_rows = spark.read.format("delta").load(path).count()
        return {"rows": total_rows, "rows_per_second": round(rows / max(seconds, 1e-9), 1),
                "seconds": round(seconds, 2), "snapshot_id": snapshot_id, "segments": self.segments,
                "resumed": bool(resume), "stream_positions": json.loads(positions.to_metadata()),
                "log_start_pos": str(pos), "key_columns": list(types.key_columns),
                "delta_version": table_version(path)}
