"""Silver tables: the current state of each source table, built by the ordered merge."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ingest.lake.bronze import BatchSummary
from ingest.lake.commits import SilverCommit, Txn
from ingest.lake.deltalog import is_delta_table, last_commit, newest_commit, table_version
from ingest.lake.merge import DELETED, POS, Layout, ordered_merge, row_counts
from ingest.lake.tables import LakeTable
from ingest.lake.write import WriteOutcome, session_txn


class SnapshotNotFinished(RuntimeError):
    pass


def snapshot_in_silver(silver_path: str, snapshot_id: str) -> bool:
    """Whether silver holds the snapshot and its catch-up: the two are separate commits, so only a
    commit made after both (`caught_up`) proves it; a run killed between them redoes both."""
    return last_commit(silver_path, kind="silver", snapshot_id=snapshot_id, caught_up=True) is not None


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
    layout: Layout = Layout()

    def apply(self, spark: Any, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        last = self.snapshot.last_commit(kind="snapshot")
        if last is None or not last.metadata.get("complete"):
            raise SnapshotNotFinished(
                f"{self.source}/{self.table}: the snapshot at {self.snapshot.path} is "
                f"{'missing' if last is None else 'unfinished'}. Fix: materialize "
                f"{self.source}/{self.table}/snapshot first (an unfinished one resumes where it stopped)"
            )
        meta = last.metadata
        keys = list(self.keys or meta["key_columns"])
        changes = self.snapshot.df().withColumn(DELETED, F.lit(False))
        record = SilverCommit(self.source, self.table, meta["snapshot_id"], log_start=meta["log_start"])
        outcome = ordered_merge(spark, path, changes, keys, metadata=record.metadata(), txn=record.txn,
                                tombstone_before=int(meta["log_start_pos"]), layout=self.layout)
        log(f"silver {self.source}/{self.table}: merged snapshot {meta['snapshot_id']}"
            + ("" if outcome.committed else " (already merged: nothing to do)"))
        # no row counts here: the batch merge that brought the snapshot in counts once, after its catch-up
        return {
            "delta_version": outcome.version,
            "committed": outcome.committed,
            "snapshot_id": meta["snapshot_id"],
            "log_start": meta["log_start"],
        }


def pos_literal(value: int | str):
    """A `_pos` constant: positions pass 2**63, past what a plain literal (a long) holds."""
    from pyspark.sql import functions as F

    return F.expr(f"CAST({int(value)} AS DECIMAL(38,0))")


def _bronze_to_silver_rows(changes, cutoff: int):
    from pyspark.sql import functions as F

    from ingest.lake.bronze import META_COLUMNS, UNCHANGED_COLUMN

    return (changes.where("_op <> 'truncate'")
            .withColumn(DELETED, (F.col("_op") == "delete") | (F.col(POS) < pos_literal(cutoff)))
            .drop(*[c for c in META_COLUMNS if c not in (POS, UNCHANGED_COLUMN)]))


def keep_unchanged(spark, path: str, rows, keys: Sequence[str]):
    """Fill the values a change did not send (bronze's `_unchanged`): from the key's newest earlier change
    in `rows` that sent the column, else from the row silver holds. Without it the merge would write
    NULL over a value the source still has.

    Exact when batches merge in order, as the sensor runs them. A batch merged before an older one that
    set the value (a manual backfill out of order) fills from what silver held then, and a key silver does
    not hold yet keeps NULL there until a later change or snapshot sends the column."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from ingest.lake.bronze import UNCHANGED_COLUMN
    from ingest.lake.tables import spark_ident

    named = [r[0] for r in rows.select(F.explode(UNCHANGED_COLUMN)).distinct().collect()]
    columns = [c for c in named if c in rows.columns]
    if not columns:
        return rows.drop(UNCHANGED_COLUMN)
    skipped = F.coalesce(F.col(UNCHANGED_COLUMN), F.array().cast("array<string>"))
    earlier = Window.partitionBy(*[F.col(spark_ident(k)) for k in keys]).orderBy(POS).rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    for c in columns:  # the newest value sent so far, as a struct so that a sent NULL counts
        sent = F.last(F.when(~F.array_contains(skipped, c), F.struct(F.col(spark_ident(c)).alias("v"))),
                      ignorenulls=True).over(earlier)
        rows = rows.withColumn(f"_sent_{c}", sent).withColumn(c, F.col(f"_sent_{c}.v"))
    still = F.filter(F.array(*[F.when(F.col(f"_sent_{c}").isNull(), F.lit(c)) for c in columns]),
                     lambda x: x.isNotNull())
    rows = rows.withColumn(UNCHANGED_COLUMN, still).drop(*[f"_sent_{c}" for c in columns])
    if is_delta_table(path):
        held = spark.read.format("delta").load(path)
        present = [c for c in columns if c in held.columns]
        held = held.select(*[F.col(spark_ident(k)).alias(f"_held_k_{i}") for i, k in enumerate(keys)],
                           *[F.col(spark_ident(c)).alias(f"_held_{c}") for c in present])
        on = [F.col(spark_ident(k)).eqNullSafe(F.col(f"_held_k_{i}")) for i, k in enumerate(keys)]
        rows = rows.join(held, on, "left")
        for c in present:
            rows = rows.withColumn(c, F.when(F.array_contains(F.col(UNCHANGED_COLUMN), c),
                                                          F.col(f"_held_{c}")).otherwise(F.col(spark_ident(c))))
        rows = rows.drop(*[f"_held_k_{i}" for i in range(len(keys))], *[f"_held_{c}" for c in present])
    return rows.drop(UNCHANGED_COLUMN)


def truncated_before(spark, path: str) -> int:
    """The newest TRUNCATE silver has applied: changes older than it are dead on arrival.

    Every change merge records the cut-off it applied, the newest of all before
    it included (merges of one table cannot commit concurrently without seeing
    each other), so the newest merge that recorded one knows it.
    """
    newest = newest_commit(path, lambda meta: "truncated_before" in meta)
    return int(newest.metadata["truncated_before"] or 0) if newest else 0


class BronzeMerge(NamedTuple):
    outcome: WriteOutcome
    changes: int
    """Change rows (TRUNCATEs aside) the batch held."""
    newest_epoch: int | None
    """When the newest of them was committed in the source (epoch seconds)."""
    oldest_epoch: int | None
    """When the oldest of them was (None from bronze commits of earlier versions)."""

    def lags(self, now: float) -> dict[str, float]:
        """How long the batch's changes waited from their commit in the source to `now`, when silver has
        them: `lag_seconds` for the oldest (the longest wait, what a user who timed a row can see) and
        `lag_seconds_newest` for the newest (pure)."""
        if self.newest_epoch is None:
            return {}
        oldest = self.newest_epoch if self.oldest_epoch is None else self.oldest_epoch
        return {"lag_seconds": round(now - oldest, 1), "lag_seconds_newest": round(now - self.newest_epoch, 1)}


def merge_bronze(spark, path: str, changes, keys: list[str], meta: dict[str, Any], app_id: str,
                 summary: BatchSummary | None = None, layout: Layout = Layout()) -> BronzeMerge:
    """Merge bronze change rows into silver, TRUNCATEs included, safe in any order.

    A TRUNCATE in `changes`, or one silver applied before, turns every older
    change into a tombstone, and every older row silver holds too; the newest
    one is remembered in the commit metadata (`truncated_before`) so that older
    changes arriving later stay dead. `summary`: what bronze's commit recorded of
    these changes, else one Spark job over them finds it. `layout`: the table's
    (see `Layout`).
    """
    from pyspark.sql import functions as F

    from ingest.lake.bronze import UNCHANGED_COLUMN
    from ingest.lake.columns import lake_name
    from ingest.lake.merge import delta_path

    keys = [lake_name(k) for k in keys]  # the snapshot records the source's names
    if summary is None:  # one pass over the changes for both questions: any rows to merge, any TRUNCATE
        seen = changes.agg(F.count(F.when(F.col("_op") != "truncate", 1)).alias("rows"),
                           F.collect_list(F.when(F.col("_op") == "truncate", F.col(POS))).alias("truncates"),
                           *((F.max(F.unix_timestamp("_ts")).alias("newest"), F.min(F.unix_timestamp("_ts")).alias("oldest"))
                             if "_ts" in changes.columns else (F.lit(None).alias("newest"), F.lit(None).alias("oldest")))
                           ).first()
        summary = BatchSummary(seen["rows"], tuple(int(p) for p in seen["truncates"]), seen["newest"], seen["oldest"])
    truncates = list(summary.truncates)
    cutoff = max([truncated_before(spark, path), *truncates])
    meta = {**meta, "truncated_before": cutoff or None}
    rows = _bronze_to_silver_rows(changes, cutoff)
    if UNCHANGED_COLUMN in rows.columns:
        rows = keep_unchanged(spark, path, rows, keys)
    if set(keys) <= set(rows.columns) and summary.changes:
        outcome = ordered_merge(spark, path, rows, keys, meta, Txn(app_id, 0), expected_rows=summary.changes,
                                layout=layout)
    else:  # no change to this table here (bronze may not even have its columns yet)
        outcome = WriteOutcome(table_version(path), False)
    if truncates:
        with session_txn(spark, meta, Txn(f"{app_id}:truncate", 0)):
            spark.sql(f"UPDATE {delta_path(path)} SET {DELETED} = true, {POS} = CAST({cutoff} AS DECIMAL(38,0)) "
                      f"WHERE {POS} < {cutoff} AND NOT {DELETED}").collect()
    return BronzeMerge(outcome, summary.changes, summary.newest_epoch, summary.oldest_epoch)


@dataclass(frozen=True)
class SilverFromBatch:
    """Merge one change batch from bronze into silver, after the latest snapshot if it is not in yet.

    Safe in any order and any number of times: the ordered merge ignores changes
    older than a row's `_pos`, and TRUNCATEs are remembered (see merge_bronze).
    """

    source: str
    table: str
    bronze: LakeTable
    snapshot: LakeTable
    batch_required: bool = True
    """False: the batch did not change this table; only bring its newest snapshot in (and catch up)."""
    layout: Layout = Layout()
    """The table's opt-ins: deletion vectors, the change data feed (see `Layout`)."""

    def apply(self, spark: Any, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        batch = self.bronze.partition
        log(f"silver {self.source}/{self.table} batch {batch}: merging")
        snap = self.snapshot.last_commit(kind="snapshot")
        if snap is None or not snap.metadata.get("complete"):
            # A table created after CDC started (the sensor asks for its snapshot), or one whose
            # snapshot is still running: nothing to merge into yet. The snapshot's first merge
            # below catches up on every change since its log start, this batch's included.
            log(f"silver {self.source}/{self.table}: no finished snapshot yet; batch {batch} waits for it")
            return {"waiting_for_snapshot": True, "batch": batch}
        keys = list(snap.metadata["key_columns"])
        snapshot_id = snap.metadata["snapshot_id"]
        # The table's live rows and tombstones are counted when a snapshot comes in; a batch reports what
        # it merged (and Delta's rows inserted and updated): counting every batch scans the whole table.
        merged_snapshot = not snapshot_in_silver(path, snapshot_id)
        if merged_snapshot:
            SilverFromSnapshot(self.source, self.table, self.snapshot,
                               layout=self.layout).apply(spark, path, log)
            self._catch_up(spark, path, snap.metadata, keys, batch, log)

        def counts() -> dict[str, int]:
            return row_counts(spark.read.format("delta").load(path)) if merged_snapshot else {}

        bronze_batch = last_commit(self.bronze.path, kind="bronze", batch=batch)
        if bronze_batch is None and not self.batch_required:
            return {**counts(), "batch": batch, "rows": 0, "snapshot_id": snapshot_id}
        if bronze_batch is None:
            raise RuntimeError(
                f"{self.source}/{self.table}: bronze has no batch {batch}. Fix: materialize "
                f"{self.source}/{self.table}/changes for partition {batch} first"
            )
        # snapshot_id in every batch merge: "is this snapshot in?" is then answered by a recent commit
        record = SilverCommit(self.source, self.table, snapshot_id, batch=batch, end=bronze_batch.metadata.get("end"))
        stored = bronze_batch.metadata.get("summary")
        # None: merge_bronze counts the batch's rows itself (an older commit, or one without metrics)
        summary = BatchSummary.from_metadata(stored).counted(bronze_batch.metrics) if stored else None
        merged = merge_bronze(spark, path, self.bronze.df().where(F.col("_batch") == batch), keys,
                                                record.metadata(), record.txn.app_id, summary, self.layout)
        outcome = merged.outcome
        log(f"silver {self.source}/{self.table}: merged batch {batch}"
            + ("" if outcome.committed else " (already merged: nothing to do)"))
        return {**counts(), "delta_version": outcome.version, "committed": outcome.committed, "batch": batch,
                "end": bronze_batch.metadata.get("end"), "rows": merged.changes, "snapshot_id": snapshot_id,
                **merged.lags(time.time())}

    def _catch_up(self, spark: Any, path: str, snap: dict[str, Any], keys: list[str], batch: str, log) -> None:
        """After a snapshot's first merge: every change in bronze since its log start, other
        batches included, so that batches which ran before the snapshot existed are not lost.
        Its commit says `caught_up`; with nothing to catch up on, an empty commit says it, so that a
        table no batch changes is not merged again at every batch."""
        from pyspark.sql import functions as F

        from ingest.lake.write import append

        record = SilverCommit(self.source, self.table, snap["snapshot_id"], catch_up_from=snap["log_start"])
        meta, app_id = record.metadata(), record.txn.app_id
        merged = None
        if self.bronze.exists():
            since = self.bronze.df().where((F.col(POS) >= pos_literal(snap["log_start_pos"]))
                                           & (F.col("_batch") != batch))
            merged = merge_bronze(spark, path, since, keys, meta, app_id, layout=self.layout)
        if merged is None or not merged.changes:
            append(spark.read.format("delta").load(path).limit(0), path, meta, Txn(app_id, 0))
        log(f"silver {self.source}/{self.table}: caught up on bronze since {snap['log_start']}")
