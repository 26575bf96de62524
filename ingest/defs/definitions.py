"""The Dagster code location: `dagster dev -w workspace.yaml` loads `defs` from here.

Environment (read when definitions load, not at import of any other module):
  INGEST_SOURCES     the sources file (default: sources.yaml in the project root)
  INGEST_LAKE_ROOT   the lake root (default: .local/lake); s3://bucket/prefix for S3, with
                     INGEST_S3_ENDPOINT_URL (optional), AWS_REGION and the AWS credential variables,
                     and INGEST_LOCK_TABLE / INGEST_LOCK_ENDPOINT_URL for the write locks
  INGEST_SPARK_REMOTE  a running Spark Connect server, sc://host:port (else `spark.remote` in the
                     sources file, else the embedded local server)
  INGEST_SPARK_MASTER  the embedded server's master (default: local[*])
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions, in_process_executor, load_assets_from_modules

from ingest.config import ConfigError, load_config
from ingest.defs.assets import RECONCILIATION
from ingest.defs.sources import build_resources, build_source_defs
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.maintenance import maintenance_defs, reconcile_defs
from ingest.defs.resources import SparkResource, lake_lock_resource, lake_s3_resource
from ingest.lake.connect import remote_url
from ingest.lake.storage import is_s3, spark_lake_root
from ingest.lake.tables import location_for_asset_key
from ingest.paths import PROJECT_ROOT, local_dir


def build_definitions(sources_path: str | Path | None = None, lake_root: str | None = None,
                      spark_remote: str | None = None) -> Definitions:
    config = load_config(sources_path or os.environ.get("INGEST_SOURCES", PROJECT_ROOT / "sources.yaml"))
    lake = spark_lake_root(lake_root or os.environ.get("INGEST_LAKE_ROOT", str(local_dir() / "lake")))
    remote = remote_url(spark_remote or (config.spark.remote if config.spark else None))
    spark_config = {"spark.remote": remote} if remote else {}
    if is_s3(lake):  # S3A for Spark, and a write lock per table (see ingest/lake/locks.py)
        spark = SparkResource(spark_config=spark_config, s3=lake_s3_resource())
        io_manager = DeltaLakeIOManager(lake_root=lake, spark=spark, locks=lake_lock_resource(),
                                        lock_table=os.environ.get("INGEST_LOCK_TABLE", "ingest_lake_locks"))
    else:
        spark = SparkResource(spark_config=spark_config)
        io_manager = DeltaLakeIOManager(lake_root=lake, spark=spark)
    per_source = build_source_defs(config, lake)
    assets = [a for defs in per_source for a in defs.assets]
    resources = {"spark": spark, "lake": io_manager, **build_resources(config)}
    if config.dbt is not None:
        from ingest.defs.dbt import build_dbt_assets

        dbt_models, resources["dbt"] = build_dbt_assets(config, lake, [k for a in assets for k in a.keys])
        assets.append(dbt_models)
    for module in config.python_assets:  # the user's own downstream code
        assets += list(load_assets_from_modules([_python_assets(module, config.path)]))
    lake_tables = sorted({(key.path[0], location_for_asset_key(lake, key.path)) for defs in per_source
                          for a in defs.assets for key in a.keys})
    maintenance_job, schedules = maintenance_defs(config.maintenance, lake_tables)
    checks = [c for defs in per_source for c in defs.checks]
    reconcile_jobs, reconcile_schedules = reconcile_defs(
        config.reconcile, [k for c in checks for k in c.check_keys if k.name == RECONCILIATION])
    return Definitions(
        assets=assets,
        jobs=[maintenance_job, *reconcile_jobs],
        schedules=[*schedules, *reconcile_schedules],
        asset_checks=checks,
        sensors=[defs.sensor for defs in per_source],
        resources=resources,
        # One process per run: its steps share one SparkSession instead of
        # starting a JVM per step.
        executor=in_process_executor,
    )


def _python_assets(module: str, path: Path | None):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{path}: python_assets: cannot import {module!r} ({exc}). Fix: install the module "
                          "where Dagster runs, or correct its dotted name") from exc


defs = build_definitions()
