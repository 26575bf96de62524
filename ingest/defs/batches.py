"""Batch logs in Dagster: the contiguity check, how sensors re-run incomplete batches, and the batch
log asset of a DynamoDB table.

A batch is recorded as complete in its batch log (ingest/lake/batchlog.py) after
its bronze and silver commits: by the batch step itself (`change_batch_asset`, MySQL and PostgreSQL),
or for a DynamoDB table by a batch log asset that runs after its silver step.
Sensors start the next batch only after the last one is logged, and re-run it
otherwise (the decision is ingest/batches.py).
"""

# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckExecutionContext, AssetCheckKey, AssetCheckResult, AssetChecksDefinition,
    AssetDep, AssetExecutionContext, AssetKey, AssetObservation, AssetOut, AssetsDefinition, BackfillPolicy,
    DagsterEventType, DagsterRunStatus, DynamicPartitionsDefinition, Output, RunRequest, RunsFilter, asset,
    asset_check, multi_asset,
)

from ingest.batches import FailedRun, RetryDecision, decide_retry
from ingest.defs.assets import UNCHANGED_NOTE, history_description, needs_snapshot_merge, table_key
from ingest.lake.batchlog import BatchLogWrite
from ingest.lake.bronze import ChangeBatch
from ingest.lake.deltalog import last_commit
from ingest.lake.history import HistoryFromBatch
from ingest.lake.merge import Layout
from ingest.lake.silver import SilverFromBatch
from ingest.lake.tables import CHANGES, HISTORY, SOURCE_BATCH_LOG, InOrder, LakeTable, Unchanged, asset_part

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



def batches_partitions(name: str) -> DynamicPartitionsDefinition:
    """One partition per change batch; its key names the binlog range (see BatchRange)."""
    return DynamicPartitionsDefinition(name=f"{name}_batches")


@dataclass(frozen=True)
class BatchAssetText:
    """How one source kind's change-batch assets describe themselves in the UI."""

    kind: str
    """The source's kind tag ("mysql", "postgres")."""
    what: Callable[[str], str]
    """A table as the source names it, for descriptions: "`db.table`"."""
    bronze: str
    """What a bronze row holds, after "one append per batch that changed it, "."""
    step: str
    """The batch step's description."""


def change_batch_asset(name: str, tables: list[str], keeps_history: Callable[[str], bool],
                       table_metadata: Callable[[str], dict], partitions: DynamicPartitionsDefinition,
                       read: Callable[[AssetExecutionContext, str], ChangeBatch], text: BatchAssetText,
                       log_extra: Callable[[ChangeBatch], dict],
                       layout: Callable[[str], Layout]) -> AssetsDefinition:
    """One step per change batch, for any source kind: `read` the source once, append bronze and merge
    silver for the tables the batch changed (and only those), then record the batch in the source's
    batch log. A table without changes gets no commit and no step: a batch costs what its changes cost,
    not the number of tables (a silver step that merges nothing took 8-18 s per table)."""
    log_key = AssetKey([name, SOURCE_BATCH_LOG])
    bronze_out = {t: f"{asset_part(t)}__changes" for t in tables}
    silver_out = {t: asset_part(t) for t in tables}
    history_out = {t: f"{asset_part(t)}__history" for t in tables if keeps_history(t)}
    outs = {"batch_log": AssetOut(
        key=log_key, io_manager_key="lake", kinds={"delta"}, is_required=False,
        description="Batch log: one row per complete change batch (its range, the tables it changed and their "
                    "change counts), committed last. The sensor starts the next batch where the newest ended, and "
                    "runs a batch that is not logged again before any later one.",
        metadata={"lake/layer": "batch_log", "source": name})}
    for t in tables:
        outs[bronze_out[t]] = AssetOut(
            key=table_key(name, t, CHANGES), io_manager_key="lake", kinds={text.kind, "delta"}, is_required=False,
            description=(f"Change log (bronze) of {text.what(t)}: one append per batch that changed it, {text.bronze}"
                         + UNCHANGED_NOTE),
            metadata={"lake/layer": "bronze", "source": name, "table": t, **table_metadata(t)})
        outs[silver_out[t]] = AssetOut(
            key=table_key(name, t), io_manager_key="lake", kinds={"delta", "spark"}, is_required=False,
            description=(f"Current state of {text.what(t)}: the latest snapshot, then each change batch "
                         "merged in order of `_pos` (any batch order converges). Deletes stay as tombstones "
                         "(`_deleted`); read live rows with `ingest.lake.merge.live_rows`." + UNCHANGED_NOTE),
            metadata={"lake/layer": "silver", "source": name, "table": t, **table_metadata(t)})
        if t in history_out:
            outs[history_out[t]] = history_out_def(name, t, text.what(t), table_metadata(t))

    @multi_asset(
        name=f"{name}_batch",
        outs=outs,
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        can_subset=True,
        deps=[table_key(name, t, "snapshot") for t in tables],
        internal_asset_deps={
            **{bronze_out[t]: set() for t in tables},
            **{silver_out[t]: {table_key(name, t, CHANGES), table_key(name, t, "snapshot")} for t in tables},
            **{out: {table_key(name, t, CHANGES), table_key(name, t, "snapshot")} for t, out in history_out.items()},
            # The batch log is committed after the batch's silver merges, but it names no table as its
            # upstream: Dagster looks up the last materialization of each upstream asset one query at a
            # time when it records an output (data versions), which cost 0.7 s per batch on a source of
            # 100 tables, whatever the batch changed.
            "batch_log": set(),
        },
        required_resource_keys={"lake"},
        group_name=name,
        description=text.step,
    )
    def _batch(context: AssetExecutionContext):
        record_worker(context)
        lake = context.resources.lake
        selected = context.op_execution_context.selected_output_names
        reads = any(bronze_out[t] in selected for t in tables)

        def layers(t: str) -> set[str]:
            return {bronze_out[t], silver_out[t], *([history_out[t]] if t in history_out else [])}

        # a backfill asks for every selected table: the ones a batch did not change are reported unchanged
        report_unchanged = "dagster/backfill" in context.run.tags

        def steps(batch: str):
            """(output name, asset key, write) of one batch, in commit order: bronze, silver, batch log.
            A batch its run decoded itself (no table read by executors) commits with small-batch settings:
            the writes happen while this generator waits at its yields."""
            from contextlib import nullcontext

            from ingest.lake.write import small_batch_settings

            settings = nullcontext()
            if reads:
                writes = read(context, batch)
                if all(w.frame is None for w in writes.values()):
                    settings = small_batch_settings(lake.spark.session)
            with settings:
                yield from batch_steps(batch, writes if reads else None)

        def batch_steps(batch: str, writes):
            skipped = {}
            if reads:
                changed = {t: w for t, w in writes.items() if w.changed}
                skipped = writes.skipped
                if "batch_log" in selected:
                    unnamed = sorted(t for t in changed if not layers(t) <= selected)
                    if unnamed:  # logging the batch would lose their changes: fail before any write
                        raise BatchSelectionMissed(
                            f"batch {batch} of source {name} changed {', '.join(unnamed)}, which this run does "
                            "not name (the sensor names the tables the server says a batch touches). Nothing "
                            "was written; the sensor runs the batch again naming every table")
                for t, reason in skipped.items():
                    context.log.warning(f"batch {batch}: table {t} left out: {reason}")
                    quarantined.extend(AssetObservation(asset_key=key, partition=batch, metadata={
                        "quarantined": reason, "batch": batch}) for key in (table_key(name, t, CHANGES),
                                                                            table_key(name, t)))
            else:  # silver alone (rebuilt from the lake): the batch's bronze commits say what it changed
                changed = {t: None for t in tables
                           if last_commit(lake.path_for(table_key(name, t, CHANGES)), kind="bronze", batch=batch)}
            for t in tables:
                if bronze_out[t] in selected and changed.get(t) is not None:
                    yield bronze_out[t], table_key(name, t, CHANGES), changed[t]
                elif bronze_out[t] in selected and report_unchanged:
                    yield bronze_out[t], table_key(name, t, CHANGES), Unchanged(batch)
            for t in tables:
                if silver_out[t] not in selected:
                    continue
                # a table the batch did not change still merges its snapshot once it has a new one
                if t in changed or needs_snapshot_merge(lake, name, t):
                    yield silver_out[t], table_key(name, t), SilverFromBatch(
                        name, t, LakeTable(lake.spark.session, lake.path_for(table_key(name, t, CHANGES)), batch),
                        LakeTable(lake.spark.session, lake.path_for(table_key(name, t, "snapshot"))),
                        batch_required=t in changed, layout=layout(t))
                elif report_unchanged:
                    yield silver_out[t], table_key(name, t), Unchanged(batch)
            for t, out in history_out.items():
                if out not in selected:
                    continue
                if t in changed or needs_snapshot_merge(lake, name, t, HISTORY):
                    yield out, table_key(name, t, HISTORY), HistoryFromBatch(
                        name, t, LakeTable(lake.spark.session, lake.path_for(table_key(name, t, CHANGES)), batch),
                        LakeTable(lake.spark.session, lake.path_for(table_key(name, t, "snapshot"))), layout(t))
                elif report_unchanged:
                    yield out, table_key(name, t, HISTORY), Unchanged(batch)
            if reads and "batch_log" in selected:
                yield "batch_log", log_key, BatchLogWrite(
                    name, None, batch, writes.positions["start"], writes.positions["end"],
                    change_counts(lake, name, batch, changed), extra=log_extra(writes), skipped=skipped)

        # A partition range (one run under the single-run backfill policy) commits each batch before
        # reading the next, so memory holds one batch; the last one goes out through the outputs.
        quarantined: list[AssetObservation] = []
        *earlier, last = sorted(context.partition_keys)
        for batch in earlier:
            for _, key, write in steps(batch):
                lake.write(key, write, context.log.info)
        for output, _, write in steps(last):
            yield from quarantined
            quarantined.clear()
            yield Output(write, output_name=output, metadata={"batches": len(earlier) + 1})
        yield from quarantined

    return _batch


class BatchSelectionMissed(RuntimeError):
    """A batch run that would log the batch does not name every table the batch changed."""


def change_counts(lake, name: str, batch: str, changed: dict) -> dict[str, int]:
    """Changes per table of a batch whose bronze appends are committed: counted in the driver, or for
    changes read by executors, from their bronze commit."""
    return {t: len(w.records) if w.frame is None else int(last_commit(
        lake.path_for(table_key(name, t, CHANGES)), kind="bronze", batch=batch).metrics.get("numOutputRows", 0))
        for t, w in changed.items()}


def history_out_def(name: str, table: str, what: str, metadata: dict) -> AssetOut:
    return AssetOut(key=table_key(name, table, HISTORY), io_manager_key="lake", kinds={"delta", "spark"},
                    is_required=False, description=history_description(what) + UNCHANGED_NOTE,
                    metadata={"lake/layer": "history", "source": name, "table": table, **metadata})
