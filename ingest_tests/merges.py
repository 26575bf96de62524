"""What a silver table's newest commit says of its MERGE, from Delta's history (as Spark writes it), and its files."""

from __future__ import annotations

import re
from typing import NamedTuple


class LastCommit(NamedTuple):
    operation: str
    predicate: str
    """The merge's condition as Spark prints it, e.g. `((id#7 = id#3) AND id#7 INSET 1, 2)`."""
    metrics: dict
    deletion_vectors: bool
    """The table has `delta.enableDeletionVectors` on."""


def last_commit(spark, path: str) -> LastCommit:
    row = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    enabled = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}` ('delta.enableDeletionVectors')").first()["value"]
    return LastCommit(row["operation"], (row["operationParameters"] or {}).get("predicate", ""),
                      row["operationMetrics"] or {}, enabled == "true")


def file_layout(spark, path: str) -> list[dict]:
    """Each data file of the Delta table at `path`: its smallest and largest `id` (`lo`, `hi`), its rows and
    its size in bytes, in key order."""
    from pyspark.sql import functions as F

    files = (spark.read.format("delta").load(path).groupBy("_metadata.file_path", "_metadata.file_size")
             .agg(F.min("id").alias("lo"), F.max("id").alias("hi"), F.count(F.lit(1)).alias("rows")).collect())
    return sorted(({"lo": r["lo"], "hi": r["hi"], "rows": r["rows"], "size": r["file_size"]} for r in files),
                  key=lambda f: f["lo"])


def names_keys(predicate: str, column: str) -> bool:
    """The condition names `column`'s values (`t.col IN (...)`, which Spark prints as IN, INSET, or `=` for one),
    not the key's join with the batch's column (`id#7 = id#3`)."""
    return re.search(rf"\b{re.escape(column)}(#\d+L?)? (IN(SET)? |= (?!\w+#\d))", predicate) is not None
