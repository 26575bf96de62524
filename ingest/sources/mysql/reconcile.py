"""Reconciliation: does silver hold what the source holds?

Silver is compared with the source at a matched position, in the manner of
pt-table-checksum: both sides are cut into the same primary-key ranges, each
range gets a row count and a checksum (the sum of a 64-bit hash per row), and
only the ranges whose counts or checksums differ are compared row by row. The
source is read once, with the snapshot's own chunk reader (so both sides have
the same types); its per-row hashes are kept on the Spark side's disk for the
row-by-row step, and nothing per row reaches the driver except the keys that
differ, streamed and counted. The source read is newer than silver, so keys the
binlog shows changed after the position silver has merged up to are left out
(they are the next batch's business, not a divergence). A mismatch names its
key ranges and a few keys in each, so it says where to look and what to
re-snapshot.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest.sources.mysql.chunks import Key
from ingest.sources.mysql.positions import BatchRange, BinlogPosition

MAX_REPORTED_KEYS = 5
MAX_RANGES = 1024
"""Checksummed ranges per table: the range expression stays small; a mismatch re-reads one range's rows."""


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
    ranges_checked: int = 0
    ranges_compared_by_row: int = 0
    """Ranges whose counts or checksums differed, so their rows were compared."""
    recently_changed: int = 0
    """Differing keys the binlog changed after that position, left to the next batch."""
    ranges: list[RangeDiff] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.ranges

    def summary(self) -> str:
        if self.passed:
            return (f"{self.table}: silver matches the source ({self.source_rows} rows in {self.ranges_checked} "
                    f"key ranges; {self.recently_changed} keys changed since {self.compared_at} left to the "
                    "next batch)")
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


def thin_boundaries(boundaries: Sequence[Key], max_ranges: int = MAX_RANGES) -> list[Key]:
    """At most `max_ranges - 1` of the chunk plan's boundaries, evenly spaced (pure)."""
    step = -(-(len(boundaries) + 1) // max_ranges)  # ceil: ranges = boundaries + 1
    return list(boundaries[step - 1::step]) if step > 1 else list(boundaries)


def ranges_that_differ(source: dict[int, tuple[int, int]], silver: dict[int, tuple[int, int]]) -> list[int]:
    """Range indexes whose (rows, checksum) differ between the sides; a range one side lacks differs (pure)."""
    return sorted(i for i in source.keys() | silver.keys() if source.get(i, (0, 0)) != silver.get(i, (0, 0)))


def group_by_range(differences: Iterable[tuple[int, Key, str]], boundaries: Sequence[Key]) -> list[RangeDiff]:
    """Differing keys (range index, key, 'missing'/'extra'/'different') counted per range, in one pass
    that keeps only the smallest few keys of each (pure)."""
    edges: list[Key | None] = [None, *boundaries, None]
    counts: dict[int, dict[str, int]] = {}
    samples: dict[int, list] = {}
    for index, key, kind in differences:
        tally = counts.setdefault(index, {"missing": 0, "extra": 0, "different": 0})
        tally[kind] += 1
        heap = samples.setdefault(index, [])  # a max-heap of the smallest keys, by negated rank
        item = _Desc(key)
        if len(heap) < MAX_REPORTED_KEYS:
            heapq.heappush(heap, item)
        elif heap[0].key > key:
            heapq.heapreplace(heap, item)
    return [RangeDiff(edges[i], edges[i + 1], c["missing"], c["extra"], c["different"],
                      tuple(sorted(d.key for d in samples[i]))) for i, c in sorted(counts.items())]


@dataclass(frozen=True)
class _Desc:
    """A key ordered backwards, so that heapq's min-heap keeps the largest of the smallest on top."""

    key: Key

    def __lt__(self, other: _Desc) -> bool:
        return self.key > other.key


# ---------------------------------------------------------------- Spark and the source

def row_hash(df, columns: Sequence[str]):
    """A 64-bit hash of the columns, nulls told apart from values (Spark's hash skips nulls)."""
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    cols = [F.col(spark_ident(c)) for c in columns]
    nulls = F.concat(*[F.when(c.isNull(), F.lit("1")).otherwise(F.lit("0")) for c in cols])
    return F.xxhash64(*cols, nulls)


def range_index(keys: Sequence[str], types: Sequence[str], boundaries: Sequence[Key]):
    """The index of the range [boundaries[i-1], boundaries[i]) holding the key, in Spark's order.

    A binary search spelled as nested CASEs, so a row costs log2(ranges)
    comparisons. Both sides go through this same expression on the same lake
    types, so they agree on every row's range whatever order the source's
    collation gave the boundaries in.
    """
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    cols = [F.col(spark_ident(k)) for k in keys]

    def less(bound: Key):  # key < bound, lexicographically
        lits = [F.lit(v).cast(t) for v, t in zip(bound, types)]
        term = cols[-1] < lits[-1]
        for c, v in zip(reversed(cols[:-1]), reversed(lits[:-1])):
            term = (c < v) | ((c == v) & term)
        return F.coalesce(term, F.lit(False))

    def search(lo: int, hi: int):  # the index lies in [lo, hi]
        if lo == hi:
            return F.lit(lo)
        mid = (lo + hi) // 2
        return F.when(less(boundaries[mid]), search(lo, mid)).otherwise(search(mid + 1, hi))

    return search(0, len(boundaries))


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


def range_sums(hashed) -> dict[int, tuple[int, int]]:
    """Per range index: rows and the sum of their hashes mod 2^64 (one small row per range to the driver)."""
    from pyspark.sql import functions as F

    rows = hashed.groupBy("_range").agg(F.count(F.lit(1)).alias("n"),
                                        F.sum(F.col("_h").cast("decimal(38,0)")).alias("s")).collect()
    return {int(r["_range"]): (int(r["n"]), int(r["s"]) % 2 ** 64) for r in rows}


def reconcile(spark, params, schema, silver_path: str, *, chunk_size: int, parallelism: int) -> Reconciliation:
    """Compare silver's live rows with the source's rows now, range checksums first, leaving out keys
    changed since silver's position."""
    from pyspark import StorageLevel
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
        chunk_plan = plan_boundaries(conn, schema, chunk_size, None)
    position = silver_position(spark, silver_path, head.basename)
    if position is None:
        raise ValueError(f"{schema.table}: silver at {silver_path} has no snapshot merged yet. "
                         "Fix: materialize the snapshot and a change batch first")
    result.compared_at = position

    silver = live_rows(spark.read.format("delta").load(silver_path))
    source = lake_columns(read_chunks_df(spark, params, schema, plan_chunks(chunk_plan), parallelism))
    columns = [lake_name(c) for c in schema.column_names]
    lake_keys = [lake_name(k) for k in keys]
    silver_types, source_types = dict(silver.dtypes), dict(source.dtypes)
    for c in columns:  # compare in silver's types; a column silver lacks compares as null
        if c in silver_types:
            source = source.withColumn(c, F.col(spark_ident(c)).cast(silver_types[c]))
        else:
            silver = silver.withColumn(c, F.lit(None).cast(source_types[c]))
    boundaries = thin_boundaries(chunk_plan)
    in_range = range_index(lake_keys, [dict(silver.dtypes)[k] for k in lake_keys], boundaries)
    hashed = [side.select(*[F.col(spark_ident(k)) for k in lake_keys], row_hash(side, columns).alias("_h"),
                          in_range.alias("_range")) for side in (source, silver)]
    # The source is read once: its hashes stay on the executors' disks for the row-by-row step.
    s = hashed[0].persist(StorageLevel.DISK_ONLY)
    t = hashed[1]
    try:
        source_sums, silver_sums = range_sums(s), range_sums(t)
        result.ranges_checked = len(boundaries) + 1
        result.source_rows = sum(n for n, _ in source_sums.values())
        result.silver_rows = sum(n for n, _ in silver_sums.values())
        result.source_checksum = sum(c for _, c in source_sums.values()) % 2 ** 64
        result.silver_checksum = sum(c for _, c in silver_sums.values()) % 2 ** 64
        differ = ranges_that_differ(source_sums, silver_sums)
        result.ranges_compared_by_row = len(differ)
        if differ:
            result.ranges, result.recently_changed = _compare_rows(params, schema, s, t, differ, boundaries, position)
    finally:
        s.unpersist()
    result.seconds = time.monotonic() - started
    return result


def _compare_rows(params, schema, s, t, differ: list[int], boundaries: list[Key], since: BinlogPosition):
    """The rows of the differing ranges joined on the key; keys the binlog changed since silver's position
    are left out. Returns the ranges that still differ and how many keys were left out."""
    from pyspark.sql import functions as F

    from ingest.lake.columns import lake_name
    from ingest.lake.tables import spark_ident
    from ingest.sources.mysql.binlog import master_position

    keys = list(schema.primary_key)
    lake_keys = [lake_name(k) for k in keys]
    with params.connect() as conn:
        now = master_position(conn)
    changed = _keys_changed(params, schema, BatchRange(since, now), keys) if now > since else set()
    picked = F.col("_range").isin(differ)
    joined = s.where(picked).alias("s").join(t.where(picked).alias("t"), on=[*lake_keys], how="full_outer")
    kind = (F.when(F.col("t._h").isNull(), "missing").when(F.col("s._h").isNull(), "extra")
            .when(F.col("s._h") != F.col("t._h"), "different"))
    rows = (joined.select(*[F.col(spark_ident(k)) for k in lake_keys],
                          F.coalesce(F.col("s._range"), F.col("t._range")).alias("_range"), kind.alias("_kind"))
            .where(F.col("_kind").isNotNull()).toLocalIterator())
    left_out = 0

    def differences():
        nonlocal left_out
        for r in rows:
            key = tuple(r[k] for k in lake_keys)
            if key in changed:
                left_out += 1
            else:
                yield int(r["_range"]), key, r["_kind"]

    ranges = group_by_range(differences(), boundaries)
    return ranges, left_out


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
        "ranges_checked": result.ranges_checked, "ranges_compared_by_row": result.ranges_compared_by_row,
        "differing_ranges": len(result.ranges),
        "differing_rows": sum(r.missing + r.extra + r.different for r in result.ranges),
        "recently_changed_keys": result.recently_changed,
        "source_checksum": str(result.source_checksum), "silver_checksum": str(result.silver_checksum),
        "compared_at": result.compared_at.to_metadata() if result.compared_at else None,
        "seconds": round(result.seconds, 2),
        "ranges": [r.describe() for r in result.ranges[:20]],
    }
