"""The change batch asset's graph: what recording a batch costs Dagster must not follow the number of tables."""

from dagster import AssetKey, Definitions

from ingest.config import parse_config
from ingest.defs.sources import build_source_defs
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.resources import SparkResource


def test_the_batch_log_names_no_table_as_its_upstream(tmp_path):
    # Dagster looks up each upstream asset's last materialization when it records an output; the batch
    # log named every table's silver and history, 100 lookups a batch on a source of 100 tables.
    tables = [f"t{i:02d}" for i in range(40)]
    config = parse_config({"sources": {"demo": {
        "host": "h", "user": "u", "password_env": "P", "database": "d",
        "tables": {"include": tables, "history": ["t00"]}}}}, "sources.yaml")
    (source,) = build_source_defs(config, str(tmp_path))
    spark = SparkResource(spark_config={})  # configured, not started: nothing here runs
    lake = DeltaLakeIOManager(lake_root=str(tmp_path), spark=spark)
    graph = Definitions(assets=source.assets, resources={"lake": lake}).resolve_asset_graph()

    assert graph.get(AssetKey(["demo", "_batch_log"])).parent_keys == set()
    # the tables' own lineage stays: silver and history from their bronze and snapshot
    built_from = {AssetKey(["demo", "t00", "changes"]), AssetKey(["demo", "t00", "snapshot"])}
    assert graph.get(AssetKey(["demo", "t00"])).parent_keys == built_from
    assert graph.get(AssetKey(["demo", "t00", "history"])).parent_keys == built_from


def test_a_table_no_batch_changed_is_explained_where_its_partitions_show_empty(tmp_path):
    """A batch commits only the tables it changed, so the others' partitions show as not materialized:
    each such asset's description says why, and where the table's position is."""
    config = parse_config({"sources": {"demo": {
        "host": "h", "user": "u", "password_env": "P", "database": "d",
        "tables": {"include": ["a"], "history": ["a"]}}}}, "sources.yaml")
    (source,) = build_source_defs(config, str(tmp_path))
    specs = {s.key: s for a in source.assets for s in a.specs}
    for key in (["demo", "a"], ["demo", "a", "changes"], ["demo", "a", "history"]):
        description = specs[AssetKey(key)].description
        assert "not a gap" in description and "ingest status" in description, key


def test_a_sources_freshness_policy_is_on_its_silver_tables_and_batch_log_for_every_kind(tmp_path):
    import datetime as dt

    from ingest.config import ConfigError

    policy = {"fail_after_seconds": 900, "warn_after_seconds": 300}
    config = parse_config({"sources": {
        "my": {"host": "h", "user": "u", "password_env": "P", "database": "d", "cdc": {"freshness_policy": policy},
               "tables": {"include": ["a"], "history": ["a"]}},
        "pg": {"kind": "postgres", "host": "h", "user": "u", "password_env": "P", "database": "d",
               "publication": "pub", "tables": {"include": ["b"]}, "cdc": {"freshness_policy": policy}},
        "dy": {"kind": "dynamodb", "tables": ["ccc"], "cdc": {"freshness_policy": policy}},
        "quiet": {"host": "h", "user": "u", "password_env": "P", "database": "d", "tables": {"include": ["q"]}},
    }}, "sources.yaml")
    assets = [a for source in build_source_defs(config, str(tmp_path)) for a in source.assets]
    specs = {spec.key: spec for a in assets for spec in a.specs}
    with_policy = {key.to_user_string() for key, spec in specs.items() if spec.freshness_policy is not None}
    assert with_policy == {"my/a", "my/_batch_log", "pg/b", "pg/_batch_log", "dy/ccc", "dy/ccc/batch_log"}
    chosen = specs[AssetKey(["my", "a"])].freshness_policy
    assert (chosen.fail_window.to_timedelta(), chosen.warn_window.to_timedelta()) == (
        dt.timedelta(seconds=900), dt.timedelta(seconds=300))
    bad = {"sources": {"s": {"host": "h", "user": "u", "password_env": "P", "database": "d", "tables": {
        "include": ["a"]}, "cdc": {"freshness_policy": {"fail_after_seconds": 300, "warn_after_seconds": 600}}}}}
    try:
        parse_config(bad)
    except ConfigError as exc:
        assert "cdc.freshness_policy: Value error, warn_after_seconds (600) must be less than fail_after_seconds" \
            in str(exc)
    else:
        raise AssertionError("a warning window longer than the failing one was accepted")
