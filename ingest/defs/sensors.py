"""One sensor per source: polls the binlog head and starts the next change batch."""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

from dagster import (
    AssetKey, AssetRecordsFilter, AssetSelection, DagsterRunStatus, DefaultSensorStatus, DynamicPartitionsDefinition,
    RunRequest, RunsFilter, SensorDefinition, SensorEvaluationContext, SensorResult, SkipReason, sensor,
)

from ingest.config import MySQLSource
from ingest.lake.tables import CHANGES
from ingest.sources.mysql.cdc import head_and_logs, plan_next_batch
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest.sources.mysql.schema import connection_params

SOURCE_TAG = "ingest/source"
_ACTIVE = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


def snapshot_log_start(instance, key: AssetKey) -> BinlogPosition | None:
    """The change-log start recorded by a table's latest snapshot materialization."""
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=1).records
    if not records:
        return None
    meta = records[0].asset_materialization.metadata.get("log_start")
    return BinlogPosition.from_metadata(meta.value) if meta is not None else None


def binlog_sensor(name: str, source: MySQLSource, tables: list[str],
                  partitions: DynamicPartitionsDefinition) -> SensorDefinition:
    selection = AssetSelection.assets(*[AssetKey([name, t, CHANGES]) for t in tables],
                                      *[AssetKey([name, t]) for t in tables])

    @sensor(
        name=f"{name}_binlog_sensor",
        minimum_interval_seconds=source.cdc.min_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if source.cdc.sensor_running else DefaultSensorStatus.STOPPED,
        asset_selection=selection,
        description=f"Polls SHOW MASTER STATUS on {source.host}:{source.port}; when the head moved, adds the next "
                    f"change batch of source {name} as a partition and runs it.",
    )
    def _sensor(context: SensorEvaluationContext):
        active = context.instance.get_run_records(
            RunsFilter(statuses=_ACTIVE, tags={SOURCE_TAG: name}), limit=1)
        if active:
            return SkipReason(f"batch run {active[0].dagster_run.run_id} of source {name} is still going; "
                              "the next batch will cover everything since its end")
        head, logs = head_and_logs(connection_params(source), name)
        existing = context.instance.get_dynamic_partitions(partitions.name)
        last_end = max((BatchRange.from_key(k, head.basename).end for k in existing), default=None)
        first_start = None
        if last_end is None:
            starts = {t: snapshot_log_start(context.instance, AssetKey([name, t, "snapshot"])) for t in tables}
            missing = sorted(t for t, p in starts.items() if p is None)
            if missing:
                return SkipReason(f"waiting for the snapshots of {', '.join(missing)}: materialize "
                                  f"{', '.join(f'{name}/{t}/snapshot' for t in missing)}; change batches start "
                                  "from the earliest snapshot position")
            first_start = min(starts.values())
        plan = plan_next_batch(last_end, first_start, head, logs, source.cdc.max_batch_files)
        if plan.batch is None:
            return SkipReason(plan.reason)
        key = plan.batch.key
        context.update_cursor(key)
        return SensorResult(
            run_requests=[RunRequest(run_key=key, partition_key=key, tags={SOURCE_TAG: name})],
            dynamic_partitions_requests=[partitions.build_add_request([key])],
        )

    return _sensor
