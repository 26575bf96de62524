"""SCD type 2 history: one row per version of a key, built from bronze and the snapshot.

Columns: the table's data columns, then
  _valid_from     decimal(38,0)  `_pos` of the change (or the snapshot chunk) that wrote the version
  _valid_to       decimal(38,0)  `_pos` of the key's next version, its delete or a TRUNCATE; null while current
  _valid_from_ts, _valid_to_ts   their commit times in the source (null where a snapshot set them)
  _current        boolean        the key's live version
  _deleted        boolean        a delete: the key was deleted at `_valid_from`. Its interval is empty
                                 (`_valid_to = _valid_from`), so a query by interval never sees it; it
                                 is kept so that a version older than the delete, arriving later,
                                 is still closed by it.
An image equal to the key's row just before it (a snapshot re-reading what the change log gave)
also keeps an empty interval: it is no new version, and the one before it runs on.
As of position p: `_valid_from <= p AND (_valid_to > p OR _valid_to IS NULL)`; now: `_current`.

Convergence, as silver's (DESIGN principle 2): a batch inserts its versions by (key,
`_valid_from`) where they are missing, and recomputes the intervals of the keys it
touched from every version history holds for them. Versions are facts at fixed
positions, so any order of batches and any number of repeats give the same table.
The plan (interval expressions, MERGE text) is pure; `merge_history` runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.lake.commits import Txn
from ingest.lake.deltalog import is_delta_table, last_commit, table_version
from ingest.lake.merge import DELETED, POS, Layout, apply_layout, delta_path, temp_view
from ingest.lake.tables import LakeTable
from ingest.lake.tables import spark_ident as _col

FROM, TO, FROM_TS, TO_TS, CURRENT = "_valid_from", "_valid_to", "_valid_from_ts", "_valid_to_ts", "_current"
HISTORY_COLUMNS = (FROM, TO, FROM_TS, TO_TS, CURRENT, DELETED)


@dataclass(frozen=True, order=True)
class Truncate:
    pos: int
    ts: Any  # the commit time (a datetime), or None


def _first_cut(truncates: Sequence[Truncate], field: str) -> str:
    """SQL for the first TRUNCATE after a version's `_valid_from` (null: none), or its commit time."""
    if not truncates:
        return "NULL" if field == "pos" else "CAST(NULL AS TIMESTAMP)"
    whens = []
    for t in sorted(truncates):
        value = f"CAST({t.pos} AS DECIMAL(38,0))" if field == "pos" else (
            f"TIMESTAMP '{t.ts.isoformat(sep=' ')}'" if t.ts is not None else "CAST(NULL AS TIMESTAMP)")
        whens.append(f"WHEN {FROM} < {t.pos} THEN {value}")
    return f"CASE {' '.join(whens)} END"


def interval_columns(keys: Sequence[str], truncates: Sequence[Truncate]) -> dict[str, str]:
    """SQL for `_valid_to`, `_valid_to_ts` and `_current` over a key's versions (pure).

    A version ends at the key's next version, or at the first TRUNCATE after it if that comes first;
    a delete's own interval is empty."""
    window = f"OVER (PARTITION BY {', '.join(_col(k) for k in keys)} ORDER BY {FROM})"
    nxt, nxt_ts = f"LEAD({FROM}) {window}", f"LEAD({FROM_TS}) {window}"
    cut, cut_ts = _first_cut(truncates, "pos"), _first_cut(truncates, "ts")
    cut_first = f"({cut}) IS NOT NULL AND ({nxt} IS NULL OR ({cut}) < {nxt})"
    to = f"CASE WHEN {DELETED} THEN {FROM} WHEN {cut_first} THEN {cut} ELSE {nxt} END"
    to_ts = f"CASE WHEN {DELETED} THEN {FROM_TS} WHEN {cut_first} THEN {cut_ts} ELSE {nxt_ts} END"
    return {TO: to, TO_TS: to_ts, CURRENT: f"({to}) IS NULL"}


def merge_history_sql(path: str, view: str, keys: Sequence[str]) -> str:
    """MERGE the recomputed versions in `view` into the history at `path` (pure): a new version is
    inserted, a known one takes its new interval; every other row is left as it is."""
    on = " AND ".join(f"t.{_col(k)} = s.{_col(k)}" for k in keys) + f" AND t.{FROM} = s.{FROM}"
    changed = f"NOT (t.{TO} <=> s.{TO} AND t.{TO_TS} <=> s.{TO_TS} AND t.{CURRENT} <=> s.{CURRENT})"
    return (f"MERGE INTO {delta_path(path)} AS t USING {_col(view)} AS s ON {on} "
            f"WHEN MATCHED AND {changed} THEN UPDATE SET t.{TO} = s.{TO}, t.{TO_TS} = s.{TO_TS}, "
            f"t.{CURRENT} = s.{CURRENT} "
            f"WHEN NOT MATCHED THEN INSERT *")


def close_at_truncate_sql(path: str, truncate: Truncate) -> str:
    """Every version open across a TRUNCATE ends at it, whichever keys the batch touched (pure)."""
    ts = f"TIMESTAMP '{truncate.ts.isoformat(sep=' ')}'" if truncate.ts is not None else "CAST(NULL AS TIMESTAMP)"
    return (f"UPDATE {delta_path(path)} SET {TO} = CAST({truncate.pos} AS DECIMAL(38,0)), {TO_TS} = {ts}, "
            f"{CURRENT} = false WHERE NOT {DELETED} AND {FROM} < {truncate.pos} "
            f"AND ({TO} IS NULL OR {TO} > {truncate.pos})")


def unchanged_sql(keys: Sequence[str], data: Sequence[str], truncates: Sequence[Truncate]) -> str:
    """SQL: this image equals the key's row just before it, with no delete or TRUNCATE between (pure).
    A snapshot re-reading a row the change log already gave makes one; it is no new version."""
    window = f"OVER (PARTITION BY {', '.join(_col(k) for k in keys)} ORDER BY {FROM})"
    image = f"to_json(struct({', '.join(_col(c) for c in data)}))"
    prev = f"LAG({FROM}) {window}"
    crossed = " OR ".join(f"({prev} < {t.pos} AND {FROM} > {t.pos})" for t in truncates) or "false"
    return (f"COALESCE(NOT {DELETED} AND NOT LAG({DELETED}) {window} AND LAG({image}) {window} = {image} "
            f"AND NOT ({crossed}), false)")


def with_intervals(versions, keys: Sequence[str], truncates: Sequence[Truncate]):
    """Each row's interval. An unchanged image keeps an empty one (`_valid_to = _valid_from`) and the
    version before it runs on past it: rows are never dropped, so a version arriving later between
    the two makes it a version again, in any order."""
    from pyspark.sql import functions as F

    data = [c for c in versions.columns if c not in HISTORY_COLUMNS]
    flagged = versions.select(*[F.col(_col(c)) for c in data], F.col(FROM), F.col(FROM_TS), F.col(DELETED),
                              F.expr(unchanged_sql(keys, data, truncates)).alias("_unchanged"))
    cols = interval_columns(keys, truncates)
    ordered = [*[F.col(_col(c)) for c in data], F.col(FROM)]
    versions_ = flagged.where("NOT _unchanged").select(
        *ordered, F.expr(cols[TO]).alias(TO), F.col(FROM_TS), F.expr(cols[TO_TS]).alias(TO_TS),
        F.expr(cols[CURRENT]).alias(CURRENT), F.col(DELETED))
    unchanged = flagged.where("_unchanged").select(
        *ordered, F.col(FROM).alias(TO), F.col(FROM_TS), F.col(FROM_TS).alias(TO_TS), F.lit(False).alias(CURRENT),
        F.col(DELETED))
    return versions_.unionByName(unchanged)


def bronze_versions(changes):
    """Bronze change rows as versions: an insert or update is a version, a delete a delete marker."""
    from pyspark.sql import functions as F

    from ingest.lake.bronze import META_COLUMNS

    return (changes.where("_op <> 'truncate'")
            .withColumn(FROM, F.col(POS)).withColumn(FROM_TS, F.col("_ts"))
            .withColumn(DELETED, F.col("_op") == "delete")
            .drop(*META_COLUMNS))


def snapshot_versions(snapshot):
    """Snapshot rows as versions at their chunk's position; the source gives no commit time."""
    from pyspark.sql import functions as F

    return (snapshot.withColumn(FROM, F.col(POS)).withColumn(FROM_TS, F.lit(None).cast("timestamp"))
            .withColumn(DELETED, F.lit(False)).drop(POS))


def truncates_in(bronze) -> list[Truncate]:
    return sorted(Truncate(int(r[POS]), r["_ts"]) for r in bronze.where("_op = 'truncate'").select(POS, "_ts").collect())


def merge_history(spark, path: str, versions, keys: Sequence[str], truncates: Sequence[Truncate],
                  metadata: dict[str, Any], txn: Txn, new_truncates: Sequence[Truncate] = (),
                  layout: Layout = Layout()) -> bool:
    """Insert `versions` (data columns, `_valid_from`, `_valid_from_ts`, `_deleted`) into the history at
    `path` and recompute the intervals of the keys they touch. True when it committed. `layout`: the
    table's (see `Layout.history`)."""
    from ingest.lake.columns import lake_name
    from ingest.lake.write import WriteOutcome, append, lake_columns, session_txn, widen_for

    versions, keys = lake_columns(versions), [lake_name(k) for k in keys]
    if not is_delta_table(path):
        outcome = append(with_intervals(versions.dropDuplicates([*keys, FROM]), keys, truncates), path, metadata, txn,
                         properties=layout.history().wanted(versions.columns))
        return outcome.committed
    apply_layout(spark, path, layout.history(), versions.columns)
    widen_for(spark, versions, path)
    history = spark.read.format("delta").load(path)
    touched = history.join(versions.select(*keys).distinct(), on=list(keys), how="left_semi")
    known = touched.drop(TO, TO_TS, CURRENT)
    combined = known.unionByName(versions, allowMissingColumns=True).dropDuplicates([*keys, FROM])
    before = table_version(path)
    view = temp_view(with_intervals(combined, keys, truncates))
    try:
        with session_txn(spark, metadata, txn):
            spark.sql(merge_history_sql(path, view, keys)).collect()
    finally:
        spark.catalog.dropTempView(view)
    for t in new_truncates:
        with session_txn(spark, metadata, Txn(f"{txn.app_id}:truncate:{t.pos}", txn.version)):
            spark.sql(close_at_truncate_sql(path, t)).collect()
    return WriteOutcome.after(path, before).committed


def snapshot_in_history(path: str, snapshot_id: str) -> bool:
    """Whether the history holds the snapshot's rows: every history commit after it names it."""
    return last_commit(path, kind="history", snapshot_id=snapshot_id) is not None


@dataclass(frozen=True)
class HistoryFromBatch:
    """Add one change batch of bronze to the table's SCD2 history, with the newest snapshot's rows
    the first time history meets that snapshot. Safe in any order and any number of times."""

    source: str
    table: str
    bronze: LakeTable
    snapshot: LakeTable
    layout: Layout = Layout()

    def apply(self, spark: Any, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from ingest.lake.silver import pos_literal

        batch = self.bronze.partition
        snap = self.snapshot.last_commit(kind="snapshot")
        if snap is None or not snap.metadata.get("complete"):
            # the snapshot knows the key; the first history build after it takes all of bronze
            log(f"history {self.source}/{self.table}: no finished snapshot yet; batch {batch} waits for it")
            return {"waiting_for_snapshot": True, "batch": batch}
        meta_in = snap.metadata
        keys, snapshot_id = list(meta_in["key_columns"]), meta_in["snapshot_id"]
        bronze = self.bronze.df() if self.bronze.exists() else None
        exists = is_delta_table(path)
        parts = []
        if bronze is not None:  # a new history takes every batch bronze holds; later ones their own
            parts.append(bronze_versions(bronze if not exists else bronze.where(F.col("_batch") == batch)))
        has_snapshot = exists and snapshot_in_history(path, snapshot_id)
        if not has_snapshot:
            parts.append(snapshot_versions(self.snapshot.df()))
            if exists:  # keys the new snapshot lacks, live since before its log start: deleted meanwhile
                parts.append(_deleted_before(spark, path, self.snapshot.df(), keys,
                                             pos_literal(meta_in["log_start_pos"])))
        versions = parts[0]
        for part in parts[1:]:
            versions = versions.unionByName(part, allowMissingColumns=True)
        truncates = truncates_in(bronze) if bronze is not None else []
        batch_truncates = truncates_in(bronze.where(F.col("_batch") == batch)) if bronze is not None else []
        meta = {"kind": "history", "source": self.source, "table": self.table, "batch": batch,
                "snapshot_id": snapshot_id}
        txn = Txn(f"history:{self.source}.{self.table}:{batch}:{snapshot_id}", 0)
        committed = merge_history(spark, path, versions, keys, truncates, meta, txn, batch_truncates if exists else (),
                                  self.layout)
        if not committed:
            # nothing changed (or this txn is in already): an empty commit under the same txn still says the
            # batch is in, which the batch log checks; a repeat of the txn adds nothing
            from ingest.lake.write import append

            append(spark.read.format("delta").load(path).limit(0), path, meta, txn)
        log(f"history {self.source}/{self.table}: added batch {batch}"
            + ("" if has_snapshot else f" and snapshot {snapshot_id}")
            + ("" if committed else " (already in: nothing to do)"))
        out = {"batch": batch, "committed": committed, "snapshot_id": snapshot_id}
        if not has_snapshot:  # counted when a snapshot comes in only: a count every batch scans the table
            counts = spark.read.format("delta").load(path).agg(
                F.count(F.when(~F.col(DELETED), 1)).alias("versions"),
                F.count(F.when(F.col(CURRENT), 1)).alias("current")).first()
            out.update(versions=counts["versions"], current_rows=counts["current"])
        return out


def _deleted_before(spark, path: str, snapshot, keys: Sequence[str], log_start):
    """Delete markers at the snapshot's log start for current versions older than it that the
    snapshot does not hold (the source deleted them before the snapshot read)."""
    from pyspark.sql import functions as F

    from ingest.lake.columns import lake_name

    keys = [lake_name(k) for k in keys]
    history = spark.read.format("delta").load(path)
    gone = (history.where(F.col(CURRENT) & (F.col(FROM) < log_start))
            .join(snapshot.select(*[_col(k) for k in keys]), on=keys, how="left_anti"))
    return (gone.drop(TO, TO_TS, CURRENT).withColumn(FROM, log_start)
            .withColumn(FROM_TS, F.lit(None).cast("timestamp")).withColumn(DELETED, F.lit(True)))

