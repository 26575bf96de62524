"""Choosing a backfill's partitions, and the dbt project's link to the sources file."""

import json
from pathlib import Path

import pytest

from ingest.cli import UsageError, select_partitions
from ingest.config import ConfigError, parse_config
from ingest.defs.dbt import check_sources, manifest_is_stale, silver_sources

KEYS = ["k1", "k2", "k3", "k4"]


def test_a_list_a_range_an_open_range_and_all():
    assert select_partitions(KEYS, ["k3", "k1"], None, None, False, "s") == ["k3", "k1"]
    assert select_partitions(KEYS, None, "k2", "k3", False, "s") == ["k2", "k3"]
    assert select_partitions(KEYS, None, "k3", None, False, "s") == ["k3", "k4"]
    assert select_partitions(KEYS, None, None, None, True, "s") == KEYS


def test_unknown_or_reversed_partitions_are_usage_errors_naming_them():
    with pytest.raises(UsageError, match="no partition 'k9'.*k4"):
        select_partitions(KEYS, ["k1", "k9"], None, None, False, "source s")
    with pytest.raises(UsageError, match="comes before"):
        select_partitions(KEYS, None, "k3", "k1", False, "s")
    with pytest.raises(UsageError, match="name the partitions"):
        select_partitions(KEYS, None, None, None, False, "s")
    with pytest.raises(UsageError, match="no partitions yet"):
        select_partitions([], None, None, None, True, "s")


MANIFEST = {"sources": {"source.p.demo.customers": {
    "source_name": "demo", "name": "customers", "meta": {"dagster": {"asset_key": ["demo", "customers"]}}}}}


def test_a_dbt_source_the_sources_file_does_not_land_is_a_config_error():
    from dagster import AssetKey

    config = parse_config({"sources": {"demo": {"host": "h", "user": "u", "password_env": "P", "database": "d",
                                                "tables": {"include": ["orders"]}}}}, "sources.yaml")
    assert silver_sources(MANIFEST) == {AssetKey(["demo", "customers"]): "demo.customers"}
    check_sources(MANIFEST, [AssetKey(["demo", "customers"])], config, Path("dbt_project"))
    with pytest.raises(ConfigError, match="demo.customers reads the asset demo/customers.*sources.yaml"):
        check_sources(MANIFEST, [AssetKey(["demo", "orders"])], config, Path("dbt_project"))


def test_the_manifest_is_stale_when_a_model_is_newer(tmp_path):
    import os

    (tmp_path / "models").mkdir()
    model = tmp_path / "models" / "m.sql"
    model.write_text("select 1")
    manifest = tmp_path / "target" / "manifest.json"
    assert manifest_is_stale(tmp_path, manifest)
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({}))
    os.utime(model, (1, 1))
    assert not manifest_is_stale(tmp_path, manifest)
    os.utime(model, None)
    os.utime(manifest, (1, 1))
    assert manifest_is_stale(tmp_path, manifest)


def test_a_backfill_of_every_table_records_its_batches_and_one_of_a_few_tables_does_not():
    from ingest.cli import backfill_targets

    config = parse_config({"sources": {
        "shop": {"host": "h", "user": "u", "password_env": "P", "database": "d",
                 "tables": {"include": ["a", "b"]}},
        "ev": {"kind": "dynamodb", "region": "eu-west-1", "tables": ["orders", "users"]}}})
    keys, partitioned = backfill_targets(config, "shop", None)
    assert ["shop", "_batch_log"] in keys and partitioned == ["shop", "a", "changes"]
    # silver of one table only: the batch is not complete, so it is not logged
    keys, _ = backfill_targets(config, "shop", ["a"])
    assert ["shop", "_batch_log"] not in keys and ["shop", "b", "changes"] in keys and ["shop", "b"] not in keys
    keys, partitioned = backfill_targets(config, "ev", ["users"])
    assert keys == [["ev", "users", "changes"], ["ev", "users"], ["ev", "users", "batch_log"]]
    assert partitioned == ["ev", "users", "changes"]
