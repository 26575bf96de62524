"""Assets generated from the sources file: per table a snapshot and a silver asset."""
# No `from __future__ import annotations` here: Dagster inspects the context annotation at definition time.


from dagster import AssetExecutionContext, AssetIn, AssetKey, AssetsDefinition, asset

from ingest.config import ConfigError, MySQLSource, SourcesConfig
from ingest.lake.silver import SilverFromSnapshot
from ingest.lake.tables import LakeTable
from ingest.sources.mysql.schema import connection_params, describe_table, list_tables
from ingest.sources.mysql.snapshot import SnapshotWrite

KINDS_MYSQL = {"mysql", "delta", "spark"}


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
        key=AssetKey([name, table, "snapshot"]),
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


def silver_asset(name: str, source: MySQLSource, table: str) -> AssetsDefinition:
    @asset(
        key=AssetKey([name, table]),
        group_name=name,
        kinds={"delta", "spark"},
        io_manager_key="lake",
        ins={"snapshot": AssetIn(key=AssetKey([name, table, "snapshot"]))},
        description=(
            f"Current state of `{source.database}.{table}`: the ordered merge of the snapshot (and, "
            "with CDC, the change batches). Deletes are kept as tombstones (`_deleted`); read live "
            "rows with `ingest.lake.merge.live_rows`."
        ),
        metadata={"lake/layer": "silver", "source": name, "table": table},
    )
    def _silver(context: AssetExecutionContext, snapshot: LakeTable) -> SilverFromSnapshot:
        return SilverFromSnapshot(name, table, snapshot)

    return _silver


def build_assets(config: SourcesConfig) -> list[AssetsDefinition]:
    assets: list[AssetsDefinition] = []
    for name, source in config.sources.items():
        for table in resolve_tables(name, source, config):
            assets += [snapshot_asset(name, source, table, config), silver_asset(name, source, table)]
    return assets
