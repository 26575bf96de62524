"""Assets generated from the sources file: per table a snapshot and a silver asset."""
# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.


from dataclasses import replace
from typing import NamedTuple

from dagster import (
    AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetChecksDefinition, AssetExecutionContext,
    AssetIn, AssetKey, AssetOut, AssetsDefinition, BackfillPolicy, DynamicPartitionsDefinition, Output,
    SensorDefinition, asset, asset_check, multi_asset,
)

from ingest.config import ConfigError, DynamoDBSource, MySQLSource, SourcesConfig
from ingest.lake.silver import SilverFromBatch
from ingest.lake.tables import CHANGES, SOURCE_BATCH_LOG, InOrder, LakeTable, asset_part
from ingest.sources.mysql.cdc import read_change_batch, retry_batch_read
from ingest.sources.mysql.positions import BinlogPosition
from ingest.sources.mysql.schema import connection_params, describe_table, list_tables
from ingest.sources.mysql.snapshot import SnapshotWrite

KINDS_MYSQL = {"mysql", "delta", "spark"}


def table_key(name: str, table: str, layer: str | None = None) -> AssetKey:
    """`<source>/<table>[/<layer>]`, the table's name made a valid Dagster name (see asset_part)."""
    return AssetKey([name, asset_part(table), *([layer] if layer else [])])


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
        metadata={"lake/layer": "snapshot", "source": name, "table": table},
    )
    def _snapshot(context: AssetExecutionContext) -> SnapshotWrite:
        params = connection_params(source)
        with params.connect() as conn:
            schema = describe_table(conn, source.database, table, config_ref)
        context.log.info(f"{table}: {len(schema.columns)} columns, primary key {list(schema.primary_key)}")
        return SnapshotWrite(name, params, schema, settings.chunk_size, settings.parallelism,
                             settings.chunks_per_commit)

    return _snapshot


def batches_partitions(name: str) -> DynamicPartitionsDefinition:
    """One partition per change batch; its key names the binlog range (see BatchRange)."""
    return DynamicPartitionsDefinition(name=f"{name}_batches")


def changes_asset(name: str, source: MySQLSource, tables: list[str], config: SourcesConfig,
                  partitions: DynamicPartitionsDefinition) -> AssetsDefinition:
    @multi_asset(
        name=f"{name}_changes",
        outs={asset_part(t): AssetOut(key=table_key(name, t, CHANGES), io_manager_key="lake", kinds={"mysql", "delta"},
                          description=f"Change log (bronze) of `{source.database}.{t}`: one append per batch, "
                                      "with op, `_pos`, commit time, GTID and the before image of updates.",
                          metadata={"lake/layer": "bronze", "source": name, "table": t})
              for t in tables},
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        required_resource_keys={"lake"},
        group_name=name,
        description=f"Reads the binlog of {source.host}:{source.port} once per change batch for all tables "
                    f"of source {name}; the partition key is the binlog range [start, end).",
    )
    def _changes(context: AssetExecutionContext):
        params = connection_params(source)

        def read(batch: str):
            with params.connect() as conn:
                existing = set(list_tables(conn, source.database))
                keys = {t: list(describe_table(conn, source.database, t, f"{config.path}: sources.{name}.tables."
                                                                         f"include ({t})").primary_key)
                        for t in tables if t in existing}
            for t in tables:
                if t not in existing:  # dropped since: its snapshot remembers the key; the DROP empties silver
                    recorded = latest_metadata(context.instance, table_key(name, t, "snapshot")).get("key_columns")
                    if recorded:
                        keys[t] = list(recorded.value)
            return read_change_batch(params, name, batch, keys, all_tables=tables,
                                     previous_server_id=last_server_id(context.instance, name, tables))

        # A partition range (one run under the single-run backfill policy) commits each batch as it
        # reads it, so memory holds one batch; the last one goes out through the outputs.
        *earlier, last = sorted(context.partition_keys)
        for batch in earlier:
            writes = retry_batch_read(lambda: read(batch), name, batch, params)
            for table in tables:
                context.resources.lake.write(table_key(name, table, CHANGES), writes[table], context.log.info)
        writes = retry_batch_read(lambda: read(last), name, last, params)
        for table in tables:
            yield Output(writes[table], output_name=asset_part(table), metadata={"batches": len(earlier) + 1})

    return _changes


def latest_materialization(instance, key: AssetKey):
    """The record of an asset's newest materialization (None when it has none)."""
    from dagster import AssetRecordsFilter

    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=1).records
    return records[0] if records else None


def latest_metadata(instance, key: AssetKey) -> dict:
    """The metadata of an asset's newest materialization ({} when it has none)."""
    record = latest_materialization(instance, key)
    return dict(record.asset_materialization.metadata) if record else {}


def last_server_id(instance, name: str, tables: list[str]) -> int | None:
    """The server_id recorded by the newest change batch of the source, if any."""
    for t in tables:
        recorded = latest_metadata(instance, table_key(name, t, CHANGES)).get("server_id")
        if recorded is not None:
            return int(recorded.value)
    return None


def silver_asset(name: str, table: str, partitions: DynamicPartitionsDefinition, what: str) -> AssetsDefinition:
    @asset(
        key=table_key(name, table),
        group_name=name,
        kinds={"delta", "spark"},
        io_manager_key="lake",
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        ins={"snapshot": AssetIn(key=table_key(name, table, "snapshot")),
             "changes": AssetIn(key=table_key(name, table, CHANGES))},
        description=(
            f"Current state of {what}: the latest snapshot, then each change batch "
            "merged in order of `_pos` (any batch order converges). Deletes stay as tombstones "
            "(`_deleted`); read live rows with `ingest.lake.merge.live_rows`."
        ),
        metadata={"lake/layer": "silver", "source": name, "table": table},
    )
    def _silver(context: AssetExecutionContext, snapshot: LakeTable, changes: LakeTable) -> InOrder:
        return InOrder([SilverFromBatch(name, table, replace(changes, partition=batch), snapshot)
                        for batch in sorted(context.partition_keys)])

    return _silver


def reconciliation_check(name: str, source: MySQLSource, table: str, config: SourcesConfig) -> AssetChecksDefinition:
    settings = source.snapshot_settings(table)
    config_ref = f"{config.path}: sources.{name}.tables.include ({table})"

    @asset_check(
        asset=table_key(name, table),
        name="reconciliation",
        required_resource_keys={"lake"},
        description=(
            f"Compares the live rows of silver with `{source.database}.{table}` row by row (a hash per row, joined "
            "on the primary key, counts and checksums per side), leaving out keys the binlog shows changed after "
            "the position silver has merged up to. A mismatch names the primary-key ranges that differ. Reads the "
            "whole source table, so the sensor's batch runs leave it out: run it from the UI or the CLI."
        ),
    )
    def _reconciliation(context: AssetCheckExecutionContext) -> AssetCheckResult:
        from ingest.defs.io_managers import to_dagster_metadata
        from ingest.sources.mysql.reconcile import reconcile, reconciliation_metadata

        lake = context.resources.lake
        params = connection_params(source)
        with params.connect() as conn:
            schema = describe_table(conn, source.database, table, config_ref)
        result = reconcile(lake.spark.session, params, schema, lake.path_for(table_key(name, table)),
                           chunk_size=settings.chunk_size, parallelism=settings.parallelism)
        context.log.info(result.summary())
        return AssetCheckResult(passed=result.passed, severity=AssetCheckSeverity.ERROR,
                                description=result.summary(),
                                metadata=to_dagster_metadata(reconciliation_metadata(result)))

    return _reconciliation


def build_resources(config: SourcesConfig) -> dict:
    """Per DynamoDB source, its client resource (`dynamodb_<source>`)."""
    from ingest.defs.dynamodb import resource_key
    from ingest.defs.resources import dynamodb_resource

    return {resource_key(name): dynamodb_resource(source) for name, source in config.sources.items()
            if isinstance(source, DynamoDBSource)}


class SourceDefs(NamedTuple):
    """What one source adds to the code location."""

    assets: list[AssetsDefinition]
    sensor: SensorDefinition
    checks: list[AssetChecksDefinition]


def build_assets(config: SourcesConfig) -> list[AssetsDefinition]:
    return [a for defs in build_source_defs(config) for a in defs.assets]


def default_lake_root() -> str:
    """INGEST_LAKE_ROOT as Spark opens it (default: .local/lake), read when definitions load."""
    import os

    from ingest.lake.storage import spark_lake_root
    from ingest.paths import local_dir

    return spark_lake_root(os.environ.get("INGEST_LAKE_ROOT", str(local_dir() / "lake")))


def build_source_defs(config: SourcesConfig, lake_root: str | None = None) -> list[SourceDefs]:
    """Per source its assets, sensor and checks; `lake_root` is where the sensors read batch logs."""
    from ingest.defs.batches import batch_log_asset, contiguity_check
    from ingest.defs.checks import batch_checks, compare_binlog
    from ingest.defs.dynamodb import build_dynamodb_defs
    from ingest.defs.sensors import binlog_sensor

    lake_root = lake_root or default_lake_root()
    out = []
    for name, source in config.sources.items():
        if isinstance(source, DynamoDBSource):
            assets, sensor, log_checks = build_dynamodb_defs(name, source, lake_root)
            out.append(SourceDefs(assets, sensor,
                                  [*log_checks, *(c for t in source.tables for c in batch_checks(name, source, t))]))
            continue
        tables = resolve_tables(name, source, config)
        if SOURCE_BATCH_LOG in map(asset_part, tables):
            raise ConfigError(f"{config.path}: sources.{name}.tables: a table named {SOURCE_BATCH_LOG!r} would share "
                              "its asset key and lake folder with the source's batch log. Fix: exclude it")
        partitions = batches_partitions(name)
        assets: list[AssetsDefinition] = []
        for table in tables:
            assets += [snapshot_asset(name, source, table, config),
                       silver_asset(name, table, partitions, f"`{source.database}.{table}`")]
        assets.append(changes_asset(name, source, tables, config, partitions))
        log_key = AssetKey([name, SOURCE_BATCH_LOG])
        assets.append(batch_log_asset(log_key, name, None, tables, partitions, table_key, str, name))
        out.append(SourceDefs(assets, binlog_sensor(name, source, tables, partitions, lake_root),
                              [contiguity_check(log_key, BinlogPosition.from_metadata, compare_binlog, str),
                               *(c for t in tables
                                 for c in (reconciliation_check(name, source, t, config), *batch_checks(name, source, t)))]))
    return out

