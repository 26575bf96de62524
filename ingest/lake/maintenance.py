"""Keeping Delta tables fast to read and cheap to store over months: compaction, vacuum, retention.

A sensor batch every few seconds leaves many small files and log entries per table. The
maintenance job, on a schedule, runs for each lake table:

1. its retention properties, set once (a property change is a metadata commit, which would
   conflict with concurrent writers if made every time): `delta.setTransactionRetentionDuration`
   expires the idempotent txn ids (else every snapshot of the log carries all of them forever);
   `delta.logRetentionDuration` keeps the log, and with it our commit metadata, at least as long;
   `delta.deletedFileRetentionDuration` is what VACUUM keeps;
2. OPTIMIZE (bin-packing compaction): files under 1 MiB become files of up to 32 MiB (`compact`);
3. for a table merged by key (silver), OPTIMIZE ZORDER BY its first key when its files are out of key
   order (`recluster`);
4. VACUUM with the retention the user sets.

A write that loses a commit race to OPTIMIZE is retried by the writer (see lake/write.py), and
OPTIMIZE is retried the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# Delta refuses a VACUUM that keeps less than this unless told it is safe (readers of older
# versions, and writers that started before, may still need those files).
DELTA_SAFE_RETAIN_HOURS = 168


# OPTIMIZE compacts files smaller than COMPACT_BELOW into files of at most COMPACT_UP_TO (Delta's defaults:
# 1 GiB for both). With those defaults a 10M-row silver became one file, which every batch then rewrote
# whole. Silver is written in key order, in files of a narrow key range (merge.SILVER_FILE_ROWS: 1M rows of
# a narrow table took 5.7 MB), and a batch at clustered keys rewrites one or two of them; compaction leaves
# them apart. What it joins are a sensor batch's small appends and merges (kilobytes each).
COMPACT_BELOW = 2**20
COMPACT_UP_TO = 32 * 2**20

# Silver is put back in key order when a batch of one key would rewrite, on average, more than this many
# of silver's files (merge.SILVER_FILE_ROWS rows each). A merge that inserts rows, with a batch too large
# to broadcast (or on a server without the project's jvm/src MergeBroadcastJoin), writes its output in the
# hash order of its join (a full outer join, shuffled by key), so one batch at random keys leaves every
# file it rewrote spanning the whole key range: a 10M-row silver of 12 key-range files became 4 such
# files, and every later batch, even one at the newest keys, then rewrote all 10M rows. A table laid out
# before silver's key-range files (one file, or files in hash order) is put in order the same way.
RECLUSTER_FILES = 2
# Keys drawn from the table to measure that (each checked against every file's key range).
SAMPLE_KEYS = 5_000


@dataclass(frozen=True)
class Retention:
    txn_days: int = 30
    """How long Delta keeps an idempotent txn id: a batch re-run within it is skipped by Delta itself."""
    vacuum_hours: int = DELTA_SAFE_RETAIN_HOURS
    """How long VACUUM keeps files a newer version no longer uses (time travel back that far)."""

    def properties(self) -> dict[str, str]:
        """The table properties this retention sets (pure). The log is kept at least as long as txn ids
        (the commit metadata the batches look up lives there)."""
        log_days = max(self.txn_days, 30)
        return {"delta.setTransactionRetentionDuration": f"interval {self.txn_days} days",
                "delta.logRetentionDuration": f"interval {log_days} days",
                "delta.deletedFileRetentionDuration": f"interval {self.vacuum_hours} hours"}


def maintain(spark, path: str, retention: Retention, log: Callable[[str], None]) -> dict[str, Any]:
    """Retention properties, OPTIMIZE and VACUUM on the Delta table at `path`; what each did."""
    from ingest.lake.deltalog import is_delta_table, table_size
    from ingest.lake.merge import CHANGE_DATA_FEED, Layout, delta_path, properties_of, set_properties
    from ingest.lake.tables import HISTORY, SILVER
    from ingest.lake.write import session_conf

    if not is_delta_table(path):
        return {"path": path, "exists": False}
    table = delta_path(path)

    # Files and properties from the newest commit's checksum file where it has one: a lake of many
    # tables that did not change since the last run pays a file read for them, not a Spark query.
    def files() -> int:
        size = table_size(path)
        return size[1] if size else int(spark.sql(f"DESCRIBE DETAIL {table}").select("numFiles").first()[0])

    have = properties_of(spark, path)
    want = retention.properties()
    # tables made before silver recorded the feed; one opted out of it says false (see Layout)
    if path.rstrip("/").rsplit("/", 1)[-1] in (SILVER, HISTORY) and CHANGE_DATA_FEED not in have:
        want |= Layout().wanted(spark.read.format("delta").load(path).columns)
    changed = set_properties(spark, path, want, have, "retention properties")
    if changed:
        log(f"{path}: set {', '.join(changed)}")
    before = files()
    if before > 1:  # one file has nothing to be compacted with
        compact(spark, path)
    keys = merge_keys(path)
    reclustered = bool(keys) and recluster(spark, path, keys[0], log)
    compacted = files() if before > 1 or reclustered else before
    unsafe = retention.vacuum_hours < DELTA_SAFE_RETAIN_HOURS
    # where the user asked for it (sources.yaml), past Delta's own guard, which would refuse
    guard = {"spark.databricks.delta.retentionDurationCheck.enabled": "false"} if unsafe else {}
    with session_conf(spark, guard):
        spark.sql(f"VACUUM {table} RETAIN {retention.vacuum_hours} HOURS").collect()
    log(f"{path}: {before} files, {compacted} after OPTIMIZE; VACUUM kept {retention.vacuum_hours} h")
    return {"path": path, "exists": True, "files_before": before, "files_after": compacted,
            "reclustered": reclustered, "properties_set": sorted(changed)}


def compact(spark, path: str, below: int = COMPACT_BELOW, up_to: int = COMPACT_UP_TO) -> None:
    """OPTIMIZE the Delta table at `path`: its files under `below` bytes become files of at most `up_to`
    (session settings for this command only: the session may be a leased one that others reuse)."""
    from ingest.lake.merge import delta_path
    from ingest.lake.write import retry_conflicts, session_conf

    sizes = {"spark.databricks.delta.optimize.minFileSize": str(below),
             "spark.databricks.delta.optimize.maxFileSize": str(up_to)}
    with session_conf(spark, sizes):
        retry_conflicts(lambda: spark.sql(f"OPTIMIZE {delta_path(path)}").collect(), f"{path}: OPTIMIZE")


def merge_keys(path: str) -> list[str] | None:
    """The key columns the table's newest commit of ours merged by (None: not a merged table, or its
    newest merge predates commits naming them)."""
    from ingest.lake.deltalog import our_commits
    from ingest.lake.merge import MERGE_KEYS

    newest = next(our_commits(path), None)  # only the newest: a bronze log holds a commit per batch
    return newest.metadata.get(MERGE_KEYS) if newest else None


def rows_rewritten_per_key(ranges: Iterable[tuple[Any, Any, int]], sample: Iterable[Any]) -> float:
    """How many rows a copy-on-write merge of one key rewrites, on average over the keys in `sample`
    (pure): the rows of every file whose key range [lo, hi] holds the key. In key order that is one
    file's rows (two where neighbours share a key at their ends, as Delta's ZORDER leaves them); in a
    merge's hash order, the rows of every file it wrote. `ranges`: each file's (lo, hi, rows)."""
    from bisect import bisect_right

    files = sorted((lo, hi, rows) for lo, hi, rows in ranges if rows > 0 and lo is not None)
    keys = [k for k in sample if k is not None]
    if not files or not keys:
        return 0.0
    starts = [lo for lo, _, _ in files]
    return sum(sum(rows for _, hi, rows in files[:bisect_right(starts, k)] if hi >= k) for k in keys) / len(keys)


def key_ranges(spark, path: str, key: str) -> list[tuple[Any, Any, int]]:
    """Each data file's smallest and largest `key` and its rows (reads the key column alone)."""
    from ingest.lake.merge import delta_path
    from ingest.lake.tables import spark_ident

    k = spark_ident(key)
    rows = spark.sql(f"SELECT min({k}) AS lo, max({k}) AS hi, count(*) AS n FROM {delta_path(path)} "
                     "GROUP BY _metadata.file_path").collect()
    return [(r["lo"], r["hi"], r["n"]) for r in rows]


def key_sample(spark, path: str, key: str, rows: int, size: int = SAMPLE_KEYS) -> list[Any]:
    """About `size` of the table's `key` values, drawn at random (all of them in a smaller table)."""
    from ingest.lake.merge import delta_path
    from ingest.lake.tables import spark_ident

    percent = min(100.0, 100.0 * size / max(rows, 1))
    sample = f" TABLESAMPLE ({percent:.6f} PERCENT)" if percent < 100 else ""
    return [r[0] for r in spark.sql(f"SELECT {spark_ident(key)} FROM {delta_path(path)}{sample}").collect()]


def recluster(spark, path: str, key: str, log: Callable[[str], None], rows_per_file: int | None = None) -> bool:
    """Put the table at `path` back in `key` order when a batch of one key rewrites more than RECLUSTER_FILES
    files' worth of rows (`rows_rewritten_per_key`, over a sample of the table's keys):
    OPTIMIZE ZORDER BY the key, which for one column range-partitions the rows by it, into files of
    about `rows_per_file` rows (merge.SILVER_FILE_ROWS). Whether it did. A composite key's first column
    orders it: rows of one first value stay together."""
    from ingest.lake.merge import SILVER_FILE_ROWS, delta_path
    from ingest.lake.tables import spark_ident
    from ingest.lake.write import retry_conflicts, session_conf

    rows_per_file = rows_per_file or SILVER_FILE_ROWS
    ranges = key_ranges(spark, path, key)
    rows = sum(n for *_, n in ranges)
    if rows <= RECLUSTER_FILES * rows_per_file:
        return False  # no batch into it can rewrite more than that: no need to sample its keys
    rewritten = rows_rewritten_per_key(ranges, key_sample(spark, path, key, rows))
    if rewritten <= RECLUSTER_FILES * rows_per_file:
        return False
    size = int(spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first()["sizeInBytes"])
    settings = {"spark.databricks.delta.optimize.maxFileSize": str(max(1, size * rows_per_file // rows)),
                # the key's order is the point even where Delta keeps no statistics on it (past column 32)
                "spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled": "false"}
    with session_conf(spark, settings):
        retry_conflicts(lambda: spark.sql(f"OPTIMIZE {delta_path(path)} ZORDER BY ({spark_ident(key)})").collect(),
                        f"{path}: OPTIMIZE ZORDER BY {key}")
    log(f"{path}: a batch of one {key} would rewrite {rewritten:,.0f} of {rows:,} rows on average; "
        f"re-clustered by {key}")
    return True
