"""The Dagster code location: `dagster dev -w workspace.yaml` loads `defs` from here.

Environment (read when definitions load, not at import of any other module):
  INGEST_SOURCES     the sources file (default: sources.yaml in the project root)
  INGEST_LAKE_ROOT   the lake root (default: .local/lake)
  INGEST_SPARK_MASTER  Spark master URL (default: local[*])
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions, in_process_executor

from ingest.config import load_config
from ingest.defs.factory import build_resources, build_source_defs
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.resources import SparkResource
from ingest.paths import PROJECT_ROOT, local_dir


def build_definitions(sources_path: str | Path | None = None, lake_root: str | None = None,
                      spark_master: str | None = None) -> Definitions:
    config = load_config(sources_path or os.environ.get("INGEST_SOURCES", PROJECT_ROOT / "sources.yaml"))
    spark = SparkResource(master=spark_master or os.environ.get("INGEST_SPARK_MASTER", "local[*]"))
    lake = lake_root or os.environ.get("INGEST_LAKE_ROOT", str(local_dir() / "lake"))
    per_source = build_source_defs(config)
    assets = [a for defs in per_source for a in defs.assets]
    resources = {"spark": spark, "lake": DeltaLakeIOManager(lake_root=lake, spark=spark), **build_resources(config)}
    if config.dbt is not None:
        from ingest.defs.dbt import build_dbt_assets

        dbt_models, resources["dbt"] = build_dbt_assets(config, lake, spark.master,
                                                        [k for a in assets for k in a.keys])
        assets.append(dbt_models)
    return Definitions(
        assets=assets,
        asset_checks=[c for defs in per_source for c in defs.checks],
        sensors=[defs.sensor for defs in per_source],
        resources=resources,
        # One process per run: its steps share one SparkSession instead of
        # starting a JVM per step.
        executor=in_process_executor,
    )


defs = build_definitions()
