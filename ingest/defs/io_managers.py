"""The Delta IO manager: applies an asset's LakeWrite to its table and reports it."""

# No `from __future__ import annotations`: Dagster and pydantic read these annotations at run time.

import json
from typing import Any

from dagster import ConfigurableIOManager, InputContext, MetadataValue, OutputContext, ResourceDependency
from pydantic import Field

from ingest.defs.resources import SparkResource
from ingest.lake.write import retry_conflicts
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


class DeltaLakeIOManager(ConfigurableIOManager):
    """Each asset is a Delta table at `<lake_root>/<source>/<table>/<layer>`."""

    lake_root: str = Field(description="Root of the lake: a local folder, or s3a://bucket/prefix.")
    spark: ResourceDependency[SparkResource]

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
        """Apply a write to the asset's table (retried when it loses a commit race); its metadata."""
        path = self._path(key.path)
        spark = self.spark.session
        return {**retry_conflicts(lambda: obj.apply(spark, path, log), key.to_user_string()), "table_uri": path}

    def load_input(self, context: InputContext) -> LakeTable:
        # A run over a partition range reads each partition itself (see InOrder): no single key here.
        partition = (context.asset_partition_key
                     if context.has_asset_partitions and len(context.asset_partition_keys) == 1 else None)
        return LakeTable(self.spark.session, self._path(context.asset_key.path), partition)
