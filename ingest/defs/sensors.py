"""One sensor per source: polls the binlog head and starts the next change batch."""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Union

from dagster import (
    AssetKey, AssetSelection, DagsterRunStatus, DefaultSensorStatus, DynamicPartitionsDefinition,
    RunRequest, RunsFilter, SensorDefinition, SensorEvaluationContext, SensorResult, SkipReason, sensor,
)

from ingest.batches import Action, FailedRun, plan_tables, usable_snapshot
from ingest.config import MySQLSource
from ingest.defs.batches import (
    FAILED_STATUSES, LOOK_BACK, SOURCE_TAG, batch_request, check_key, fail_dead_runs, give_up_events,
    incomplete_batch, run_error,
)
from ingest.defs.assets import latest_metadata_of, table_key
from ingest.lake.tables import CHANGES, HISTORY, SOURCE_BATCH_LOG, source_batch_log_location
from ingest.sources.mysql.cdc import plan_next_batch, source_state
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest.sources.mysql.preflight import check_source, failed
from ingest.sources.mysql.schema import connection_params

SNAPSHOT_TAG = "ingest/snapshot"
"""On snapshot runs the sensor starts: `<source>.<table>`."""
ACTIVE_STATUSES = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


def snapshots_recorded(instance, name: str, tables: list[str]) -> dict[str, dict]:
    """Per table, the metadata of its latest snapshot materialization ({} before its first)."""
    meta = latest_metadata_of(instance, [table_key(name, t, "snapshot") for t in tables])
    return {t: meta[table_key(name, t, "snapshot")] for t in tables}


def log_starts(snapshots: dict[str, dict], parse=BinlogPosition.from_metadata) -> dict:
    """Per table, the change-log start its snapshot's metadata records (`parse`d: a binlog position by
    default; None before its first snapshot)."""
    return {t: parse(m["log_start"].value) if "log_start" in m else None for t, m in snapshots.items()}


def source_batch_selection(name: str, source, tables: list[str]) -> list[AssetKey]:
    """What a batch run of `tables` materializes: their bronze, silver and history, and the batch log."""
    return [*[table_key(name, t, CHANGES) for t in tables], *[table_key(name, t) for t in tables],
            *[table_key(name, t, HISTORY) for t in tables if source.keeps_history(t)],
            AssetKey([name, SOURCE_BATCH_LOG])]


def named_tables(instance, name: str, source, tables: list[str], snapshots: dict[str, dict],
                 touched) -> list[str]:
    """The tables a batch run names: those the server says the batch touches (`touched`, by config
    name), and those whose newest snapshot (`snapshots`: their recorded metadata) is not yet in silver
    (or history) as Dagster last recorded it; every table when the server cannot tell (`touched` None:
    see ingest/sources/mysql/peek.py and ingest/sources/postgres/slot.py)."""
    from ingest.batches import batch_tables

    if touched is None:
        return list(tables)
    layers = {t: [table_key(name, t), *([table_key(name, t, HISTORY)] if source.keeps_history(t) else [])]
              for t in tables}
    merged = latest_metadata_of(instance, [k for keys in layers.values() for k in keys])

    def snapshot_id(meta: dict):
        return meta["snapshot_id"].value if "snapshot_id" in meta else None

    return batch_tables(tables, touched, {t: snapshot_id(snapshots.get(t, {})) for t in tables},
                        {t: [snapshot_id(merged[k]) for k in keys] for t, keys in layers.items()})


def committed_end(log_path: str) -> BinlogPosition | None:
    """Where the source's complete batches end: the newest end in its batch log (None before the first)."""
    return logged(log_path).end


class Logged(NamedTuple):
    end: BinlogPosition | None
    """The newest end in the log."""
    batches: set[str]
    """The batches among its newest entries."""
    skipped_until: dict[str, BinlogPosition]
    """Per table left out of a batch, the end of the newest such batch."""


def logged(log_path: str, parse=BinlogPosition.from_metadata) -> Logged:
    """What the source's batch log holds (its newest entries), positions `parse`d (binlog positions by
    default).

    Read from the Delta log, never from the partitions Dagster holds: a partition whose run
    failed was created, but its changes may not be in silver."""
    from ingest.lake.batchlog import logged_batches

    entries = [e for _, e in zip(range(LOOK_BACK), logged_batches(log_path))]
    skipped_until: dict[str, BinlogPosition] = {}
    for e in entries:
        for table in e.skipped:
            end = parse(e.end)
            skipped_until[table] = max(end, skipped_until.get(table, end))
    return Logged(max((parse(e.end) for e in entries), default=None),
                  {e.batch for e in entries}, skipped_until)


def snapshot_runs(instance, name: str, tables: list[str]) -> tuple[set[str], dict[str, list[FailedRun]]]:
    """Tables whose snapshot is being materialized now, and each table's failed snapshot runs since its
    last materialization: the runs that planned it since and ended without landing it (so a failed run
    of several snapshots counts against the ones it did not land only)."""
    from dagster import AssetRecordsFilter

    from ingest.defs.assets import latest_materialization

    running: set[str] = set()
    failures: dict[str, list[FailedRun]] = {}
    for table in tables:
        key = table_key(name, table, "snapshot")
        last = latest_materialization(instance, key)
        with warnings.catch_warnings():
            # marked for removal in Dagster 2.0 with no replacement named yet (the pin is 1.13); failure
            # events per asset are not written for in-process or single-step runs, planned ones are
            warnings.simplefilter("ignore", DeprecationWarning)
            planned = instance.fetch_planned_materializations(
                AssetRecordsFilter(asset_key=key, after_storage_id=last.storage_id if last else None),
                limit=LOOK_BACK).records
        for run_id in dict.fromkeys(r.run_id for r in planned):
            record = instance.get_run_record_by_id(run_id)
            if record is None:
                continue
            if record.dagster_run.status in ACTIVE_STATUSES:
                running.add(table)
            elif record.dagster_run.status in FAILED_STATUSES:
                ended = record.end_time or record.update_timestamp.timestamp()
                failures.setdefault(table, []).append(FailedRun(run_id, ended, run_error(instance, record.dagster_run)))
    return running, failures


@dataclass(frozen=True)
class Idle:
    """A sensor's skip that is worth waiting out within its tick: a batch run still going, or nothing
    new at the source. `changed()` answers cheaply whether a new look could find work."""

    reason: str
    changed: Callable[[], bool]


def watch(evaluate: Callable[[], Union[Idle, SkipReason, SensorResult]], seconds: float, *,
          least_poll: float = 0.25, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> Union[SkipReason, SensorResult]:
    """`evaluate()`, and while it is idle, look again whenever `changed()` says so (asked every
    `least_poll` seconds, or twice as long as an evaluation took) until `seconds` have passed.

    The daemon starts a sensor's tick every 5 s at best (hard-coded), so without this a batch
    starts on average 2.5 s after the previous one ended or after a commit; watching within the
    tick starts it within a fraction of a second. Keep `seconds` under those 5 s: a tick still going
    at the daemon's next loop makes it skip the sensor once."""
    deadline = clock() + seconds
    while True:
        began = clock()
        result = evaluate()
        if not isinstance(result, Idle):
            return result
        poll = max(least_poll, 2 * (clock() - began))
        while True:
            if clock() + poll > deadline:
                return SkipReason(result.reason)
            sleep(poll)
            if result.changed():
                break


def active_batch_run(instance, tags: dict[str, str]):
    """The record of a run of the batch `tags` name that is queued or going, or None."""
    records = instance.get_run_records(RunsFilter(statuses=ACTIVE_STATUSES, tags=tags), limit=1)
    return records[0] if records else None


def batch_running(context: SensorEvaluationContext, name: str, tags: dict[str, str]) -> Idle | None:
    """Idle while a batch run of the source is going (after failing the runs whose worker is gone)."""
    for message in fail_dead_runs(context.instance, tags):
        context.log.warning(message)
    active = active_batch_run(context.instance, tags)
    if active:
        return Idle(f"batch run {active.dagster_run.run_id} of source {name} is still going; the next batch "
                    "will cover everything since its end", lambda: active_batch_run(context.instance, tags) is None)
    return None


def run_incomplete(context: SensorEvaluationContext, name: str, batch: str, settings, tags: dict[str, str],
                   batch_assets: list[AssetKey], log_key: AssetKey) -> SensorResult:
    """A batch created and not logged as complete (its run failed, was canceled, or never ran) runs
    again, with backoff, before anything later; after `settings.max_batch_attempts` the source stops and
    says so. Skipping it would lose its changes in silver."""
    decision = incomplete_batch(context.instance, tags, name, batch, settings,
                                f"ingest backfill {name} --partitions {batch} --wait")
    if decision.action == Action.RUN:
        context.log.info(decision.message)
        return SensorResult(run_requests=[batch_request(context.instance, batch, "", tags, batch_assets,
                                                        [check_key(log_key)], decision.attempt,
                                                        settings.max_run_seconds)])
    events = give_up_events(context.instance, decision, tags, batch, log_key) if decision.action == Action.GIVE_UP \
        else []
    return SensorResult(skip_reason=SkipReason(decision.message), asset_events=events)


def binlog_sensor(name: str, source: MySQLSource, tables: list[str],
                  partitions: DynamicPartitionsDefinition, lake_root: str) -> SensorDefinition:
    log_key = AssetKey([name, SOURCE_BATCH_LOG])
    log_path = source_batch_log_location(lake_root, name)
    batch_assets = source_batch_selection(name, source, tables)
    selection = AssetSelection.assets(*batch_assets, *[table_key(name, t, "snapshot") for t in tables])
    tags = {SOURCE_TAG: name}

    @sensor(
        name=f"{name}_binlog_sensor",
        minimum_interval_seconds=source.cdc.min_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if source.cdc.sensor_running else DefaultSensorStatus.STOPPED,
        asset_selection=selection,
        description=f"Polls SHOW MASTER STATUS on {source.host}:{source.port}; when the head moved, adds the next "
                    f"change batch of source {name} as a partition and runs it. A batch that is not complete "
                    "(not in the batch log) runs again, with backoff, before any later one.",
    )
    def _sensor(context: SensorEvaluationContext):
        return watch(lambda: evaluate(context), source.cdc.watch_seconds)

    def evaluate(context: SensorEvaluationContext):
        if (idle := batch_running(context, name, tags)) is not None:
            return idle
        params = connection_params(source)
        state = source_state(params, name)
        last_end, complete, skipped_until = logged(log_path)
        # tables the config names but the database does not hold (yet) wait for their CREATE TABLE
        snapshots = snapshots_recorded(context.instance, name, [t for t in tables if t in state.tables])
        starts = log_starts(snapshots)
        # only tables without a usable snapshot need their runs looked up: a sensor tick costs the same
        # for 5 tables or 500 once they are all snapshotted
        unready = [t for t, p in starts.items() if not usable_snapshot(t, p, skipped_until)]
        running, failures = snapshot_runs(context.instance, name, unready)
        tables_now = plan_tables(name, starts, skipped_until, running, failures, last_end is not None, time.time(),
                                 source.cdc.max_batch_attempts, source.cdc.retry_backoff_seconds)
        for message in [*tables_now.messages, *tables_now.quarantined.values()]:
            context.log.warning(message)
        first_start = None
        if last_end is None:
            if tables_now.waiting or not tables_now.ready:
                waiting = tables_now.waiting or tables
                # before the first batch, the preflight (`ingest check`) says what would stop the source
                # (of the tables that exist: one the config names may be created later, and waits for it)
                problems = [f.line() for f in failed(check_source(name, source, list(starts)))]
                return SkipReason(f"waiting for the snapshots of {', '.join(waiting)}: materialize "
                                  f"{', '.join(f'{name}/{t}/snapshot' for t in waiting)}; change batches start "
                                  "from the earliest snapshot position"
                                  + "".join(f". {m}" for m in tables_now.quarantined.values())
                                  + "".join(f"\n{line}" for line in problems))
            first_start = min(tables_now.ready.values())
        start = last_end or first_start
        # A batch created for this start and not logged as complete (its run failed, was canceled, or
        # never ran) runs again before anything later: skipping it would lose its changes in silver.
        pending = sorted(k for k in context.instance.get_dynamic_partitions(partitions.name)
                         if k not in complete and BatchRange.from_key(k, state.head.basename).start == start)
        if pending:
            return run_incomplete(context, name, pending[0], source.cdc, tags, batch_assets, log_key)
        requests = []
        for table in tables_now.snapshot:
            # created after CDC started, failed before, or stale: its own run, so that one table's failure
            # stays its own; not tagged with the source, so batches go on meanwhile (bronze keeps its
            # changes, and its silver catches up from its snapshot's log start)
            attempt = len(failures.get(table, ())) + 1
            requests.append(RunRequest(
                run_key=f"snapshot:{table}:{state.head}:{attempt}", tags={SNAPSHOT_TAG: f"{name}.{table}"},
                asset_selection=[table_key(name, table, "snapshot")]))
        plan = plan_next_batch(last_end, first_start, state.head, state.logs, source.cdc.max_batch_files)
        if plan.batch is None and not requests:
            return Idle(plan.reason, lambda: head_position(params) != state.head)
        adds = []
        if plan.batch is not None:
            key = plan.batch.key
            context.update_cursor(key)
            # reconciliation reads the whole source table, too much for every batch; the batch log's
            # contiguity check reads only a Delta log
            # in the steady state a run names only the tables the batch touches: Dagster writes a planned
            # event per named asset when it creates the run (6.5 s for every table of 500, on SQLite)
            steady = last_end is not None and not (tables_now.snapshot or tables_now.quarantined or skipped_until)
            named = named_tables(context.instance, name, source, tables, snapshots,
                                 binlog_touched(params, source.database, plan.batch, state.logs)) \
                if steady else tables
            requests.append(batch_request(context.instance, key, "", tags, source_batch_selection(name, source, named),
                                          [check_key(log_key)], max_runtime=source.cdc.max_run_seconds))
            adds.append(partitions.build_add_request([key]))
        return SensorResult(run_requests=requests, dynamic_partitions_requests=adds)

    return _sensor


def binlog_touched(params, database: str, batch: BatchRange, logs: list[str]) -> frozenset[str] | None:
    """The tables the batch's binlog range touches, asked of the server (None: it cannot tell)."""
    from ingest.sources.mysql.peek import peek_batch_tables

    with params.connect() as conn:
        return peek_batch_tables(conn, database, batch, logs)


def head_position(params) -> BinlogPosition:
    """The binlog head alone: what a watching sensor asks a few times a second."""
    from ingest.sources.mysql.binlog import master_position

    with params.connect() as conn:
        return master_position(conn)
