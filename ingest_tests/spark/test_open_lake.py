"""Silver as any Delta reader sees it: the demo's downstream Polars asset over a silver table the
ordered merge wrote, and the documented reader snippets in fresh processes."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import materialize

from ingest.lake.commits import Txn
from ingest.lake.merge import ordered_merge
from ingest.lake.tables import SILVER, table_location
from ingest.localdev.downstream import orders_by_status_asset
from ingest_tests.open_readers import assert_any_reader_opens


def _orders_silver(spark, root: str) -> str:
    """The demo's orders silver under `root`: four orders, a merge each (a file each), then a delete of
    one."""
    path = table_location(root, "demo", "orders", SILVER)
    rows = spark.createDataFrame(
        [(1, "paid", "10.50", 5, False), (2, "paid", "4.50", 6, False), (3, "new", "1.00", 7, False),
         (4, "paid", "99.00", 8, False)],
        "id bigint, status string, total string, _pos int, _deleted boolean",
    ).selectExpr("id", "status", "CAST(total AS DECIMAL(14,2)) AS total", "CAST(_pos AS DECIMAL(38,0)) AS _pos",
                 "_deleted")
    for order in range(1, 5):
        ordered_merge(spark, path, rows.where(f"id = {order}"), ["id"], {"kind": "silver"}, Txn(f"t:{order}", 0))
    delete = spark.createDataFrame([(4,)], "id bigint").selectExpr(
        "id", "CAST(NULL AS STRING) AS status", "CAST(NULL AS DECIMAL(14,2)) AS total",
        "CAST(9 AS DECIMAL(38,0)) AS _pos", "true AS _deleted")
    ordered_merge(spark, path, delete, ["id"], {"kind": "silver"}, Txn("t:5", 0))
    return path


def test_the_downstream_polars_asset_reads_live_silver_rows(spark, tmp_path, monkeypatch):
    path = _orders_silver(spark, str(tmp_path))
    assert assert_any_reader_opens(spark, path, ["id"]) == 4  # the tombstone is a row too

    monkeypatch.setenv("INGEST_LAKE_ROOT", str(tmp_path))
    result = materialize([orders_by_status_asset])
    meta = result.asset_materializations_for_node(orders_by_status_asset.op.name)[0].metadata
    assert meta["orders"].value == 3 and meta["statuses"].value == 2  # the deleted order is left out
    assert "| paid | 2 | 15.00 |" in meta["by_status"].value


def test_the_documented_reader_snippets_read_silver_and_exit_cleanly(spark, tmp_path):
    """Each Python snippet without Spark of the README's "Reading the lake" and of docs/design.md's
    "Reading the lake without Spark", run as a user's script would be (a fresh interpreter, from the
    project folder), reads the demo's orders and exits 0. The abort at exit it avoids comes in most runs
    (docs/operations.md), so each runs four times."""
    root = Path(__file__).resolve().parents[2]
    snippets = []
    for doc, heading in (("README.md", "## Reading the lake"), ("docs/design.md", "## Reading the lake without Spark")):
        section = (root / doc).read_text().split(heading + "\n", 1)[1].split("\n## ", 1)[0]
        snippets += [s for s in re.findall(r"```python\n(.*?)```", section, re.DOTALL) if "spark." not in s]
    assert [name for name in ("polars", "deltalake") if any(f"import {name}" in s for s in snippets)] == \
        ["polars", "deltalake"], snippets
    assert len(snippets) == 3, snippets  # the README's, and design.md's two
    _orders_silver(spark, str(tmp_path / ".local" / "lake"))
    for snippet in snippets:
        script = snippet + "\nprint('rows', len(orders))\n"
        for _ in range(4):
            done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, (snippet, done.returncode, done.stderr[-2000:])
            assert done.stdout.split()[-2:] == ["rows", "3" if "_deleted" in snippet else "4"], done.stdout


def test_an_unimportable_python_assets_module_names_it_and_the_fix(tmp_path):
    from ingest.config import ConfigError
    from ingest.defs.definitions import build_definitions

    sources = tmp_path / "sources.yaml"
    sources.write_text("sources: {}\npython_assets: [no_such_module.assets]\n")
    with pytest.raises(ConfigError, match=r"cannot import 'no_such_module.assets'.*Fix: install the module"):
        build_definitions(sources, lake_root=str(tmp_path / "lake"), spark_remote="sc://127.0.0.1:1")
