"""Batch logs in Dagster: the contiguity check, how sensors re-run incomplete batches, and the batch
log asset of a DynamoDB table.

A batch is recorded as complete in its batch log (ingest/lake/batchlog.py) after
its bronze and silver commits: by the MySQL batch step itself (defs/factory.py),
or for a DynamoDB table by a batch log asset that runs after its silver step.
Sensors start the next batch only after the last one is logged, and re-run it
otherwise (the decision is ingest/batches.py).
"""

# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

import time
from collections.abc import Callable, Sequence
from typing import Any

from dagster import (
    AssetCheckExecutionContext, AssetCheckKey, AssetCheckResult, AssetChecksDefinition,
    AssetDep, AssetExecutionContext, AssetKey, AssetObservation, AssetsDefinition, BackfillPolicy,
    DagsterEventType, DagsterRunStatus, DynamicPartitionsDefinition, RunRequest, RunsFilter, asset, asset_check,
)

from ingest.batches import FailedRun, RetryDecision, decide_retry
from ingest.lake.tables import CHANGES, HISTORY, InOrder

SOURCE_TAG = "ingest/source"
ATTEMPT_TAG = "ingest/attempt"
GAVE_UP_TAG = "ingest/gave_up"
WORKER_TAG = "ingest/worker"
"""`host:pid:start` of the process running a batch (see localdev.processes.process_identity)."""
FAILED_STATUSES = [DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
CONTIGUITY = "batch_contiguity"
LOOK_BACK = 200
"""Batch log entries the sensor and the contiguity check read, newest first."""


class BatchIncomplete(RuntimeError):
    """A batch's steps did not all commit: it cannot be logged as complete."""


def batch_log_asset(key: AssetKey, source: str, scope: str | None, tables: Sequence[str],
                    partitions: DynamicPartitionsDefinition, table_key: Callable[..., AssetKey],
                    order: Callable[[str], Any], group: str, history: Sequence[str] = ()) -> AssetsDefinition:
    """Records each batch as complete once bronze and silver (and history, for the `history` tables) of
    every table it changed are committed."""

    @asset(
        key=key, group_name=group, kinds={"delta"}, io_manager_key="lake", partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(), required_resource_keys={"lake"},
        deps=[*(AssetDep(table_key(source, t)) for t in tables), *(AssetDep(table_key(source, t, HISTORY))
                                                                   for t in history)],
        description=("Batch log: one row per change batch whose bronze and silver commits are all in, committed "
                     "last. The sensor starts the next batch where the newest logged one ended, and runs a batch "
                     "that is not logged again before any later one."),
        metadata={"lake/layer": "batch_log", "source": source},
    )
    def _batch_log(context: AssetExecutionContext) -> InOrder:
        lake = context.resources.lake
        return InOrder([complete_batch(lake, source, scope, tables, batch, table_key, history)
                        for batch in sorted(context.partition_keys, key=order)], small_batches=True)

    return _batch_log


def complete_batch(lake, source: str, scope: str | None, tables: Sequence[str], batch: str,
                   table_key: Callable[..., AssetKey], history: Sequence[str] = ()):
    """The batch log write for `batch`, after checking in the Delta logs that every step committed."""
    from ingest.lake.batchlog import BatchLogWrite
    from ingest.lake.deltalog import last_commit

    positions, changed, missing = None, {}, []
    for t in tables:
        bronze = last_commit(lake.path_for(table_key(source, t, CHANGES)), kind="bronze", batch=batch)
        if bronze is None:
            missing.append(f"{t}: no bronze commit")
            continue
        positions = positions or bronze.metadata
        rows = int(bronze.metrics.get("numOutputRows", 0))
        if rows == 0:
            continue
        changed[t] = rows
        merged = last_commit(lake.path_for(table_key(source, t)), kind="silver", batch=batch)
        snap = last_commit(lake.path_for(table_key(source, t, "snapshot")), kind="snapshot")
        # without a finished snapshot silver waits; the snapshot's first merge catches up from bronze
        if merged is None and snap is not None and snap.metadata.get("complete"):
            missing.append(f"{t}: {rows} changes in bronze, not merged into silver")
        if t in history and snap is not None and snap.metadata.get("complete") and last_commit(
                lake.path_for(table_key(source, t, HISTORY)), kind="history", batch=batch) is None:
            missing.append(f"{t}: {rows} changes in bronze, not in its history")
    if missing or positions is None:
        raise BatchIncomplete(
            f"source {source}: batch {batch} is not complete ({'; '.join(missing) or 'nothing committed'}). "
            "Fix: run the batch's changes and silver assets for this partition; the sensor does so by itself")
    return BatchLogWrite(source, scope, batch, positions["start"], positions["end"], changed)


def contiguity_check(key: AssetKey, decode: Callable[[Any], Any], compare: Callable[[Any, Any], int | None],
                     order: Callable[[str], Any]) -> AssetChecksDefinition:
    """Logged batches follow each other with no gap; cheap (the batch log's Delta log only), so every
    sensor batch runs it. `decode` turns a logged position into one `compare` orders (or None: only
    equality, DynamoDB checkpoints)."""

    @asset_check(asset=key, name=CONTIGUITY, required_resource_keys={"lake"},
                 description="Every complete batch (in the batch log) starts where the one before it ended: no "
                             "range of the source log was skipped. Reads only the batch log's Delta log.")
    def _contiguity(context: AssetCheckExecutionContext) -> AssetCheckResult:
        from ingest.checks import CommittedBatch, contiguity
        from ingest.defs.checks import _result
        from ingest.lake.batchlog import logged_batches

        entries = {}
        for n, entry in enumerate(logged_batches(context.resources.lake.path_for(key))):
            entries.setdefault(entry.batch, entry)
            if n + 1 >= LOOK_BACK:
                break
        batches = [CommittedBatch(e.batch, decode(e.start), decode(e.end))
                   for e in sorted(entries.values(), key=lambda e: order(e.batch))]
        return _result(contiguity(batches, compare, None))

    return _contiguity


def check_key(key: AssetKey) -> AssetCheckKey:
    return AssetCheckKey(key, CONTIGUITY)


# ---------------------------------------------------------------- sensors


def failed_runs(instance, tags: dict[str, str], batch: str) -> list[FailedRun]:
    """The failed or canceled runs of one batch (by the sensor or by hand), with their errors."""
    records = instance.get_run_records(RunsFilter(statuses=FAILED_STATUSES,
                                                  tags={**tags, "dagster/partition": batch}))
    return [FailedRun(r.dagster_run.run_id, (r.end_time or r.update_timestamp.timestamp()),
                      run_error(instance, r.dagster_run)) for r in records]


def run_error(instance, run) -> str:
    """Why a run ended: its first step failure's innermost cause, else the run failure's message."""
    if run.status == DagsterRunStatus.CANCELED:
        return "the run was canceled"
    for event_type in (DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE):
        for record in instance.get_records_for_run(run.run_id, of_type=event_type, limit=1).records:
            event = record.event_log_entry.dagster_event
            if event_type == DagsterEventType.STEP_FAILURE and event.step_failure_data.error is not None:
                err = event.step_failure_data.error
                while err.cause is not None:
                    err = err.cause
                return f"{err.cls_name}: {err.message}"
            return event.message or record.event_log_entry.user_message
    return "no error recorded"


def incomplete_batch(instance, tags: dict[str, str], source: str, batch: str, settings, retry_command: str,
                     now: float | None = None) -> RetryDecision:
    failures = failed_runs(instance, tags, batch)
    return decide_retry(source, batch, failures, time.time() if now is None else now, settings.max_batch_attempts,
                        settings.retry_backoff_seconds, retry_command)


def batch_request(instance, batch: str, run_key_prefix: str, tags: dict[str, str], selection: Sequence[AssetKey],
                  checks: Sequence[AssetCheckKey], attempt: int = 1, max_runtime: int | None = None) -> RunRequest:
    """A run of every step of `batch`. Its run key counts the batch's runs so far: a batch that must run
    again gets a new key (the daemon drops a request whose key it has launched before). Run monitoring
    fails a run that outlives `max_runtime` seconds (`dagster/max_runtime`), wherever its worker runs."""
    runs = instance.get_runs_count(RunsFilter(tags={**tags, "dagster/partition": batch}))
    return RunRequest(run_key=f"{run_key_prefix}{batch}:run{runs + 1}", partition_key=batch,
                      tags={**tags, ATTEMPT_TAG: str(attempt),
                            **({"dagster/max_runtime": str(max_runtime)} if max_runtime else {})},
                      asset_selection=list(selection), asset_check_keys=list(checks))


def record_worker(context) -> None:
    """Tag the run with the process running its steps, for `fail_dead_runs`."""
    from ingest.localdev.processes import process_identity

    context.instance.add_run_tags(context.run.run_id, {WORKER_TAG: process_identity()})


def fail_dead_runs(instance, tags: dict[str, str]) -> list[str]:
    """Mark failed the STARTED runs (with `tags`) whose worker process is gone, and say so.

    The code server marks a run failed when its worker dies; when both die (a reboot, the OOM killer)
    the run stays STARTED and its source's sensor would wait for it forever. The batch then counts as
    failed and runs again under the sensor's retry policy."""
    from ingest.localdev.processes import process_alive

    said = []
    for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTED], tags=tags), limit=10):
        run = record.dagster_run
        worker = run.tags.get(WORKER_TAG)
        if worker and process_alive(worker) is False:
            message = (f"run {run.run_id} of batch {run.tags.get('dagster/partition')}: its worker process "
                       f"({worker}) is gone, and nothing marked the run failed (its code server died with it: a "
                       "reboot or the OOM killer). Marked failed by the sensor; the batch runs again")
            instance.report_run_failed(run, message)
            said.append(message)
    return said


def give_up_events(instance, decision: RetryDecision, tags: dict[str, str], batch: str,
                   log_key: AssetKey) -> list[AssetObservation]:
    """Mark the batch's last failed run and the batch log asset once with why the source stopped."""
    runs = instance.get_run_records(RunsFilter(statuses=FAILED_STATUSES, tags={**tags, "dagster/partition": batch}),
                                    limit=1)
    if not runs or runs[0].dagster_run.tags.get(GAVE_UP_TAG):
        return []
    instance.add_run_tags(runs[0].dagster_run.run_id, {GAVE_UP_TAG: decision.message[:4000]})
    return [AssetObservation(asset_key=log_key, partition=batch,
                             metadata={"stopped": True, "batch": batch, "reason": decision.message})]

