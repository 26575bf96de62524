"""Asset checks on the change batches and silver: contiguity, freshness and binlog retention headroom.

They read the Delta log (what is committed) and ask the source where it is; the
verdicts come from ingest/checks.py. Each costs a read of the table's commit
history and one query to the source, so unlike reconciliation they are cheap.
"""

# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

import datetime as dt

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetChecksDefinition, asset_check

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
    from ingest.lake.commits import commits
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


def batch_checks(name: str, source, table: str) -> list[AssetChecksDefinition]:
    from ingest.defs.factory import table_key

    mysql = not isinstance(source, DynamoDBSource)
    changes, silver = table_key(name, table, CHANGES), table_key(name, table)

    @asset_check(asset=changes, name="contiguity", required_resource_keys={"lake"},
                 description="Every committed change batch starts where the one before it ended (no gap: changes "
                             "never read; no overlap: changes read twice), and the first one at or before the "
                             "snapshot's log start. Read from the bronze Delta log.")
    def _contiguity(context: AssetCheckExecutionContext) -> AssetCheckResult:
        from ingest.lake.commits import last_commit
        from ingest.sources.mysql.positions import BinlogPosition

        lake = context.resources.lake
        spark = lake.spark.session
        batches = committed_batches(spark, lake.path_for(changes), mysql)
        snap = last_commit(lake.path_for(table_key(name, table, "snapshot")), kind="snapshot")
        log_start = BinlogPosition.from_metadata(snap.metadata["log_start"]) if mysql and snap else None
        return _result(contiguity(batches, compare_binlog if mysql else lambda a, b: None, log_start))

    @asset_check(asset=silver, name="freshness", required_resource_keys={"lake"},
                 description=f"Fails when the source has changes silver lacks and silver last merged more than "
                             f"{source.cdc.max_lag_seconds} s ago (cdc.max_lag_seconds). `lag_seconds` is 0 when "
                             "silver has everything.")
    def _freshness(context: AssetCheckExecutionContext) -> AssetCheckResult:
        from ingest.lake.commits import last_commit

        lake = context.resources.lake
        spark = lake.spark.session
        merged = last_commit(lake.path_for(silver), kind="silver")
        since = (dt.datetime.now() - merged.timestamp).total_seconds() if merged else None  # Delta: local, naive
        return _result(freshness(source_is_ahead(name, source, table, spark, lake), since,
                                 source.cdc.max_lag_seconds))

    checks = [_contiguity, _freshness]
    if mysql:
        @asset_check(asset=changes, name="retention_headroom", required_resource_keys={"lake"},
                     description="Binlog files the server keeps before the committed end: fails when they are "
                                 "purged past it (the next batch cannot run; re-snapshot) and warns when the file "
                                 "holding it is the next to go.")
        def _headroom(context: AssetCheckExecutionContext) -> AssetCheckResult:
            from ingest.sources.mysql.positions import BinlogPosition
            from ingest.status import source_position

            lake = context.resources.lake
            end = committed_end(lake.spark.session, lake, name, table)
            state = source_position(source)
            if isinstance(state, str) or end is None:
                return AssetCheckResult(passed=False, severity=AssetCheckSeverity.WARN,
                                        description=state if isinstance(state, str) else "no snapshot or batch yet")
            head, oldest, expiry = state
            return _result(retention_headroom(end.seq, BinlogPosition(oldest, 4).seq, head.seq, expiry))

        checks.append(_headroom)
    return checks


def recorded_end(spark, lake, name: str, table: str, snapshot_key: str):
    """Where the table's changes are committed through, as recorded: the newest bronze batch's end, else
    the snapshot's `snapshot_key` (MySQL: log_start; DynamoDB: stream_positions); None before either."""
    from ingest.defs.factory import table_key
    from ingest.lake.commits import last_commit

    bronze = last_commit(lake.path_for(table_key(name, table, CHANGES)), kind="bronze")
    if bronze:
        return bronze.metadata["end"]
    snap = last_commit(lake.path_for(table_key(name, table, "snapshot")), kind="snapshot")
    return snap.metadata.get(snapshot_key) if snap else None


def committed_end(spark, lake, name: str, table: str):
    """The binlog position a MySQL table's changes are committed through."""
    from ingest.sources.mysql.positions import BinlogPosition

    recorded = recorded_end(spark, lake, name, table, "log_start")
    return BinlogPosition.from_metadata(recorded) if recorded else None


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
    from ingest.status import source_position

    end = committed_end(spark, lake, name, table)
    state = source_position(source)
    return end is None or isinstance(state, str) or state[0] > end
