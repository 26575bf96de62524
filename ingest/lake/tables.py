"""Where each asset's Delta table lives, and a handle for reading one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ingest.lake.commits import CommitInfo
from ingest.lake.deltalog import is_delta_table, last_commit, table_version

SNAPSHOT = "snapshot"
SILVER = "silver"
BRONZE = "bronze"
HISTORY = "history"
"""SCD2 history of a table, where the sources file asks for it (see lake/history.py)."""
BATCH_LOG = "batch_log"
"""A table's own batch log (DynamoDB: one stream, one run of batches per table); see lake/batchlog.py."""
SOURCE_BATCH_LOG = "_batch_log"
"""The key part and folder of a source-wide batch log (MySQL: one binlog for every table)."""


def spark_ident(name: str) -> str:
    """Backtick-quote a column name for Spark SQL; a backtick inside is doubled."""
    return "`" + name.replace("`", "``") + "`"


def asset_part(table: str) -> str:
    """A source table's name as an asset key part and lake folder: Dagster names allow only
    [A-Za-z0-9_], so other characters become `_` and a short hash of the real name keeps
    `order-lines` and `order_lines` apart."""
    import hashlib
    import re

    clean = re.sub(r"[^A-Za-z0-9_]", "_", table)
    return clean if clean == table else f"{clean}_{hashlib.sha1(table.encode()).hexdigest()[:6]}"


def table_location(lake_root: str, source: str, table: str, layer: str) -> str:
    """`<lake_root>/<source>/<table>/<layer>`: layers side by side, never one table's
    folder inside another's (VACUUM of the outer one would delete the inner one)."""
    if layer not in (SNAPSHOT, SILVER, BRONZE, HISTORY, BATCH_LOG):
        raise ValueError(f"unknown lake layer {layer!r}")
    return f"{lake_root.rstrip('/')}/{source}/{table}/{layer}"


def source_batch_log_location(lake_root: str, source: str) -> str:
    """`<lake_root>/<source>/_batch_log`: beside the tables' folders (a source table named `_batch_log`
    is refused when definitions load)."""
    return f"{lake_root.rstrip('/')}/{source}/{SOURCE_BATCH_LOG}"


def sibling_location(path: str, layer: str) -> str:
    """Another layer of the same source table (see table_location)."""
    if layer not in (SNAPSHOT, SILVER, BRONZE):
        raise ValueError(f"unknown lake layer {layer!r}")
    return f"{path.rstrip('/').rsplit('/', 1)[0]}/{layer}"


CHANGES = "changes"
"""Asset key suffix of a table's change batches; their Delta table is the bronze layer."""


def location_for_asset_key(lake_root: str, key_path: Sequence[str]) -> str:
    """`source/table` is silver, `source/table/changes` bronze, `source/table/snapshot` the snapshot,
    `source/table/history` its SCD2 history, `source/_batch_log` a source's batch log and
    `source/table/batch_log` a table's."""
    if len(key_path) == 2 and key_path[1] == SOURCE_BATCH_LOG:
        return source_batch_log_location(lake_root, key_path[0])
    if len(key_path) == 2:
        return table_location(lake_root, key_path[0], key_path[1], SILVER)
    if len(key_path) == 3:
        layer = BRONZE if key_path[2] == CHANGES else key_path[2]
        return table_location(lake_root, key_path[0], key_path[1], layer)
    raise ValueError(f"asset key {'/'.join(key_path)!r} does not name a lake table")


@dataclass(frozen=True)
class LakeTable:
    """A Delta table of the lake, as an asset's input."""

    spark: Any
    path: str
    partition: str | None = None
    """The partition (change batch key) the reading asset runs for, if any."""

    def df(self):
        return self.spark.read.format("delta").load(self.path)

    def exists(self) -> bool:
        return is_delta_table(self.path)

    def last_commit(self, **match: Any) -> CommitInfo | None:
        return last_commit(self.path, **match)

    def version(self) -> int | None:
        return table_version(self.path)


class LakeWrite(Protocol):
    """What an asset returns: a write the IO manager applies to the asset's table.

    `apply` must be safe to repeat and returns the metadata of what it did (the IO manager adds the
    figures every materialization carries: defs/io_managers.py `write_figures`).
    """

    def apply(self, spark: Any, path: str, log: Callable[[str], None]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Unchanged:
    """No write: the batch did not change this table. Only a backfill reports it (Dagster marks a
    requested partition that was not materialized as failed); a sensor's batch leaves the table out."""

    batch: str

    def apply(self, spark: Any, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        return {"batch": self.batch, "rows": 0, "committed": False, "unchanged": True}


@dataclass(frozen=True)
class InOrder:
    """Several writes to one table applied one after another: the batches of a partition range
    run as one Dagster run (`--partition-range`, or a backfill under a single-run policy).

    Reports the last write's metadata (its end position is the range's), with `batches` and
    the rows summed over the range."""

    writes: Sequence[LakeWrite]
    small_batches: bool = False
    """Each write is a change batch its run decoded itself: the IO manager commits them with small-batch
    settings (lake/write.py SMALL_BATCH_CONF), as a MySQL or PostgreSQL batch its run reads commits."""

    def apply(self, spark: Any, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        rows = 0
        for write in self.writes:
            meta = write.apply(spark, path, log)
            rows += meta.get("rows") or 0
        return {**meta, "batches": len(self.writes), **({"rows": rows} if "rows" in meta else {})}
