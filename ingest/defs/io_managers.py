"""The Delta IO manager: applies an asset's LakeWrite to its table and reports it."""

# No `from __future__ import annotations`: Dagster and pydantic read these annotations at run time.

import json
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Optional

from dagster import ConfigurableIOManager, InputContext, MetadataValue, OutputContext, ResourceDependency
from pydantic import Field

from ingest.defs.resources import DynamoDBResource, SparkResource
from ingest.lake.connect import naming_a_lost_server
from ingest.lake.write import retry_conflicts, small_batch_settings
from ingest.lake.tables import LakeTable, LakeWrite, location_for_asset_key


def to_dagster_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """Numbers stay numbers (the UI plots them); positions and lists become JSON."""
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if isinstance(value, bool):
            out[key] = MetadataValue.bool(value)
        elif isinstance(value, int):
            out[key] = MetadataValue.int(value)
        elif isinstance(value, float):
            out[key] = MetadataValue.float(value)
        elif isinstance(value, (dict, list)):
            out[key] = MetadataValue.json(json.loads(json.dumps(value, default=str)))
        elif value is not None:
            out[key] = MetadataValue.text(str(value))
    return out


FIGURES = ("rows", "rows_per_second", "seconds", "lag_seconds", "bytes_written", "table_bytes", "table_files")
"""What every materialization of a lake table carries (the README's "Everyday operations")."""
MERGE_FIGURES = {"numTargetRowsInserted": "rows_inserted", "numTargetRowsUpdated": "rows_updated"}
"""A MERGE's own operation metrics, reported by the silver and history merges of every batch."""


def write_figures(spark, path: str, meta: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Numbers for every materialization: how long, rows per second, bytes this write added (Delta's
    own operation metrics; a MERGE's rows inserted and updated too), lag_seconds (0 when the write does
    not say: a snapshot is not behind anything yet), and the table's bytes and files.

    All of it comes from the Delta log: the commit's metrics and the checksum file Delta writes with
    it. Only a version without a checksum takes a DESCRIBE DETAIL (0.4-0.5 s here), a cost that would
    follow the table, not the changes."""
    from ingest.lake.deltalog import commits, is_delta_table, table_size
    from ingest.lake.merge import delta_path

    figures: dict[str, Any] = {"seconds": round(seconds, 3), "lag_seconds": meta.get("lag_seconds", 0.0)}
    if not is_delta_table(path):
        return figures  # the write waited (silver before its snapshot): no table yet
    newest = commits(path, limit=1)
    metrics = newest[0].metrics if newest and meta.get("committed", True) else {}
    rows = meta.get("rows", int(metrics.get("numOutputRows", metrics.get("numSourceRows", 0))))
    figures.update({"rows": rows, "rows_per_second": round(rows / max(seconds, 1e-9), 1),
                    "bytes_written": int(metrics.get("numOutputBytes", metrics.get("numTargetBytesAdded", 0))),
                    **{name: int(metrics[m]) for m, name in MERGE_FIGURES.items() if m in metrics}})
    size = table_size(path)
    if size is None:
        detail = spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").select("sizeInBytes", "numFiles").first()
        size = int(detail["sizeInBytes"]), int(detail["numFiles"])
    figures.update({"table_bytes": size[0], "table_files": size[1]})
    return figures


class DeltaLakeIOManager(ConfigurableIOManager):
    """Each asset is a Delta table at `<lake_root>/<source>/<table>/<layer>`."""

    lake_root: str = Field(description="Root of the lake: a local folder, or s3a://bucket/prefix.")
    spark: ResourceDependency[SparkResource]
    locks: Optional[DynamoDBResource] = Field(default=None, description="S3 lakes: the DynamoDB client holding "
                                                                        "one write lock per table (see lake/locks.py).")
    lock_table: str = Field(default="ingest_lake_locks", description="The DynamoDB table of those locks.")

    def _path(self, key_path) -> str:
        return location_for_asset_key(self.lake_root, list(key_path))

    def path_for(self, key) -> str:
        """The Delta table of the asset `key`."""
        return self._path(key.path)

    def handle_output(self, context: OutputContext, obj: LakeWrite) -> None:
        if not hasattr(obj, "apply"):
            raise TypeError(f"{context.asset_key.to_user_string()}: the asset returned {type(obj).__name__}, "
                            "not a lake write; this IO manager only writes Delta tables")
        context.add_output_metadata(to_dagster_metadata(self.write(context.asset_key, obj, context.log.info)))

    def write(self, key, obj: LakeWrite, log) -> dict[str, Any]:
        """Apply a write to the asset's table (retried when it loses a commit race); its metadata, with
        the figures the UI plots for every materialization (see write_figures)."""
        path = self._path(key.path)
        spark = self.spark.session
        started = time.monotonic()
        small = small_batch_settings(spark) if getattr(obj, "small_batches", False) else nullcontext()
        with self.write_lock(path), naming_a_lost_server(self.spark.spark_config.get("spark.remote")), small:
            meta = retry_conflicts(lambda: obj.apply(spark, path, log), key.to_user_string())
        figures = write_figures(spark, path, meta, time.monotonic() - started)
        return {**meta, **figures, "table_uri": path}

    @contextmanager
    def write_lock(self, path: str):
        """Held around every write to the table at `path` (S3 lakes: see lake/locks.py)."""
        if self.locks is None:  # a local lake: Delta's commits are atomic file creations there
            yield
            return
        from ingest.lake.locks import ensure_table, table_lock

        client = self.locks.get_dynamodb_client()
        ensure_table(client, self.lock_table)
        with table_lock(client, self.lock_table, path):
            yield

    def load_input(self, context: InputContext) -> LakeTable:
        # A run over a partition range reads each partition itself (see InOrder): no single key here.
        partition = (context.asset_partition_key
                     if context.has_asset_partitions and len(context.asset_partition_keys) == 1 else None)
        return LakeTable(self.spark.session, self._path(context.asset_key.path), partition)
