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
