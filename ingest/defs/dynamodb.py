"""Assets and the sensor of a DynamoDB source: per table a snapshot, change batches and silver."""
# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

from dagster import (
    AssetExecutionContext, AssetKey, BackfillPolicy, AssetsDefinition, DefaultSensorStatus, DynamicPartitionsDefinition,
    RunRequest, RunsFilter, SensorDefinition, SensorEvaluationContext, SensorResult, SkipReason, asset, sensor,
)

from ingest.config import DynamoDBSource
from ingest.defs.factory import latest_materialization, latest_metadata, silver_asset
from ingest.defs.sensors import ACTIVE_STATUSES, SOURCE_TAG
from ingest.lake.tables import CHANGES, InOrder
from ingest.sources.dynamodb.cdc import StreamBatchWrite
from ingest.sources.dynamodb.positions import StreamCheckpoint, batch_key, batch_ordinal
from ingest.sources.dynamodb.scan import ScanSnapshotWrite

KINDS = {"dynamodb", "delta", "spark"}
TABLE_TAG = "ingest/table"
MAX_BATCH_ATTEMPTS = 3


def resource_key(name: str) -> str:
    return f"dynamodb_{name}"


def stream_partitions(name: str, table: str) -> DynamicPartitionsDefinition:
    """One partition per change batch of the table's stream, numbered from 00000001."""
    return DynamicPartitionsDefinition(name=f"{name}_{table}_batches")


def snapshot_asset(name: str, source: DynamoDBSource, table: str) -> AssetsDefinition:
    s = source.snapshot

    @asset(
        key=AssetKey([name, table, "snapshot"]), group_name=name, kinds=KINDS, io_manager_key="lake",
        required_resource_keys={resource_key(name)},
        description=(f"Full snapshot of DynamoDB table `{table}` ({source.region}): a parallel Scan in {s.segments} "
                     "segments, its stream positions recorded before it starts. Resumes by segment."),
        metadata={"lake/layer": "snapshot", "source": name, "table": table},
    )
    def _snapshot(context: AssetExecutionContext) -> ScanSnapshotWrite:
        settings = getattr(context.resources, resource_key(name)).settings()
        return ScanSnapshotWrite(name, table, settings, dict(source.attributes.get(table, {})), s.segments,
                                 s.parallelism, s.segments_per_commit, s.consistent_read, s.page_size)

    return _snapshot


def changes_asset(name: str, source: DynamoDBSource, table: str,
                  partitions: DynamicPartitionsDefinition) -> AssetsDefinition:
    @asset(
        key=AssetKey([name, table, CHANGES]), group_name=name, kinds={"dynamodb", "delta"}, io_manager_key="lake",
        partitions_def=partitions, required_resource_keys={resource_key(name)},
        backfill_policy=BackfillPolicy.single_run(),
        description=(f"Change log (bronze) of DynamoDB table `{table}`: batch n reads the stream from where batch "
                     "n-1 ended, shards in lineage order, and commits its end checkpoint with the rows."),
        metadata={"lake/layer": "bronze", "source": name, "table": table},
    )
    def _changes(context: AssetExecutionContext) -> InOrder:
        settings = getattr(context.resources, resource_key(name)).settings()
        # Each batch starts at its predecessor's committed end: a range runs them in order.
        return InOrder([StreamBatchWrite(name, table, batch, settings, dict(source.attributes.get(table, {})),
                                         source.cdc.max_records, source.cdc.page_limit)
                        for batch in sorted(context.partition_keys, key=batch_ordinal)])

    return _changes


def stream_sensor(name: str, source: DynamoDBSource, partitions: dict[str, DynamicPartitionsDefinition]
                  ) -> SensorDefinition:
    @sensor(
        name=f"{name}_stream_sensor", minimum_interval_seconds=source.cdc.min_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if source.cdc.sensor_running else DefaultSensorStatus.STOPPED,
        asset_selection=[key for t in source.tables for key in (AssetKey([name, t, CHANGES]), AssetKey([name, t]))],
        description=f"Polls the stream of each table of DynamoDB source {name}; when records wait after the last "
                    "batch's end, adds the next batch as a partition and runs it with silver.",
    )
    def _sensor(context: SensorEvaluationContext):
        from ingest.sources.dynamodb.client import client_settings
        from ingest.sources.dynamodb.streams import has_new_records

        api = client_settings(source).streams()
        requests, adds, waiting = [], [], []
        for table in source.tables:
            if context.instance.get_run_records(
                    RunsFilter(statuses=ACTIVE_STATUSES, tags={SOURCE_TAG: name, TABLE_TAG: table}), limit=1):
                waiting.append(f"{table}: a batch run is still going")
                continue
            existing = context.instance.get_dynamic_partitions(partitions[table].name)
            last_key = max(existing, default=None, key=batch_ordinal)
            changes = latest_metadata(context.instance, AssetKey([name, table, CHANGES]))
            snapshot = latest_metadata(context.instance, AssetKey([name, table, "snapshot"]))
            if last_key is None:
                if "stream_positions" not in snapshot:
                    waiting.append(f"{table}: waiting for its snapshot (materialize {name}/{table}/snapshot)")
                    continue
                start = StreamCheckpoint.from_metadata(snapshot["stream_positions"].value)
            else:
                ended = changes.get("end")
                done_key = _batch_of(context.instance, name, table)
                if ended is None or done_key != last_key:
                    # the last batch's run failed: retry it a few times, then leave it to a person
                    tried = context.instance.get_runs_count(RunsFilter(tags={
                        SOURCE_TAG: name, TABLE_TAG: table, "dagster/partition": last_key}))
                    if tried >= MAX_BATCH_ATTEMPTS:
                        waiting.append(f"{table}: batch {last_key} failed {tried} times; see its runs, fix the cause "
                                       f"and re-run {name}/{table}/changes for partition {last_key}")
                        continue
                    requests.append(_batch_request(name, table, last_key, f"{table}:{last_key}:retry{tried}"))
                    continue
                start = StreamCheckpoint.from_metadata(ended.value)
            if not has_new_records(api, name, table, start):
                waiting.append(f"{table}: nothing new on the stream")
                continue
            key = batch_key(batch_ordinal(last_key) + 1 if last_key else 1)
            adds.append(partitions[table].build_add_request([key]))
            requests.append(_batch_request(name, table, key, f"{table}:{key}"))
        if not requests:
            return SkipReason("; ".join(waiting) or "no tables")
        return SensorResult(run_requests=requests, dynamic_partitions_requests=adds)

    return _sensor


def _batch_request(name: str, table: str, key: str, run_key: str) -> RunRequest:
    return RunRequest(run_key=run_key, partition_key=key, tags={SOURCE_TAG: name, TABLE_TAG: table},
                      asset_selection=[AssetKey([name, table, CHANGES]), AssetKey([name, table])])


def _batch_of(instance, name: str, table: str) -> str | None:
    """The partition of the table's newest changes materialization."""
    record = latest_materialization(instance, AssetKey([name, table, CHANGES]))
    return record.partition_key if record else None


def build_dynamodb_defs(name: str, source: DynamoDBSource) -> tuple[list[AssetsDefinition], SensorDefinition]:
    partitions = {t: stream_partitions(name, t) for t in source.tables}
    assets: list[AssetsDefinition] = []
    for table in source.tables:
        assets += [
            snapshot_asset(name, source, table),
            changes_asset(name, source, table, partitions[table]),
            silver_asset(name, table, partitions[table], f"DynamoDB table `{table}`"),
        ]
    return assets, stream_sensor(name, source, partitions)
