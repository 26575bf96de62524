"""What a silver table's newest commit says of its MERGE, from Delta's history (as Spark writes it)."""

from __future__ import annotations

import re
from typing import NamedTuple


class LastCommit(NamedTuple):
    operation: str
    predicate: str
    """The merge's condition as Spark prints it, e.g. `((id#7 <=> id#3) AND id#7 INSET 1, 2)`."""
    metrics: dict
    deletion_vectors: bool
    """The table has `delta.enableDeletionVectors` on."""


def last_commit(spark, path: str) -> LastCommit:
    row = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    enabled = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}` ('delta.enableDeletionVectors')").first()["value"]
    return LastCommit(row["operation"], (row["operationParameters"] or {}).get("predicate", ""),
                      row["operationMetrics"] or {}, enabled == "true")


def names_keys(predicate: str, column: str) -> bool:
    """The condition names `column`'s values (`t.col IN (...)`, which Spark prints as IN, INSET, or `=` for one)."""
    return re.search(rf"\b{re.escape(column)}(#\d+L?)? (IN(SET)? |= )", predicate) is not None
