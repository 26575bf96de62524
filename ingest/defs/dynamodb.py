"""Assets and the sensor of a DynamoDB source: per table a snapshot, change batches and silver."""
# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

from dagster import (
    AssetChecksDefinition, AssetExecutionContext, AssetKey, BackfillPolicy, AssetsDefinition, DefaultSensorStatus,
    DynamicPartitionsDefinition, RunRequest, RunsFilter, SensorDefinition, SensorEvaluationContext, SensorResult,
    SkipReason, asset, sensor,
)

from ingest.batches import Action
from ingest.config import DynamoDBSource
from ingest.defs.batches import (
    LOOK_BACK, SOURCE_TAG, batch_log_asset, batch_request, check_key, contiguity_check, fail_dead_runs,
    give_up_events, incomplete_batch, record_worker,
)
from ingest.defs.assets import RECONCILIATION, history_asset, latest_metadata, silver_asset
from ingest.defs.sensors import ACTIVE_STATUSES
from ingest.lake.tables import BATCH_LOG, CHANGES, HISTORY, InOrder
from ingest.adapters.dynamodb import ScanSnapshotWrite, StreamBatchWrite
from ingest.sources.dynamodb.positions import StreamCheckpoint, batch_key, batch_ordinal

KINDS = {"dynamodb", "delta", "spark"}
TABLE_TAG = "ingest/table"


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
                                 s.parallelism, s.segments_per_commit, s.consistent_read, s.page_size,
                                 source.transforms(table), source.row_filter(table))

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
        record_worker(context)
        settings = getattr(context.resources, resource_key(name)).settings()
        # Each batch starts at its predecessor's committed end: a range runs them in order.
        return InOrder([StreamBatchWrite(name, table, batch, settings, dict(source.attributes.get(table, {})),
                                         source.cdc.max_records, source.cdc.page_limit, source.transforms(table),
                                         source.row_filter(table))
                        for batch in sorted(context.partition_keys, key=batch_ordinal)], small_batches=True)

    return _changes


def stream_sensor(name: str, source: DynamoDBSource, partitions: dict[str, DynamicPartitionsDefinition],
                  lake_root: str) -> SensorDefinition:
    @sensor(
        name=f"{name}_stream_sensor", minimum_interval_seconds=source.cdc.min_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if source.cdc.sensor_running else DefaultSensorStatus.STOPPED,
        asset_selection=[key for t in source.tables for key in batch_selection(name, source, t)],
        description=f"Polls the stream of each table of DynamoDB source {name}; when records wait after the last "
                    "complete batch, adds the next batch as a partition and runs it with silver. A batch that is "
                    "not complete (not in the table's batch log) runs again, with backoff, before any later one.",
    )
    def _sensor(context: SensorEvaluationContext):
        from ingest.defs.sensors import watch

        return watch(lambda: evaluate(context), source.cdc.watch_seconds)

    def evaluate(context: SensorEvaluationContext):
        from ingest.defs.sensors import Idle
        from ingest.lake.batchlog import logged_batches
        from ingest.lake.tables import BATCH_LOG, table_location
        from ingest.sources.dynamodb.client import client_settings
        from ingest.sources.dynamodb.streams import has_new_records

        api = client_settings(source).streams()
        requests, adds, waiting, events = [], [], [], []
        idle = True  # every table waits on a running batch or an empty stream: worth looking again soon
        for table in source.tables:
            tags = {SOURCE_TAG: name, TABLE_TAG: table}
            for message in fail_dead_runs(context.instance, tags):
                context.log.warning(message)
            if context.instance.get_run_records(RunsFilter(statuses=ACTIVE_STATUSES, tags=tags), limit=1):
                waiting.append(f"{table}: a batch run is still going")
                continue
            logged = max((e for _, e in zip(range(LOOK_BACK), logged_batches(
                table_location(lake_root, name, table, BATCH_LOG)))), key=lambda e: batch_ordinal(e.batch),
                default=None)
            done = batch_ordinal(logged.batch) if logged else 0
            # the first created batch after the newest complete one: it runs again before anything later
            pending = sorted((k for k in context.instance.get_dynamic_partitions(partitions[table].name)
                              if batch_ordinal(k) > done), key=batch_ordinal)
            if pending:
                batch = pending[0]
                decision = incomplete_batch(
                    context.instance, tags, f"{name} (table {table})", batch, source.cdc,
                    f"ingest backfill {name} --table {table} --partitions {batch} --wait")
                if decision.action == Action.RUN:
                    requests.append(_batch_request(context.instance, name, source, table, batch, decision.attempt))
                    continue
                if decision.action == Action.GIVE_UP:
                    events += give_up_events(context.instance, decision, tags, batch, batch_log_key(name, table))
                waiting.append(f"{table}: {decision.message}")
                idle = False
                continue
            if logged is None:
                snapshot = latest_metadata(context.instance, AssetKey([name, table, "snapshot"]))
                if "stream_positions" not in snapshot:
                    waiting.append(f"{table}: waiting for its snapshot (materialize {name}/{table}/snapshot)")
                    idle = False
                    continue
                start = StreamCheckpoint.from_metadata(snapshot["stream_positions"].value)
            else:
                start = StreamCheckpoint.from_metadata(logged.end)
            if not has_new_records(api, name, table, start):
                waiting.append(f"{table}: nothing new on the stream")
                continue
            key = batch_key(done + 1)
            adds.append(partitions[table].build_add_request([key]))
            requests.append(_batch_request(context.instance, name, source, table, key))
        if not requests and idle and not events:
            # a new look is a full one (a GetRecords per shard): the watch spaces them by their cost
            return Idle("; ".join(waiting) or "no tables", lambda: True)
        if not requests:
            return SensorResult(skip_reason=SkipReason("; ".join(waiting) or "no tables"), asset_events=events)
        return SensorResult(run_requests=requests, dynamic_partitions_requests=adds, asset_events=events)

    return _sensor


def batch_log_key(name: str, table: str) -> AssetKey:
    return AssetKey([name, table, BATCH_LOG])


def batch_selection(name: str, source: DynamoDBSource, table: str) -> list[AssetKey]:
    """What a batch run of one table materializes: bronze, silver (and history), then the batch log."""
    return [AssetKey([name, table, CHANGES]), AssetKey([name, table]),
            *([AssetKey([name, table, HISTORY])] if source.keeps_history(table) else []), batch_log_key(name, table)]


def _batch_request(instance, name: str, source: DynamoDBSource, table: str, key: str, attempt: int = 1) -> RunRequest:
    return batch_request(instance, key, f"{table}:", {SOURCE_TAG: name, TABLE_TAG: table},
                         batch_selection(name, source, table), [check_key(batch_log_key(name, table))], attempt,
                         source.cdc.max_run_seconds)


def reconciliation_checks(name: str, source: DynamoDBSource) -> AssetChecksDefinition:
    from dagster import AssetCheckExecutionContext, AssetCheckResult

    from ingest.defs.checks import per_table_check, reconciliation_result

    def reconcile_table(context: AssetCheckExecutionContext, table: str) -> AssetCheckResult:
        from ingest.adapters.dynamodb import reconcile
        from ingest.sources.dynamodb.client import client_settings

        s, lake = source.snapshot, context.resources.lake
        result = reconcile(lake.spark.session, client_settings(source), name, table,
                           dict(source.attributes.get(table, {})), lake.path_for(_table_key(name, table)),
                           lake.path_for(_table_key(name, table, "snapshot")), segments=s.segments,
                           parallelism=s.parallelism, consistent_read=True, page_size=s.page_size,
                           page_limit=source.cdc.page_limit, transforms=source.transforms(table),
                           row_filter=source.row_filter(table))
        return reconciliation_result(context, result)

    return per_table_check(name, RECONCILIATION, {t: _table_key(name, t) for t in source.tables}, lambda table: (
        f"Compares the live rows of silver with a parallel Scan of DynamoDB table `{table}` (strongly "
        "consistent reads): a row count and checksum per key range (ranges cut from a sample of silver's "
        "keys) on both sides, then row by row only in the ranges that differ, leaving out keys the stream "
        "shows changed after silver's position. Reads the whole table: it runs on the `reconcile_silver` "
        "schedule, or from the UI."), reconcile_table)


def build_dynamodb_defs(name: str, source: DynamoDBSource, lake_root: str
                        ) -> tuple[list[AssetsDefinition], SensorDefinition, list[AssetChecksDefinition]]:
    partitions = {t: stream_partitions(name, t) for t in source.tables}
    assets: list[AssetsDefinition] = []
    checks: list[AssetChecksDefinition] = []
    for table in source.tables:
        assets += [
            snapshot_asset(name, source, table),
            changes_asset(name, source, table, partitions[table]),
            silver_asset(name, table, partitions[table], f"DynamoDB table `{table}`", source.layout(table)),
            batch_log_asset(batch_log_key(name, table), name, table, [table], partitions[table], _table_key,
                            batch_ordinal, name, history=[table] if source.keeps_history(table) else []),
        ]
        if source.keeps_history(table):
            assets.append(history_asset(name, table, partitions[table], f"DynamoDB table `{table}`",
                                        source.layout(table)))
        checks.append(contiguity_check(batch_log_key(name, table), StreamCheckpoint.from_metadata,
                                       lambda a, b: None, batch_ordinal))
    checks.append(reconciliation_checks(name, source))
    return assets, stream_sensor(name, source, partitions, lake_root), checks


def _table_key(name: str, table: str, layer: str | None = None) -> AssetKey:
    return AssetKey([name, table, *([layer] if layer else [])])
