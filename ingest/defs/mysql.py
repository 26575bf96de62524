"""MySQL's and MariaDB's definitions: per table a snapshot asset, one change-batch step per source that
reads the binlog once, the binlog sensor and the reconciliation check."""
# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.

from dagster import (
    AssetCheckExecutionContext, AssetCheckResult, AssetChecksDefinition, AssetExecutionContext, AssetKey,
    AssetsDefinition, DynamicPartitionsDefinition, asset,
)

from ingest.adapters.mysql import SnapshotWrite
from ingest.config import ConfigError, MySQLSource, SourcesConfig
from ingest.defs.assets import RECONCILIATION, SourceDefs, latest_metadata, latest_metadata_of, table_key
from ingest.defs.batches import BatchAssetText, batches_partitions, change_batch_asset, contiguity_check
from ingest.defs.checks import batch_checks, compare_binlog, per_table_check, reconciliation_result
from ingest.defs.sensors import binlog_sensor
from ingest.lake.bronze import ChangeBatch
from ingest.lake.tables import CHANGES, SOURCE_BATCH_LOG, asset_part
from ingest.sources.mysql.cdc import read_change_batch, retry_batch_read
from ingest.sources.mysql.errors import NoPrimaryKey, UnsupportedColumnType
from ingest.sources.mysql.events import CapturedTable
from ingest.sources.mysql.positions import BinlogPosition
from ingest.sources.mysql.schema import connection_params, describe_table, describe_tables, list_tables
from ingest.sources.mysql.filters import RowFilterError, filter_batch
from ingest.transforms import TransformError

KINDS_MYSQL = {"mysql", "delta", "spark"}


def build_mysql_defs(name: str, source: MySQLSource, config: SourcesConfig, lake_root: str) -> SourceDefs:
    """A MySQL source's assets, sensor and checks; `lake_root` is where its sensor reads the batch log."""
    tables = resolve_tables(name, source, config)
    if SOURCE_BATCH_LOG in map(asset_part, tables):
        raise ConfigError(f"{config.path}: sources.{name}.tables: a table named {SOURCE_BATCH_LOG!r} would share "
                          "its asset key and lake folder with the source's batch log. Fix: exclude it")
    check_history(name, source, tables, config)
    partitions = batches_partitions(name)
    assets: list[AssetsDefinition] = [snapshot_asset(name, source, table, config) for table in tables]
    assets.append(batch_asset(name, source, tables, config, partitions))
    log_key = AssetKey([name, SOURCE_BATCH_LOG])
    return SourceDefs(assets, binlog_sensor(name, source, tables, partitions, lake_root),
                      [contiguity_check(log_key, BinlogPosition.from_metadata, compare_binlog, str),
                       reconciliation_checks(name, source, tables, config), *batch_checks(name, source, tables)])


def resolve_tables(name: str, source: MySQLSource, config: SourcesConfig) -> list[str]:
    """The tables a source lands; patterns need the database, plain names do not."""
    if source.tables.is_static():
        return source.tables.static_tables()
    try:
        conn = connection_params(source).connect()
    except Exception as exc:
        raise ConfigError(
            f"{config.path}: sources.{name}.tables.include has patterns, which are matched against the "
            f"database when definitions load, and that failed: {exc}. Fix: start the source, or list the "
            "tables by name"
        ) from None
    with conn:
        return source.tables.select(list_tables(conn, source.database))


def snapshot_asset(name: str, source: MySQLSource, table: str, config: SourcesConfig) -> AssetsDefinition:
    settings = source.snapshot_settings(table)
    config_ref = f"{config.path}: sources.{name}.tables.include ({table})"

    @asset(
        key=table_key(name, table, "snapshot"),
        group_name=name,
        kinds=KINDS_MYSQL,
        io_manager_key="lake",
        description=(
            f"Full snapshot of `{source.database}.{table}` on {source.host}:{source.port}, read in "
            f"primary-key chunks of {settings.chunk_size} rows, each in its own consistent-snapshot "
            "transaction and tagged with its binlog position. Resumes after the last committed chunk."
        ),
        metadata={"lake/layer": "snapshot", "source": name, "table": table, **excluded_metadata(source, table)},
    )
    def _snapshot(context: AssetExecutionContext) -> SnapshotWrite:
        params = connection_params(source)
        with params.connect() as conn:
            schema = describe_table(conn, source.database, table, config_ref, source.tables.excluded_columns(table))
            row_filter = checked_filter(conn, source, schema)
        transforms = checked_transforms(source, schema)
        context.log.info(f"{table}: {len(schema.columns)} columns, primary key {list(schema.primary_key)}"
                         + (f", leaving out {list(schema.excluded)}" if schema.excluded else "")
                         + (f", transforming {transforms.metadata()}" if transforms else "")
                         + (f", rows where {row_filter.where}" if row_filter else ""))
        return SnapshotWrite(name, params, schema, settings.chunk_size, settings.parallelism,
                             settings.chunks_per_commit, transforms, row_filter)

    return _snapshot


def check_history(name: str, source: MySQLSource, tables: list[str], config: SourcesConfig) -> None:
    """`tables.history` must name tables the source lands, each with a primary key (SCD2 tells a key's
    versions apart by it). Keys are checked when the source answers within a few seconds; when it does
    not, the snapshot of such a table says the same when it runs."""
    import fnmatch
    from dataclasses import replace as with_field

    unmatched = [p for p in source.tables.history if not any(fnmatch.fnmatchcase(t, p) for t in tables)]
    if unmatched:
        raise ConfigError(f"{config.path}: sources.{name}.tables.history: {unmatched} match no table the source "
                          f"lands ({', '.join(tables)}). Fix: name tables from tables.include")
    wanted = [t for t in tables if source.keeps_history(t)]
    if not wanted:
        return
    try:
        conn = with_field(connection_params(source), connect_timeout=3).connect()
    except Exception:
        return
    try:
        with conn:
            existing = set(list_tables(conn, source.database))
            described = describe_tables(conn, source.database, [t for t in wanted if t in existing],
                                        source.tables.excluded_columns)
    except Exception:
        return
    for t, schema in described.items():  # other problems belong to the snapshot, which names them
        if isinstance(schema, NoPrimaryKey):
            raise ConfigError(
                f"{config.path}: sources.{name}.tables.history names `{source.database}.{t}`, which has no "
                "primary key: SCD2 history tells the versions of a row apart by its key. Fix: add a primary "
                f"key to {t}, or take it out of tables.history")


def checked_transforms(source: MySQLSource, schema):
    """The table's column transforms, salts resolved and checked against its columns, before anything is
    read or written (TransformError / MissingSecret name the table, the column and the fix)."""
    return source.transforms(schema.table).check(schema.lake_columns(), schema.primary_key,
                                                 f"tables.columns.{schema.table}.transform")


def checked_filter(conn, source: MySQLSource, schema):
    """The table's row filter, planned by the server over the captured columns before anything is read or
    written (RowFilterError names the table, the problem and the fix), or None."""
    from ingest.sources.mysql.filters import check_filter

    row_filter = source.tables.row_filter(schema.table)
    if row_filter:
        check_filter(conn, schema.database, schema.table, schema.columns, row_filter, schema.excluded)
    return row_filter


def excluded_metadata(source: MySQLSource, table: str) -> dict:
    """The columns the config leaves out, shown on the table's assets."""
    excluded = sorted(source.tables.excluded_columns(table))
    return {"excluded_columns": ", ".join(excluded)} if excluded else {}


def batch_asset(name: str, source: MySQLSource, tables: list[str], config: SourcesConfig,
                partitions: DynamicPartitionsDefinition) -> AssetsDefinition:
    """MySQL's change batch: the binlog read once per batch for all tables of the source."""
    def read(context: AssetExecutionContext, batch: str) -> ChangeBatch:
        params = connection_params(source)

        def once():
            skipped: dict[str, str] = {}
            captured, transforms, schemas, filters = {}, {}, {}, {}
            with params.connect() as conn:
                existing = set(list_tables(conn, source.database))
                described = describe_tables(conn, source.database, [t for t in tables if t in existing],
                                            source.tables.excluded_columns,
                                            lambda t: f"{config.path}: sources.{name}.tables.include ({t})")
                for t, schema in described.items():
                    if isinstance(schema, (NoPrimaryKey, UnsupportedColumnType)):
                        skipped[t] = str(schema)  # this table waits for a fix; the others go on
                    elif isinstance(schema, Exception):
                        raise schema  # e.g. dropped since the list: the batch runs again
                    else:
                        try:
                            transforms[t] = checked_transforms(source, schema)
                            if row_filter := checked_filter(conn, source, schema):
                                filters[t] = row_filter
                        except (TransformError, RowFilterError) as exc:
                            skipped[t] = str(exc)  # as a column type: this table waits for a fix of the file
                            continue
                        captured[t] = schema.captured()
                        schemas[t] = schema
            for t in tables:
                if t not in existing:  # dropped since: its snapshot remembers the key; the DROP empties silver
                    recorded = latest_metadata(context.instance, table_key(name, t, "snapshot")).get("key_columns")
                    if recorded:
                        captured[t] = CapturedTable(tuple(recorded.value), source.tables.excluded_columns(t))
                        transforms[t] = source.transforms(t)
                        if row_filter := source.tables.row_filter(t):
                            filters[t] = row_filter
            got = read_change_batch(params, name, batch, captured, all_tables=tables,
                                    previous_server_id=last_server_id(context.instance, name, tables),
                                    skipped=skipped, parallel_min_bytes=source.cdc.executor_min_bytes)
            return (filter_batch(params, got, schemas, filters), captured, transforms,
                    {t: (f, schemas.get(t)) for t, f in filters.items()})

        from ingest.adapters.mysql import change_batch_writes

        # a large batch is only planned here: its tables' changes are read on Spark's executors
        got, captured, transforms, filters = retry_batch_read(once, name, batch, params)
        return change_batch_writes(name, params, got, captured, transforms, filters)

    text = BatchAssetText(
        "mysql", lambda t: f"`{source.database}.{t}`", "with op, `_pos`, commit time, GTID and the before image of "
        "updates.",
        f"Reads the binlog of {source.host}:{source.port} once per change batch for all tables of source {name}, "
        "appends bronze and merges silver for the tables it changed, and records the batch in the batch log; the "
        "partition key is the binlog range [start, end).")
    return change_batch_asset(name, tables, source.keeps_history, lambda t: excluded_metadata(source, t), partitions,
                              read, text, lambda writes: {"server_id": writes.positions["server_id"]},
                              source.layout)


def last_server_id(instance, name: str, tables: list[str]) -> int | None:
    """The server_id recorded by the newest change batch of the source, if any."""
    # the batch log records it with every batch; tables' bronze only for batches from before it did
    for keys in ([AssetKey([name, SOURCE_BATCH_LOG])], [table_key(name, t, CHANGES) for t in tables]):
        recorded = latest_metadata_of(instance, keys)
        for key in keys:
            if (server_id := recorded[key].get("server_id")) is not None:
                return int(server_id.value)
    return None


def reconciliation_checks(name: str, source: MySQLSource, tables: list[str], config: SourcesConfig
                          ) -> AssetChecksDefinition:
    def reconcile_table(context: AssetCheckExecutionContext, table: str) -> AssetCheckResult:
        from ingest.reconcile import reconcile

        settings = source.snapshot_settings(table)
        config_ref = f"{config.path}: sources.{name}.tables.include ({table})"
        lake = context.resources.lake
        params = connection_params(source)
        with params.connect() as conn:
            schema = describe_table(conn, source.database, table, config_ref, source.tables.excluded_columns(table))
            row_filter = checked_filter(conn, source, schema)
        result = reconcile(lake.spark.session, params, schema, lake.path_for(table_key(name, table)),
                           chunk_size=settings.chunk_size, parallelism=settings.parallelism,
                           transforms=checked_transforms(source, schema), row_filter=row_filter)
        return reconciliation_result(context, result)

    return per_table_check(name, RECONCILIATION, {t: table_key(name, t) for t in tables}, lambda table: (
        f"Compares the live rows of silver with `{source.database}.{table}`: a row count and checksum per "
        "primary-key range on both sides, then row by row only in the ranges that differ, leaving out keys "
        "the binlog shows changed after the position silver has merged up to. A mismatch names the ranges "
        "and keys that differ. Reads the whole source table, so the sensor's batch runs leave it out: it "
        "runs on the `reconcile_silver` schedule, or from the UI."), reconcile_table)
