"""Asset checks on the change batches and silver: contiguity, freshness and binlog retention headroom.

They read the Delta log (what is committed) and ask the source where it is; the
verdicts come from ingest/checks.py. Each costs a read of the table's commit
history and one query to the source, so unlike reconciliation they are cheap.
"""

# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

import datetime as dt
from collections.abc import Callable, Mapping, Sequence

from dagster import (
    AssetCheckExecutionContext, AssetCheckKey, AssetCheckResult, AssetCheckSeverity, AssetChecksDefinition,
    AssetCheckSpec, AssetKey, Failure, multi_asset_check,
)

from ingest.checks import CommittedBatch, Verdict, contiguity, freshness, retention_headroom
from ingest.config import DynamoDBSource
from ingest.lake.tables import CHANGES


def _result(verdict: Verdict) -> AssetCheckResult:
    from ingest.defs.io_managers import to_dagster_metadata

    return AssetCheckResult(passed=verdict.passed, description=verdict.description,
                            severity=AssetCheckSeverity.WARN if verdict.warn_only else AssetCheckSeverity.ERROR,
                            metadata=to_dagster_metadata(verdict.metadata))


def compare_binlog(a, b):
    return (a > b) - (a < b)


def committed_batches(spark, bronze_path: str, mysql: bool) -> list[CommittedBatch]:
    from ingest.lake.deltalog import commits
    from ingest.sources.mysql.positions import BinlogPosition

    found = {}
    for info in commits(bronze_path):
        meta = info.metadata
        if meta.get("kind") == "bronze" and "start" in meta and "end" in meta:
            start, end = meta["start"], meta["end"]
            if mysql:
                start, end = BinlogPosition.from_metadata(start), BinlogPosition.from_metadata(end)
            found[meta["batch"]] = CommittedBatch(meta["batch"], start, end)
    return [found[k] for k in sorted(found)]


def reconciliation_result(context: AssetCheckExecutionContext, result) -> AssetCheckResult:
    """A `reconciliation` check's verdict (ingest/lake/reconcile.Reconciliation), logged and with its
    figures as metadata."""
    from ingest.defs.io_managers import to_dagster_metadata
    from ingest.lake.reconcile import reconciliation_metadata

    context.log.info(result.summary())
    return AssetCheckResult(passed=result.passed, severity=AssetCheckSeverity.ERROR, description=result.summary(),
                            metadata=to_dagster_metadata(reconciliation_metadata(result)))


def per_table_check(source: str, check: str, keys: Mapping[str, AssetKey], description: str | Callable[[str], str],
                    evaluate: Callable[[AssetCheckExecutionContext, str], AssetCheckResult]) -> AssetChecksDefinition:
    """`check` on every table of `source` (`keys`: table -> the asset it checks) as one definition that runs
    the tables selected. Each run's process loads every definition of the code location, and a Dagster
    check definition costs about 0.4 ms to build and plan: one per table and check was 0.75 s of a 500-table
    source's load, on every batch run. A table whose check raises does not stop the others; the step fails
    after them, naming it."""
    by_key = {AssetCheckKey(key, check): table for table, key in keys.items()}

    @multi_asset_check(name=f"{source}_{check}_checks", can_subset=True, required_resource_keys={"lake"},
                       specs=[AssetCheckSpec(check, asset=key,
                                             description=description if isinstance(description, str)
                                             else description(table))
                              for table, key in keys.items()])
    def _checks(context: AssetCheckExecutionContext):
        errors: dict[str, Exception] = {}
        for key, table in by_key.items():
            if key not in context.selected_asset_check_keys:
                continue
            try:
                result = evaluate(context, table)
            except Exception as exc:  # noqa: BLE001 - raised after the other tables are checked
                context.log.error(f"{check} of {table}: {exc}")
                errors[table] = exc
                continue
            yield AssetCheckResult(asset_key=key.asset_key, check_name=check, passed=result.passed,
                                   severity=result.severity, description=result.description,
                                   metadata=result.metadata)
        if len(errors) == 1:
            raise next(iter(errors.values()))
        if errors:
            raise Failure(f"{check} could not run for tables {sorted(errors)}: "
                          + "; ".join(f"{t}: {e}" for t, e in errors.items()))

    return _checks


def batch_checks(name: str, source, tables: Sequence[str]) -> list[AssetChecksDefinition]:
    from ingest.defs.assets import table_key

    mysql = not isinstance(source, DynamoDBSource)

    def contiguity_of(context: AssetCheckExecutionContext, table: str) -> AssetCheckResult:
        from ingest.lake.deltalog import last_commit
        from ingest.sources.mysql.positions import BinlogPosition

        lake = context.resources.lake
        batches = committed_batches(lake.spark.session, lake.path_for(table_key(name, table, CHANGES)), mysql)
        snap = last_commit(lake.path_for(table_key(name, table, "snapshot")), kind="snapshot")
        log_start = BinlogPosition.from_metadata(snap.metadata["log_start"]) if mysql and snap else None
        return _result(contiguity(batches, compare_binlog if mysql else lambda a, b: None, log_start))

    def freshness_of(context: AssetCheckExecutionContext, table: str) -> AssetCheckResult:
        from ingest.lake.deltalog import last_commit

        lake = context.resources.lake
        merged = last_commit(lake.path_for(table_key(name, table)), kind="silver")
        since = (dt.datetime.now() - merged.timestamp).total_seconds() if merged else None  # Delta: local, naive
        return _result(freshness(source_is_ahead(name, source, table, lake.spark.session, lake), since,
                                 source.cdc.max_lag_seconds))

    def headroom_of(context: AssetCheckExecutionContext, table: str) -> AssetCheckResult:
        from ingest.sources.mysql.positions import BinlogPosition
        from ingest.status import source_position

        lake = context.resources.lake
        end = committed_end(lake, name, table)
        state = source_position(source)
        if isinstance(state, str) or end is None:
            return AssetCheckResult(passed=False, severity=AssetCheckSeverity.WARN,
                                    description=state if isinstance(state, str) else "no snapshot or batch yet")
        head, oldest, expiry = state
        return _result(retention_headroom(end.seq, BinlogPosition(oldest, 4).seq, head.seq, expiry))

    changes = {t: table_key(name, t, CHANGES) for t in tables}
    checks = [
        per_table_check(name, "contiguity", changes, (
            "Every committed change batch starts where the one before it ended (no gap: changes never read; no "
            "overlap: changes read twice), and the first one at or before the snapshot's log start. Read from "
            "the bronze Delta log."), contiguity_of),
        per_table_check(name, "freshness", {t: table_key(name, t) for t in tables}, (
            f"Fails when the source has changes silver lacks and silver last merged more than "
            f"{source.cdc.max_lag_seconds} s ago (cdc.max_lag_seconds). `lag_seconds` is 0 when silver has "
            "everything."), freshness_of),
    ]
    if mysql:
        checks.append(per_table_check(name, "retention_headroom", changes, (
            "Binlog files the server keeps before the committed end: fails when they are purged past it (the "
            "next batch cannot run; re-snapshot) and warns when the file holding it is the next to go."),
            headroom_of))
    return checks


def recorded_end(spark, lake, name: str, table: str, snapshot_key: str):
    """Where the table's changes are committed through, as recorded: the newest bronze batch's end, else
    the snapshot's `snapshot_key` (MySQL: log_start; DynamoDB: stream_positions); None before either."""
    from ingest.defs.assets import table_key
    from ingest.lake.deltalog import last_commit

    bronze = last_commit(lake.path_for(table_key(name, table, CHANGES)), kind="bronze")
    if bronze:
        return bronze.metadata["end"]
    snap = last_commit(lake.path_for(table_key(name, table, "snapshot")), kind="snapshot")
    return snap.metadata.get(snapshot_key) if snap else None


def committed_end(lake, name: str, table: str):
    """The binlog position a MySQL table's changes are in the lake through: its own newest end, or the
    source's batch log's (status.covered_through)."""
    from ingest.sources.mysql.positions import BinlogPosition
    from ingest.status import committed, logged_ends

    parse = BinlogPosition.from_metadata
    return committed(lake.lake_root, name, table, parse, logged_ends(lake.lake_root, name, parse)).end


def source_is_ahead(name: str, source, table: str, spark, lake) -> bool:
    """Whether the source has changes past what bronze committed (unknown counts as ahead)."""
    if isinstance(source, DynamoDBSource):
        from ingest.sources.dynamodb.client import client_settings
        from ingest.sources.dynamodb.positions import StreamCheckpoint
        from ingest.sources.dynamodb.streams import has_new_records

        recorded = recorded_end(spark, lake, name, table, "stream_positions")
        if recorded is None:
            return True
        return has_new_records(client_settings(source).streams(), name, table, StreamCheckpoint.from_metadata(recorded))
    from ingest.status import source_is_ahead as binlog_ahead

    return binlog_ahead(source, committed_end(lake, name, table), table)
