"""What every source kind's assets share: asset keys, the newest materialization's metadata, and silver
and history as assets of their own (per table, built from bronze and the snapshot)."""
# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

from dataclasses import replace
from typing import NamedTuple

from dagster import (
    AssetChecksDefinition, AssetExecutionContext, AssetIn, AssetKey, AssetsDefinition, BackfillPolicy,
    DynamicPartitionsDefinition, SensorDefinition, asset,
)

from ingest.lake.deltalog import last_commit
from ingest.lake.history import HistoryFromBatch, snapshot_in_history
from ingest.lake.merge import Layout
from ingest.lake.silver import SilverFromBatch, snapshot_in_silver
from ingest.lake.tables import CHANGES, HISTORY, InOrder, LakeTable, asset_part

RECONCILIATION = "reconciliation"
UNCHANGED_NOTE = (" A change batch that did not change this table leaves its partition empty here, by design and not a "
                  "gap: the table is current through the batch log's end (`ingest status` shows the position).")
"""Said by the assets of a source whose batches commit only the tables they changed (the partitions
view shows the others' partitions as not materialized)."""


def table_key(name: str, table: str, layer: str | None = None) -> AssetKey:
    """`<source>/<table>[/<layer>]`, the table's name made a valid Dagster name (see asset_part)."""
    return AssetKey([name, asset_part(table), *([layer] if layer else [])])


class SourceDefs(NamedTuple):
    """What one source adds to the code location."""

    assets: list[AssetsDefinition]
    sensor: SensorDefinition
    checks: list[AssetChecksDefinition]


def default_lake_root() -> str:
    """INGEST_LAKE_ROOT as Spark opens it (default: .local/lake), read when definitions load."""
    import os

    from ingest.lake.storage import spark_lake_root
    from ingest.paths import local_dir

    return spark_lake_root(os.environ.get("INGEST_LAKE_ROOT", str(local_dir() / "lake")))


def needs_snapshot_merge(lake, name: str, table: str, layer: str | None = None) -> bool:
    """Whether the table's newest finished snapshot is not yet in silver (or `layer`: its history),
    read from the Delta logs."""
    snap = last_commit(lake.path_for(table_key(name, table, "snapshot")), kind="snapshot")
    if snap is None or not snap.metadata.get("complete"):
        return False
    merged = snapshot_in_history if layer == HISTORY else snapshot_in_silver
    return not merged(lake.path_for(table_key(name, table, layer)), snap.metadata["snapshot_id"])


def history_description(what: str) -> str:
    return (f"SCD2 history of {what}: one row per version of a key, valid from `_valid_from` to `_valid_to` "
            "(source log positions, with commit times in `_valid_from_ts` / `_valid_to_ts`), `_current` on the live "
            "version; a delete closes the last version. Built from bronze and the snapshot; any batch order "
            "converges. See ingest/lake/history.py for queries as of a position.")


def history_asset(name: str, table: str, partitions: DynamicPartitionsDefinition, what: str,
                  layout: Layout = Layout()) -> AssetsDefinition:
    """A table's SCD2 history as its own partitioned asset (DynamoDB: one asset per layer and table)."""
    return built_from_bronze(name, table, partitions, HISTORY, history_description(what),
                             lambda changes, snapshot: HistoryFromBatch(name, table, changes, snapshot, layout))


def silver_asset(name: str, table: str, partitions: DynamicPartitionsDefinition, what: str,
                 layout: Layout = Layout()) -> AssetsDefinition:
    return built_from_bronze(
        name, table, partitions, None,
        f"Current state of {what}: the latest snapshot, then each change batch merged in order of `_pos` (any batch "
        "order converges). Deletes stay as tombstones (`_deleted`); read live rows with "
        "`ingest.lake.merge.live_rows`.",
        lambda changes, snapshot: SilverFromBatch(name, table, changes, snapshot, layout=layout))


def built_from_bronze(name: str, table: str, partitions: DynamicPartitionsDefinition, layer: str | None,
                      description: str, write) -> AssetsDefinition:
    """A layer built per change batch from the table's bronze and snapshot (silver: `layer` None, history),
    as an asset of its own: `write(changes, snapshot)` is one batch's lake write."""
    @asset(
        key=table_key(name, table, layer),
        group_name=name,
        kinds={"delta", "spark"},
        io_manager_key="lake",
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        ins={"snapshot": AssetIn(key=table_key(name, table, "snapshot")),
             "changes": AssetIn(key=table_key(name, table, CHANGES))},
        description=description,
        metadata={"lake/layer": layer or "silver", "source": name, "table": table},
    )
    def _layer(context: AssetExecutionContext, snapshot: LakeTable, changes: LakeTable) -> InOrder:
        # DynamoDB's batches, read and decoded by the run's bronze step (max_records at most)
        return InOrder([write(replace(changes, partition=batch), snapshot) for batch in sorted(context.partition_keys)],
                       small_batches=True)

    return _layer


def latest_materialization(instance, key: AssetKey):
    """The record of an asset's newest materialization (None when it has none)."""
    from dagster import AssetRecordsFilter

    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=1).records
    return records[0] if records else None


def latest_metadata_of(instance, keys: list[AssetKey]) -> dict[AssetKey, dict]:
    """Each asset's newest materialization metadata ({} for one without), in one query: one query per
    table made a sensor tick of a 200-table source take 0.3 s."""
    events = instance.get_latest_materialization_events(keys)
    return {k: dict(e.asset_materialization.metadata) if (e := events.get(k)) else {} for k in keys}


def latest_metadata(instance, key: AssetKey) -> dict:
    """The metadata of an asset's newest materialization ({} when it has none)."""
    return latest_metadata_of(instance, [key])[key]
