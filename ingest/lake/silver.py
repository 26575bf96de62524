"""Silver tables: the current state of each source table, built by the ordered merge."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.lake.commits import Txn
from ingest.lake.merge import DELETED, live_rows, ordered_merge
from ingest.lake.tables import LakeTable


class SnapshotNotFinished(RuntimeError):
    pass


@dataclass(frozen=True)
class SilverFromSnapshot:
    """Merge a finished snapshot into silver, each row with its chunk's `_pos`.

    Rows the snapshot lacks, last changed before the snapshot's change-log start,
    become tombstones; everything newer is left to the change batches.
    """

    source: str
    table: str
    snapshot: LakeTable
    keys: Sequence[str] | None = None

    def apply(self, spark: Any, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from ingest.sources.mysql.positions import BinlogPosition

        last = self.snapshot.last_commit(kind="snapshot")
        if last is None or not last.metadata.get("complete"):
            raise SnapshotNotFinished(
                f"{self.source}/{self.table}: the snapshot at {self.snapshot.path} is "
                f"{'missing' if last is None else 'unfinished'}. Fix: materialize "
                f"{self.source}/{self.table}/snapshot first (an unfinished one resumes where it stopped)"
            )
        meta = last.metadata
        keys = list(self.keys or meta["key_columns"])
        log_start = BinlogPosition.from_metadata(meta["log_start"])
        changes = self.snapshot.df().withColumn(DELETED, F.lit(False))
        outcome = ordered_merge(
            spark, path, changes, keys,
            metadata={"kind": "silver", "source": self.source, "table": self.table, "from": "snapshot",
                      "snapshot_id": meta["snapshot_id"], "log_start": meta["log_start"]},
            txn=Txn(f"silver:{self.source}.{self.table}:snapshot:{meta['snapshot_id']}", 0),
            tombstone_before=log_start.row_pos(),
        )
        log(f"silver {self.source}/{self.table}: merged snapshot {meta['snapshot_id']}"
            + ("" if outcome.committed else " (already merged: nothing to do)"))
        df = spark.read.format("delta").load(path)
        return {
            "rows_live": live_rows(df).count(),
            "tombstones": df.where(DELETED).count(),
            "delta_version": outcome.version,
            "committed": outcome.committed,
            "snapshot_id": meta["snapshot_id"],
            "log_start": log_start.to_metadata(),
        }
