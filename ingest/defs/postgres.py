"""A PostgreSQL source's assets and sensor: per table a snapshot, and the change batches of the
source's slot into bronze, silver and the batch log, through the same batch step as MySQL's."""

# No `from __future__ import annotations`: Dagster inspects the context annotation.

import time

from dagster import (
    AssetCheckKey, AssetExecutionContext, AssetKey, AssetSelection, AssetsDefinition, DefaultSensorStatus,
    DynamicPartitionsDefinition, SensorDefinition, SensorEvaluationContext, SensorResult, SkipReason, asset, sensor,
)

from ingest.adapters.postgres import PgParams
from ingest.config import ConfigError, MissingSecret, PostgresSource
from ingest.defs.assets import RECONCILIATION, table_key
from ingest.defs.batches import (
    SOURCE_TAG, BatchAssetText, batch_request, batches_partitions, change_batch_asset, check_key, contiguity_check,
)
from ingest.lake.tables import SOURCE_BATCH_LOG, source_batch_log_location

KINDS = {"postgres", "delta", "spark"}
HEADROOM = "slot_headroom"
EMPTY_BATCH_BYTES = 64 * 1024 * 1024
"""WAL the slot may hold for activity outside the source's tables before an empty batch lets the server
release it (a batch with no changes costs a batch-log row)."""


def check_postgres(name: str, source: PostgresSource):
    """The preflight's findings for the source (`ingest check`, and the sensor before the first batch)."""
    from ingest.sources.findings import FAIL, Finding
    from ingest.sources.postgres.preflight import findings, gather

    try:
        with PgParams.of(source).connect() as conn:
            server, tables = gather(conn, source.publication, [source.qualified(t) for t in source.tables.include])
            return findings(name, source.publication, server, tables) + filter_findings(conn, source, tables)
    except MissingSecret as exc:  # its own fix, not the connection's
        return [Finding(FAIL, f"source {name}", str(exc))]
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the finding
        return [Finding(FAIL, f"source {name}", f"cannot connect to {source.host}:{source.port} as {source.user}: "
                        f"{str(exc).strip()}. Fix: start the server, or correct host, port, user and "
                        f"{source.password_env}")]


def filter_findings(conn, source: PostgresSource, tables) -> list:
    """A finding for each row filter of a table that exists: what the snapshot and the batches check."""
    from ingest.sources.findings import FAIL, OK, Finding
    from ingest.sources.postgres.filters import RowFilterError, check_filter

    out = []
    for t in tables:
        row_filter = source.tables.row_filter(t.name.partition(".")[2])
        if row_filter and t.exists:
            try:
                check_filter(conn, t.name, row_filter)
                out.append(Finding(OK, t.name, f"rows where {row_filter.where}"))
            except RowFilterError as exc:
                out.append(Finding(FAIL, t.name, str(exc)))
    return out


def snapshot_asset(name: str, source: PostgresSource, table: str) -> AssetsDefinition:
    settings = source.snapshot_settings(table)

    @asset(
        key=table_key(name, table, "snapshot"), group_name=name, kinds=KINDS, io_manager_key="lake",
        description=(f"Full snapshot of `{source.qualified(table)}` in {source.database} on {source.host}:{source.port}, "
                     f"read in primary-key chunks of {settings.chunk_size} rows at a replication slot's exported "
                     "snapshot (lock-free, one consistent point). Creates the source's slot first. Resumes after "
                     "the last committed wave."),
        metadata={"lake/layer": "snapshot", "source": name, "table": table},
    )
    def _snapshot(context: AssetExecutionContext):
        from ingest.adapters.postgres import PgSnapshotWrite

        return PgSnapshotWrite(name, PgParams.of(source), source.slot_name(name), source.qualified(table),
                               settings.chunk_size, settings.parallelism, settings.chunks_per_commit,
                               source.transforms(table), source.tables.row_filter(table))

    return _snapshot


def batch_asset(name: str, source: PostgresSource, tables: list[str],
                partitions: DynamicPartitionsDefinition) -> AssetsDefinition:
    def read(context: AssetExecutionContext, batch: str):
        from dataclasses import replace

        from ingest.adapters.postgres import change_batch_writes
        from ingest.changes import SourceBatch
        from ingest.defs.sensors import logged
        from ingest.sources.postgres.cdc import confirm, read_change_batch
        from ingest.sources.postgres.filters import check_filter, described, filter_batch
        from ingest.sources.postgres.positions import Lsn, LsnRange

        params, slot = PgParams.of(source), source.slot_name(name)
        filters = {source.qualified(t): f for t in tables if (f := source.tables.row_filter(t))}
        wanted = LsnRange.from_key(batch)
        with params.connect() as conn:  # a large batch is only planned here: executors read its changes
            for qualified, row_filter in filters.items():  # RowFilterError: the batch fails before writing
                check_filter(conn, qualified, row_filter)
            # A range of batches in one run (a backfill) logs each before reading the next: release what
            # the log holds, as the sensor does between runs, or each batch's readers decode every earlier
            # batch's WAL of the run again (3M changes in five batches: each slower than the one before).
            # Never past this batch's start: a batch run again after the slot moved on fails as before.
            end = logged(context.resources.lake.path_for(AssetKey([name, SOURCE_BATCH_LOG])), Lsn.from_metadata).end
            if end is not None and end <= wanted.start:
                confirm(conn, name, slot, end)
            got = read_change_batch(conn, name, slot, source.publication, wanted,
                                    [source.qualified(t) for t in tables], source.cdc.executor_min_bytes)
            got = filter_batch(conn, got, {q: described(conn, q) for q in filters}, filters)
        by_name = {source.qualified(t): t for t in tables}
        changes = {by_name[q]: replace(c, records=[replace(r, table=by_name[q]) for r in c.records])
                   for q, c in got.tables.items()}
        transforms = {t: source.transforms(t).check(c.columns, (), f"tables.columns.{t}.transform")
                      for t, c in changes.items()}
        return change_batch_writes(name, params, slot, source.publication,
                                   SourceBatch(got.key, changes, got.positions, got.extra),
                                   {t: source.qualified(t) for t in tables}, transforms,
                                   {t: f for t in tables if (f := source.tables.row_filter(t))},
                                   source.cdc.executor_readers)

    text = BatchAssetText(
        "postgres", lambda t: f"`{source.qualified(t)}`", "with op, `_pos` (commit LSN and place among the "
        "transaction's changes to the table), commit time, xid, and `_unchanged` where an update did not send a "
        "TOASTed value.",
        f"Reads replication slot {source.slot_name(name)} of {source.host}:{source.port} (publication "
        f"{source.publication}) once per change batch, appends bronze and merges silver for the tables it changed, "
        "and records the batch in the batch log; the partition key is the commit-LSN range [start, end). The "
        "sensor confirms the slot only up to batches the log holds.")
    return change_batch_asset(name, tables, source.keeps_history, lambda t: {}, partitions, read, text,
                              lambda writes: {"slot": source.slot_name(name)}, source.layout)


def slot_sensor(name: str, source: PostgresSource, tables: list[str], partitions: DynamicPartitionsDefinition,
                lake_root: str) -> SensorDefinition:
    from ingest.defs.sensors import source_batch_selection

    log_key = AssetKey([name, SOURCE_BATCH_LOG])
    log_path = source_batch_log_location(lake_root, name)
    batch_assets = source_batch_selection(name, source, tables)
    tags = {SOURCE_TAG: name}
    slot = source.slot_name(name)

    @sensor(
        name=f"{name}_slot_sensor",
        minimum_interval_seconds=source.cdc.min_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if source.cdc.sensor_running else DefaultSensorStatus.STOPPED,
        asset_selection=AssetSelection.assets(*batch_assets, *[table_key(name, t, "snapshot") for t in tables]),
        description=f"Confirms slot {slot} up to the batches the lake logged, then, when a transaction changed a "
                    f"table of source {name} since, adds the next change batch as a partition and runs it. A batch "
                    "that is not complete (not in the batch log) runs again, with backoff, before any later one.",
    )
    def _sensor(context: SensorEvaluationContext):
        from ingest.defs.sensors import watch

        return watch(lambda: evaluate(context), source.cdc.watch_seconds)

    def evaluate(context: SensorEvaluationContext):
        from ingest.defs.sensors import (
            Idle, batch_running, log_starts, logged, named_tables, run_incomplete, snapshots_recorded,
        )
        from ingest.sources.postgres.cdc import confirm, plan_next_batch, slot_state
        from ingest.sources.postgres.positions import Lsn, LsnRange
        from ingest.sources.postgres.slot import peek_batch_tables

        if (idle := batch_running(context, name, tags)) is not None:
            return idle
        last_end, complete, _ = logged(log_path, Lsn.from_metadata)
        snapshots = snapshots_recorded(context.instance, name, tables)
        starts = log_starts(snapshots, Lsn.from_metadata)
        waiting = [t for t, p in starts.items() if p is None]
        if last_end is None and waiting:
            from ingest.sources.findings import failed

            problems = [f.line() for f in failed(check_postgres(name, source))]
            return SkipReason(f"waiting for the snapshots of {', '.join(waiting)}: materialize "
                              f"{', '.join(f'{name}/{t}/snapshot' for t in waiting)}; change batches start from the "
                              "earliest snapshot position" + "".join(f"\n{line}" for line in problems))
        start = last_end or min(starts.values())
        pending = sorted(k for k in context.instance.get_dynamic_partitions(partitions.name)
                         if k not in complete and LsnRange.from_key(k).start == start)
        if pending:
            return run_incomplete(context, name, pending[0], source.cdc, tags, batch_assets, log_key)
        with PgParams.of(source).connect() as conn:
            if last_end is not None:
                confirm(conn, name, slot, last_end)  # the lake logged everything before it
            state = slot_state(conn, name, slot)
            batch = plan_next_batch(last_end, None if last_end else start, state.head)
            moved = lambda: wal_head(source) != state.head  # noqa: E731
            if batch is None:
                return Idle(f"WAL head at {state.head}: nothing new since {start}", moved)
            peeked = peek_batch_tables(conn, slot, source.publication, batch.end)
            if peeked.messages == 0 and state.head.value - start.value < EMPTY_BATCH_BYTES:
                return Idle(f"no transaction changed a table of source {name} before the WAL head "
                            f"{state.head} (slot {slot} holds {state.retained_bytes} bytes of WAL)", moved)
        # after the first batch a run names only the tables the batch touches (see named_tables)
        touched = None if last_end is None or peeked.tables is None else \
            [t for t in tables if source.qualified(t) in peeked.tables]
        named = named_tables(context.instance, name, source, tables, snapshots, touched)
        context.update_cursor(f"{batch.key}@{time.time():.0f}")
        return SensorResult(
            run_requests=[batch_request(context.instance, batch.key, "", tags,
                                        source_batch_selection(name, source, named),
                                        [check_key(log_key), AssetCheckKey(log_key, HEADROOM)],
                                        max_runtime=source.cdc.max_run_seconds)],
            dynamic_partitions_requests=[partitions.build_add_request([batch.key])])

    return _sensor


def wal_head(source: PostgresSource):
    """The server's WAL head alone: what a watching sensor asks a few times a second."""
    from ingest.sources.postgres.positions import Lsn

    with PgParams.of(source).connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        return Lsn.parse(cur.fetchone()[0])


def headroom_check(name: str, source: PostgresSource, log_key: AssetKey):
    from dagster import AssetCheckExecutionContext, AssetCheckResult, asset_check

    slot = source.slot_name(name)

    @asset_check(asset=log_key, name=HEADROOM,
                 description=f"Replication slot {slot} exists and the server is not about to invalidate it: the WAL "
                             "it keeps (pg_replication_slots: wal_status, safe_wal_size). Gone or at risk names the fix.")
    def _headroom(context: AssetCheckExecutionContext) -> AssetCheckResult:
        from ingest.checks import slot_headroom
        from ingest.defs.checks import _result
        from ingest.sources.postgres.cdc import slot_row

        with PgParams.of(source).connect() as conn:
            row = slot_row(conn, slot)
        if row is None:
            return _result(slot_headroom(slot, None, 0, None))
        _, wal_status, _, retained, safe, _ = row
        return _result(slot_headroom(slot, wal_status, int(retained or 0), None if safe is None else int(safe)))

    return _headroom


def freshness_checks(name: str, source: PostgresSource, tables: list[str], lake_root: str):
    from dagster import AssetCheckExecutionContext

    from ingest.defs.checks import per_table_check

    slot = source.slot_name(name)

    def freshness_of(context: AssetCheckExecutionContext, table: str):
        import datetime as dt

        from ingest.checks import freshness
        from ingest.defs.checks import _result
        from ingest.defs.sensors import logged
        from ingest.lake.deltalog import last_commit
        from ingest.sources.postgres.cdc import confirm, slot_state
        from ingest.sources.postgres.positions import Lsn
        from ingest.sources.postgres.slot import has_changes

        merged = last_commit(context.resources.lake.path_for(table_key(name, table)), kind="silver")
        since = (dt.datetime.now() - merged.timestamp).total_seconds() if merged else None  # Delta: local, naive
        end = logged(source_batch_log_location(lake_root, name), Lsn.from_metadata).end
        with PgParams.of(source).connect() as conn:
            if end is not None:
                confirm(conn, name, slot, end)  # as the sensor does: the slot then holds only what the log lacks
            ahead = end is None or has_changes(conn, slot, source.publication, slot_state(conn, name, slot).head)
        return _result(freshness(ahead, since, source.cdc.max_lag_seconds))

    return per_table_check(name, "freshness", {t: table_key(name, t) for t in tables}, (
        f"Fails when the source has changes silver may lack (a transaction on a table of source {name} after the "
        f"batch log's end) and silver last merged more than {source.cdc.max_lag_seconds} s ago "
        "(cdc.max_lag_seconds)."), freshness_of)


def reconciliation_checks(name: str, source: PostgresSource, tables: list[str]):
    from dagster import AssetCheckExecutionContext, AssetCheckResult

    from ingest.defs.checks import per_table_check, reconciliation_result

    def reconcile_table(context: AssetCheckExecutionContext, table: str) -> AssetCheckResult:
        from ingest.adapters.postgres import reconcile

        settings = source.snapshot_settings(table)
        lake = context.resources.lake
        result = reconcile(lake.spark.session, PgParams.of(source), source.slot_name(name), source.publication,
                           source.qualified(table), lake.path_for(table_key(name, table)),
                           chunk_size=settings.chunk_size, parallelism=settings.parallelism,
                           transforms=source.transforms(table), row_filter=source.tables.row_filter(table))
        return reconciliation_result(context, result)

    return per_table_check(name, RECONCILIATION, {t: table_key(name, t) for t in tables}, lambda table: (
        f"Compares the live rows of silver with `{source.qualified(table)}` read at a temporary slot's exported "
        "snapshot: a row count and checksum per primary-key range on both sides, then row by row only in the "
        "ranges that differ, leaving out keys the source's slot shows changed after silver's position. Reads "
        "the whole table: it runs on the `reconcile_silver` schedule, or from the UI."), reconcile_table)


def build_postgres_defs(name: str, source: PostgresSource, lake_root: str):
    """The source's assets, its sensor and the batch log's contiguity check."""
    from ingest.defs.checks import compare_binlog as compare
    from ingest.sources.postgres.positions import Lsn

    if not source.tables.is_static():
        raise ConfigError(f"sources.{name}.tables.include: patterns are not available for postgres sources yet. "
                          "Fix: list the tables by name")
    tables = source.tables.static_tables()
    partitions = batches_partitions(name)
    assets = [*(snapshot_asset(name, source, t) for t in tables), batch_asset(name, source, tables, partitions)]
    log_key = AssetKey([name, SOURCE_BATCH_LOG])
    return assets, slot_sensor(name, source, tables, partitions, lake_root), \
        [contiguity_check(log_key, Lsn.from_metadata, compare, str), headroom_check(name, source, log_key),
         freshness_checks(name, source, tables, lake_root), reconciliation_checks(name, source, tables)]
