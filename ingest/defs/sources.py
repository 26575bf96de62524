"""Each source of the sources file as its definitions, by kind: mysql.py, postgres.py, dynamodb.py."""

from __future__ import annotations

from dagster import AssetsDefinition

from ingest.config import DynamoDBSource, MySQLSource, PostgresSource, SourcesConfig
from ingest.defs.assets import SourceDefs, default_lake_root


def build_source_defs(config: SourcesConfig, lake_root: str | None = None) -> list[SourceDefs]:
    """Per source its assets, sensor and checks; `lake_root` is where the sensors read batch logs."""
    from ingest.defs.checks import batch_checks
    from ingest.defs.dynamodb import build_dynamodb_defs
    from ingest.defs.mysql import build_mysql_defs
    from ingest.defs.postgres import build_postgres_defs

    lake_root = lake_root or default_lake_root()
    out = []
    for name, source in config.sources.items():
        if isinstance(source, PostgresSource):
            assets, sensor, log_checks = build_postgres_defs(name, source, lake_root)
            out.append(SourceDefs(assets, sensor, log_checks))
        elif isinstance(source, DynamoDBSource):
            assets, sensor, log_checks = build_dynamodb_defs(name, source, lake_root)
            out.append(SourceDefs(assets, sensor, [*log_checks, *batch_checks(name, source, list(source.tables))]))
        elif isinstance(source, MySQLSource):
            out.append(build_mysql_defs(name, source, config, lake_root))
        if source.cdc.freshness_policy is not None:
            out[-1] = out[-1]._replace(assets=with_freshness_policy(out[-1].assets, source.cdc.freshness_policy.policy()))
    return out


FRESHNESS_LAYERS = ("silver", "batch_log")


def with_freshness_policy(assets, policy):
    """The source's silver and batch log assets with Dagster's `policy` (every kind's, in one place)."""
    from dagster import map_asset_specs

    return map_asset_specs(lambda spec: spec.replace_attributes(freshness_policy=policy)
                           if spec.metadata.get("lake/layer") in FRESHNESS_LAYERS else spec, assets)


def build_assets(config: SourcesConfig) -> list[AssetsDefinition]:
    return [a for defs in build_source_defs(config) for a in defs.assets]


def build_resources(config: SourcesConfig) -> dict:
    """Per DynamoDB source, its client resource (`dynamodb_<source>`)."""
    from ingest.defs.dynamodb import resource_key
    from ingest.defs.resources import dynamodb_resource

    return {resource_key(name): dynamodb_resource(source) for name, source in config.sources.items()
            if isinstance(source, DynamoDBSource)}
