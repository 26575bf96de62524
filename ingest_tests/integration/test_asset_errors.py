"""A bad table in the sources file fails its asset with the file, the key and the fix, and writes nothing."""

import yaml
from dagster import materialize

from ingest.config import load_config
from ingest.defs.sources import build_assets
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.resources import SparkResource


def test_unknown_table_and_missing_primary_key_fail_clearly(mariadb, root, database, tmp_path, monkeypatch):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE nopk (a INT)")
    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump({"sources": {"s": {
        "host": "127.0.0.1", "port": mariadb.port, "user": "ingest", "password_env": "ASSET_ERR_PW",
        "database": database, "tables": {"include": ["missing_table", "nopk"]}}}}))
    monkeypatch.setenv("ASSET_ERR_PW", "ingest-test-pw")
    assets = {k.to_user_string(): a for a in build_assets(load_config(path)) for k in a.keys}
    spark = SparkResource()  # lazy: the failing assets never start it
    resources = {"spark": spark, "lake": DeltaLakeIOManager(lake_root=str(tmp_path / "lake"), spark=spark)}
    for key, expected in [("s/missing_table/snapshot", "does not exist"), ("s/nopk/snapshot", "has no primary key")]:
        result = materialize([assets[key]], resources=resources, raise_on_error=False)
        assert not result.success
        message = result.get_step_failure_events()[0].step_failure_data.error.cause.message
        assert str(path) in message and "sources.s.tables.include" in message and expected in message
        assert "Fix:" in message
    assert not (tmp_path / "lake").exists()


def test_missing_password_variable_is_named(mariadb, database, tmp_path, monkeypatch):
    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump({"sources": {"s": {
        "host": "127.0.0.1", "port": mariadb.port, "user": "ingest", "password_env": "NOT_SET_ANYWHERE",
        "database": database, "tables": {"include": ["t"]}}}}))
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    (asset,) = [a for a in build_assets(load_config(path)) for k in a.keys if k.path[-1] == "snapshot"]
    spark = SparkResource()
    result = materialize([asset], resources={"spark": spark, "lake": DeltaLakeIOManager(
        lake_root=str(tmp_path / "lake"), spark=spark)}, raise_on_error=False)
    message = result.get_step_failure_events()[0].step_failure_data.error.cause.message
    assert "NOT_SET_ANYWHERE is not set" in message and "export NOT_SET_ANYWHERE" in message
