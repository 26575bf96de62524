"""Building a SparkSession with Delta from the jars bin/setup fetched.

Spark never downloads anything at run time here: `spark.jars` points at the
files in jvm/jars, so the same session starts on a machine with no network.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ingest.paths import jars_dir

# Why each default: UTC so TIMESTAMP values mean the same instant on every
# machine (DESIGN principle 5); few shuffle partitions because change batches
# are small and 200 empty tasks cost seconds; Arrow for Python <-> JVM transfer.
BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.optimizeMetadataOnlyQueries.enabled": "true",
    # Column mapping by name: source columns may hold spaces or other characters
    # Parquet names cannot, and RENAME / DROP COLUMN in the source map onto it.
    "spark.databricks.delta.properties.defaults.columnMapping.mode": "name",
    # ADD COLUMN in the source reaches bronze (mergeSchema) and silver (MERGE)
    # as a new Delta column.
    "spark.databricks.delta.schema.autoMerge.enabled": "true",
    # MODIFY COLUMN to a wider type (INT -> BIGINT, FLOAT -> DOUBLE, ...) widens
    # the Delta column in place instead of failing the append.
    "spark.databricks.delta.properties.defaults.enableTypeWidening": "true",
}


class MissingJarsError(RuntimeError):
    pass


def delta_jars(folder: Path | None = None) -> list[str]:
    folder = folder or jars_dir()
    jars = sorted(str(p) for p in Path(folder).glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise MissingJarsError(
            f"no Delta jar in {folder}: run bin/setup (it fetches the jars with Maven), "
            "or set INGEST_JARS_DIR to a folder holding delta-spark and delta-storage"
        )
    return jars


def build_spark_session(
    master: str = "local[*]",
    app_name: str = "ingest",
    conf: Mapping[str, str] | None = None,
):
    """Return the active SparkSession, or build one with Delta enabled."""
    from pyspark.sql import SparkSession

    # The JVM starts the planner's Python (data source analysis) from
    # PYSPARK_PYTHON, not from the conf; it must be this interpreter too.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    # Python workers must run this interpreter: the data sources import the
    # project and its drivers from the venv.
    merged = {**BASE_CONF, "spark.jars": ",".join(delta_jars()), "spark.pyspark.python": sys.executable,
              **(conf or {})}
    for key, value in merged.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    # getOrCreate hands back a session already running in this process (a notebook, the tests) with
    # its Hadoop settings fixed at start: S3A's settings must reach that one too.
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in (conf or {}).items():
        if key.startswith("spark.hadoop."):
            hadoop.set(key[len("spark.hadoop."):], value)
    return session
