"""Reconciliation: does silver hold what the source holds?

Silver is compared with the source at a matched position. The source is read
with the snapshot's own chunk reader (so both sides have the same types), each
row is hashed on both sides, and the rows are joined on the primary key. The
source read is newer than silver, so keys the binlog shows changed after the
position silver has merged up to are left out of the comparison (they are the
next batch's business, not a divergence). Differences are reported by the
primary-key ranges of the snapshot's chunk plan, so a mismatch names where
to look (and what to re-snapshot).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest.sources.mysql.chunks import Key
from ingest.sources.mysql.positions import BatchRange, BinlogPosition

MAX_REPORTED_KEYS = 5


@dataclass(frozen=True)
class RangeDiff:
    lo: Key | None
    hi: Key | None
    missing: int
    """Rows the source holds and silver does not."""
    extra: int
    """Live rows silver holds and the source does not."""
    different: int
    """Rows both hold with other values."""
    keys: tuple[Key, ...]
    """A few of the keys that differ."""

    def describe(self) -> str:
        lo = "start" if self.lo is None else repr(self.lo)
        hi = "end" if self.hi is None else repr(self.hi)
        return (f"keys [{lo}, {hi}): {self.missing} missing, {self.extra} extra, {self.different} different "
                f"(e.g. {', '.join(map(repr, self.keys))})")


@dataclass
class Reconciliation:
    table: str
    source_rows: int = 0
    silver_rows: int = 0
    source_checksum: int = 0
    silver_checksum: int = 0
    compared_at: BinlogPosition | None = None
    """The position silver has merged up to."""
    recently_changed: int = 0
    """Keys changed after that position, left out of the comparison."""
    ranges: list[RangeDiff] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.ranges

    def summary(self) -> str:
        if self.passed:
            return (f"{self.table}: silver matches the source ({self.source_rows} rows; "
                    f"{self.recently_changed} keys changed since {self.compared_at} left to the next batch)")
        return (f"{self.table}: silver differs from the source in {len(self.ranges)} key range(s): "
                + "; ".join(r.describe() for r in self.ranges)
                + ". Fix: re-snapshot the table (materialize its snapshot asset, then a change batch)")


# ---------------------------------------------------------------- pure

def merged_through(log_start: BinlogPosition, merged: Iterable[BatchRange]) -> BinlogPosition:
    """How far silver is complete: from the snapshot's log start along contiguous merged batches (pure).

    A batch that starts past the end reached so far leaves a gap: silver may
    lack what lies in it, so the position stops there.
    """
    reached = log_start
    for batch in sorted(merged, key=lambda b: b.start):
        if batch.start > reached:
            break
        reached = max(reached, batch.end)
    return reached


def group_by_range(differences: Sequence[tuple[Key, str]], boundaries: Sequence[Key]) -> list[RangeDiff]:
    """Differing keys (with 'missing', 'extra' or 'different') grouped by the chunk ranges (pure)."""
    edges: list[Key | None] = [None, *boundaries, None]
    groups: dict[int, list[tuple[Key, str]]] = {}
    for key, kind in differences:
        groups.setdefault(bisect.bisect_right(list(boundaries), key), []).append((key, kind))
    out = []
    for index in sorted(groups):
        items = sorted(groups[index])
        counts = {kind: sum(1 for _, k in items if k == kind) for kind in ("missing", "extra", "different")}
        out.append(RangeDiff(edges[index], edges[index + 1], counts["missing"], counts["extra"],
                             counts["different"], tuple(k for k, _ in items[:MAX_REPORTED_KEYS])))
    return out


# ---------------------------------------------------------------- Spark and the source

def row_hash(df, columns: Sequence[str]):
    """A 64-bit hash of the columns, nulls told apart from values (Spark's hash skips nulls)."""
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    cols = [F.col(spark_ident(c)) for c in columns]
    nulls = F.concat(*[F.when(c.isNull(), F.lit("1")).otherwise(F.lit("0")) for c in cols])
    return F.xxhash64(*cols, nulls)


def silver_position(spark, silver_path: str, basename: str) -> BinlogPosition | None:
    """The position silver has merged up to, from its Delta log (None: no snapshot merged)."""
    from ingest.lake.commits import commits

    history = commits(silver_path)
    snapshot = next((c for c in history if c.metadata.get("from") == "snapshot"), None)
    if snapshot is None:
        return None
    merged = [BatchRange.from_key(c.metadata["batch"], basename) for c in history
              if c.metadata.get("kind") == "silver" and c.metadata.get("batch") and c.version > snapshot.version]
    return merged_through(BinlogPosition.from_metadata(snapshot.metadata["log_start"]), merged)


def reconcile(spark, params, schema, silver_path: str, *, chunk_size: int, parallelism: int) -> Reconciliation:
    """Compare silver's live rows with the source's rows now, leaving out keys changed since silver's position."""
    from pyspark.sql import functions as F

    from ingest.lake.columns import lake_name
    from ingest.lake.merge import live_rows
    from ingest.lake.tables import spark_ident
    from ingest.lake.write import lake_columns
    from ingest.sources.mysql.binlog import master_position
    from ingest.sources.mysql.chunks import plan_chunks
    from ingest.sources.mysql.snapshot import plan_boundaries, read_chunks_df

    started = time.monotonic()
    keys = list(schema.primary_key)
    result = Reconciliation(schema.table)
    with params.connect() as conn:
        head = master_position(conn)
        boundaries = plan_boundaries(conn, schema, chunk_size, None)
    position = silver_position(spark, silver_path, head.basename)
    if position is None:
        raise ValueError(f"{schema.table}: silver at {silver_path} has no snapshot merged yet. "
                         "Fix: materialize the snapshot and a change batch first")
    result.compared_at = position

    silver = live_rows(spark.read.format("delta").load(silver_path))
    source = lake_columns(read_chunks_df(spark, params, schema, plan_chunks(boundaries), parallelism))
    columns = [lake_name(c) for c in schema.column_names]
    lake_keys = [lake_name(k) for k in keys]
    silver_types, source_types = dict(silver.dtypes), dict(source.dtypes)
    for c in columns:  # compare in silver's types; a column silver lacks compares as null
        if c in silver_types:
            source = source.withColumn(c, F.col(spark_ident(c)).cast(silver_types[c]))
        else:
            silver = silver.withColumn(c, F.lit(None).cast(source_types[c]))
    s = source.select(*lake_keys, row_hash(source, columns).alias("_h"))
    t = silver.select(*lake_keys, row_hash(silver, columns).alias("_h"))
    totals = [side.agg(F.count(F.lit(1)), F.coalesce(F.sum(F.col("_h").cast("decimal(38,0)")), F.lit(0))).first()
              for side in (s, t)]
    (result.source_rows, source_sum), (result.silver_rows, silver_sum) = [(int(a), int(b)) for a, b in totals]
    result.source_checksum, result.silver_checksum = source_sum % 2 ** 64, silver_sum % 2 ** 64
    joined = s.alias("s").join(t.alias("t"), on=lake_keys, how="full_outer")
    kind = (F.when(F.col("t._h").isNull(), "missing").when(F.col("s._h").isNull(), "extra")
            .when(F.col("s._h") != F.col("t._h"), "different"))
    diffs = [(tuple(r[k] for k in lake_keys), r["_kind"])
             for r in joined.select(*lake_keys, kind.alias("_kind")).where(F.col("_kind").isNotNull()).collect()]

    with params.connect() as conn:
        now = master_position(conn)
    changed = _keys_changed(params, schema, BatchRange(position, now), keys) if now > position else set()
    result.recently_changed = len(changed)
    result.ranges = group_by_range([d for d in diffs if d[0] not in changed], boundaries)
    result.seconds = time.monotonic() - started
    return result


def _keys_changed(params, schema, batch: BatchRange, keys: list[str]) -> set[Key]:
    from ingest.sources.mysql.binlog import read_batch


    records = read_batch(params, batch, {schema.table: keys}).records.get(schema.table, [])
    out: set[Key] = set()
    for r in records:
        for image in (r.row, r.before):
            if image:
                out.add(tuple(image.get(k) for k in keys))
    return out


def reconciliation_metadata(result: Reconciliation) -> dict[str, Any]:
    return {
        "source_rows": result.source_rows, "silver_rows": result.silver_rows,
        "differing_ranges": len(result.ranges),
        "differing_rows": sum(r.missing + r.extra + r.different for r in result.ranges),
        "recently_changed_keys": result.recently_changed,
        "source_checksum": str(result.source_checksum), "silver_checksum": str(result.silver_checksum),
        "compared_at": result.compared_at.to_metadata() if result.compared_at else None,
        "seconds": round(result.seconds, 2),
        "ranges": [r.describe() for r in result.ranges[:20]],
    }
