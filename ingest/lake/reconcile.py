"""Reconciliation: does silver hold what the source holds? (the comparison, for any source)

In the manner of pt-table-checksum: both sides are cut into the same
primary-key ranges, each range gets a row count and a checksum (the sum of a
64-bit hash per row), and only the ranges whose counts or checksums differ are
compared row by row. A table that matches is read once on each side; when a
range differs, the source is read again and its rows in the differing ranges
kept on the Spark side's disk for the row-by-row step (keeping every row's
hash from the first read cost a tenth of every check, for the rare one that
differs). Nothing per row reaches the client except the keys that differ,
streamed and counted. The source read is newer than silver, so the caller says
which keys changed after the position silver has merged up to: those are the
next batch's business, not a divergence. A mismatch names its key ranges and a
few keys in each, so it says where to look and what to re-snapshot.

The source side (its rows as a DataFrame, its key ranges, the keys changed
since a position) comes from the caller: see ingest/reconcile.py for MySQL.
A source with no key order of its own (DynamoDB's Scan) takes its ranges from
a sample of silver's keys (`sampled_boundaries`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Key = tuple[Any, ...]

MAX_REPORTED_KEYS = 5
MAX_RANGES = 1024
"""Checksummed ranges per table: the range expression stays small; a mismatch re-reads one range's rows."""
ROWS_PER_SAMPLED_RANGE = 10_000
"""Rows per range where the ranges come from a sample of silver's keys: a range that differs is compared
row by row, so ranges of this size keep that step small."""
SAMPLE_PER_RANGE = 16
"""Sampled keys per range: enough that the ranges come out of about equal size."""


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
    compared_at: Any = None
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
            ranges = f"{self.ranges_checked} key range{'' if self.ranges_checked == 1 else 's'}"
            return (f"{self.table}: silver matches the source ({self.source_rows} rows in {ranges}; "
                    f"{self.recently_changed} keys changed since {self.compared_at} left to the next batch)")
        return (f"{self.table}: silver differs from the source in {len(self.ranges)} key range(s): "
                + "; ".join(r.describe() for r in self.ranges)
                + ". Fix: re-snapshot the table (materialize its snapshot asset, then a change batch)")


# ---------------------------------------------------------------- pure

def thin_boundaries(boundaries: Sequence[Key], max_ranges: int = MAX_RANGES) -> list[Key]:
    """At most `max_ranges - 1` of the chunk plan's boundaries, evenly spaced (pure)."""
    step = -(-(len(boundaries) + 1) // max_ranges)  # ceil: ranges = boundaries + 1
    return list(boundaries[step - 1::step]) if step > 1 else list(boundaries)


def evenly_spaced(ordered: Sequence[Key], ranges: int) -> list[Key]:
    """`ranges - 1` boundaries at even steps through keys in order, repeats dropped (pure)."""
    step = len(ordered) / ranges
    picked: list[Key] = []
    for i in range(1, ranges):
        key = ordered[int(i * step)]
        if not picked or picked[-1] != key:
            picked.append(key)
    return picked


def hashable(key: Sequence[Any]) -> Key:
    """A key as a tuple that can go in a set: Spark returns binary values as bytearrays (pure)."""
    return tuple(bytes(v) if isinstance(v, bytearray) else v for v in key)


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


# ---------------------------------------------------------------- Spark

def row_hash(df, columns: Sequence[str]):
    """A 64-bit hash of the columns, nulls told apart from values (Spark's hash skips nulls)."""
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    cols = [F.col(spark_ident(c)) for c in columns]
    return F.xxhash64(*cols, *[c.isNull() for c in cols])


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


def sampled_boundaries(df, keys: Sequence[str], rows_per_range: int = ROWS_PER_SAMPLED_RANGE,
                       max_ranges: int = MAX_RANGES) -> list[Key]:
    """Range boundaries for a source without a chunk plan: keys at even steps through a sample of `df`'s
    keys (a primary key's: never null). The keys with the smallest hashes are a uniform sample of fixed
    size, and the largest of those hashes says how many keys there are (k minimum values: a standard
    error under 1 % at this size), so one job on silver's keys sizes and cuts the ranges (a count and a
    sample were two, and took twice as long)."""
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    size = max_ranges * SAMPLE_PER_RANGE
    cols = [F.col(spark_ident(k)) for k in keys]
    sample = df.select(*cols, F.xxhash64(*cols).alias("_h")).orderBy("_h").limit(size).collect()
    rows = len(sample) if len(sample) < size else estimated_count(size, sample[-1]["_h"])
    ranges = min(max_ranges, rows // rows_per_range)
    if ranges < 2:
        return []
    # Python's order of str, decimal and bytes tuples is Spark's; were it not, the ranges would be
    # uneven, not wrong: both sides place their rows with the same expression
    return evenly_spaced(sorted(hashable([r[k] for k in keys]) for r in sample), ranges)


def estimated_count(k: int, kth_smallest_hash: int) -> int:
    """Distinct values behind `k` smallest 64-bit signed hashes, the largest of them given (pure)."""
    return int((k - 1) / ((kth_smallest_hash + 2 ** 63 + 1) / 2 ** 64))


def range_sums(*sides) -> list[dict[int, tuple[int, int]]]:
    """Per side, per range index: rows and the sum of their hashes mod 2^64. One Spark job reads every
    side (their scans share the executors), and one small row per side and range reaches the client."""
    from functools import reduce

    from pyspark.sql import functions as F

    tagged = reduce(lambda a, b: a.unionByName(b),
                    [side.select(F.lit(i).alias("_side"), "_range", "_h") for i, side in enumerate(sides)])
    # the sum mod 2^64 from two sums of longs, of the hashes' high and low 32 bits: exact below 2^31 rows
    # a range, where a decimal(38,0) sum (Java's BigDecimal) made a tenth of a 10M-row check
    h = F.col("_h")
    rows = tagged.groupBy("_side", "_range").agg(
        F.count(F.lit(1)).alias("n"), F.sum(F.shiftrightunsigned(h, 32)).alias("hi"),
        F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF))).alias("lo")).collect()
    out: list[dict[int, tuple[int, int]]] = [{} for _ in sides]
    for r in rows:
        out[r["_side"]][int(r["_range"])] = (int(r["n"]), ((int(r["hi"]) << 32) + int(r["lo"])) % 2 ** 64)
    return out


def compare(source, silver, columns: Sequence[str], keys: Sequence[str], chunk_plan: Sequence[Key],
            changed_keys: Callable[[], set[Key]], result: Reconciliation) -> Reconciliation:
    """Fill `result` from the source's rows and silver's live rows (DataFrames in lake column names):
    range checksums first, then row by row in the ranges that differ, leaving out `changed_keys()`
    (called only when some range differs, once the source's rows are read again)."""
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    silver_types, source_types = dict(silver.dtypes), dict(source.dtypes)
    for c in columns:  # compare in silver's types; a column silver lacks compares as null
        if c in silver_types:
            source = source.withColumn(c, F.col(spark_ident(c)).cast(silver_types[c]))
        else:
            silver = silver.withColumn(c, F.lit(None).cast(source_types[c]))
    boundaries = thin_boundaries(chunk_plan)
    in_range = range_index(keys, [dict(silver.dtypes)[k] for k in keys], boundaries)
    hashed = [side.select(*[F.col(spark_ident(k)) for k in keys], row_hash(side, columns).alias("_h"),
                          in_range.alias("_range")) for side in (source, silver)]
    source_sums, silver_sums = range_sums(*hashed)
    result.ranges_checked = len(boundaries) + 1
    result.source_rows = sum(n for n, _ in source_sums.values())
    result.silver_rows = sum(n for n, _ in silver_sums.values())
    result.source_checksum = sum(c for _, c in source_sums.values()) % 2 ** 64
    result.silver_checksum = sum(c for _, c in silver_sums.values()) % 2 ** 64
    differ = ranges_that_differ(source_sums, silver_sums)
    result.ranges_compared_by_row = len(differ)
    if differ:
        result.ranges, result.recently_changed = _compare_rows(*hashed, differ, boundaries, keys, changed_keys)
    return result


def _compare_rows(source, silver, differ: list[int], boundaries: list[Key], keys: Sequence[str],
                  changed_keys: Callable[[], set[Key]]):
    """The rows of the differing ranges joined on the key, less the keys changed since silver's position.
    Returns the ranges that still differ and how many keys were left out."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    picked = F.col("_range").isin(differ)
    # the source's rows of those ranges, read again and held on the executors' disks before the change
    # log (binlog, slot) is asked what changed: so every change between silver's position and this read
    # is in `changed`
    s = source.where(picked).persist(StorageLevel.DISK_ONLY)
    try:
        s.count()
        changed = changed_keys()
        joined = s.alias("s").join(silver.where(picked).alias("t"), on=list(keys), how="full_outer")
        kind = (F.when(F.col("t._h").isNull(), "missing").when(F.col("s._h").isNull(), "extra")
                .when(F.col("s._h") != F.col("t._h"), "different"))
        rows = (joined.select(*[F.col(spark_ident(k)) for k in keys],
                              F.coalesce(F.col("s._range"), F.col("t._range")).alias("_range"), kind.alias("_kind"))
                .where(F.col("_kind").isNotNull()).toLocalIterator())
        left_out = 0

        def differences():
            nonlocal left_out
            for r in rows:
                key = hashable([r[k] for k in keys])
                if key in changed:
                    left_out += 1
                else:
                    yield int(r["_range"]), key, r["_kind"]

        return group_by_range(differences(), boundaries), left_out
    finally:
        s.unpersist()


def reconciliation_metadata(result: Reconciliation) -> dict[str, Any]:
    return {
        "source_rows": result.source_rows, "silver_rows": result.silver_rows,
        "ranges_checked": result.ranges_checked, "ranges_compared_by_row": result.ranges_compared_by_row,
        "differing_ranges": len(result.ranges),
        "differing_rows": sum(r.missing + r.extra + r.different for r in result.ranges),
        "recently_changed_keys": result.recently_changed,
        "source_checksum": str(result.source_checksum), "silver_checksum": str(result.silver_checksum),
        "compared_at": str(result.compared_at) if result.compared_at is not None else None,
        "seconds": round(result.seconds, 2),
        "ranges": [r.describe() for r in result.ranges[:20]],
    }
