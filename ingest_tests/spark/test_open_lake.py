"""Silver as any Delta reader sees it: the demo's downstream Polars asset over a silver table the
ordered merge wrote."""

import pytest
from dagster import materialize

from ingest.lake.commits import Txn
from ingest.lake.merge import ordered_merge
from ingest.lake.tables import SILVER, table_location
from ingest.localdev.downstream import orders_by_status_asset
from ingest_tests.open_readers import assert_any_reader_opens


def test_the_downstream_polars_asset_reads_live_silver_rows(spark, tmp_path, monkeypatch):
    path = table_location(str(tmp_path), "demo", "orders", SILVER)
    rows = spark.createDataFrame(
        [(1, "paid", "10.50", 5, False), (2, "paid", "4.50", 6, False), (3, "new", "1.00", 7, False),
         (4, "paid", "99.00", 8, False)],
        "id bigint, status string, total string, _pos int, _deleted boolean",
    ).selectExpr("id", "status", "CAST(total AS DECIMAL(14,2)) AS total", "CAST(_pos AS DECIMAL(38,0)) AS _pos",
                 "_deleted")
    ordered_merge(spark, path, rows, ["id"], {"kind": "silver"}, Txn("t:1", 0))
    delete = spark.createDataFrame([(4,)], "id bigint").selectExpr(
        "id", "CAST(NULL AS STRING) AS status", "CAST(NULL AS DECIMAL(14,2)) AS total",
        "CAST(9 AS DECIMAL(38,0)) AS _pos", "true AS _deleted")
    ordered_merge(spark, path, delete, ["id"], {"kind": "silver"}, Txn("t:2", 0))
    assert assert_any_reader_opens(spark, path, ["id"]) == 4  # the tombstone is a row too

    monkeypatch.setenv("INGEST_LAKE_ROOT", str(tmp_path))
    result = materialize([orders_by_status_asset])
    meta = result.asset_materializations_for_node(orders_by_status_asset.op.name)[0].metadata
    assert meta["orders"].value == 3 and meta["statuses"].value == 2  # the deleted order is left out
    assert "| paid | 2 | 15.00 |" in meta["by_status"].value


def test_an_unimportable_python_assets_module_names_it_and_the_fix(tmp_path):
    from ingest.config import ConfigError
    from ingest.defs.definitions import build_definitions

    sources = tmp_path / "sources.yaml"
    sources.write_text("sources: {}\npython_assets: [no_such_module.assets]\n")
    with pytest.raises(ConfigError, match=r"cannot import 'no_such_module.assets'.*Fix: install the module"):
        build_definitions(sources, lake_root=str(tmp_path / "lake"), spark_remote="sc://127.0.0.1:1")
