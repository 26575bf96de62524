"""What a small batch costs as silver grows: merge_scaling.

One batch of 1,000 updates at random keys, merged into silver by the silver merge's code
(`ordered_merge`) on the warm Spark Connect server, into a silver of `big` rows against the same
into `small` rows. Each silver is created as a snapshot's merge creates it (`ordered_merge`: key
order, files of at most SILVER_FILE_ROWS rows) and compacted as the maintenance job leaves it
(`compact`); the figure is the median of 3 batches, each at new random keys.

A copy-on-write MERGE rewrites every file holding a changed key; with random keys that is every file,
so by default the cost follows the table's size. The second line measures the same for a table opted
into deletion vectors (`tables.deletion_vectors`, `delta.enableDeletionVectors`): the merge then marks
the old rows in a vector and writes only the changed rows, and the batch's keys in its condition keep
the rest of the table out of its second join. The third line (no target) is copy-on-write again with
batches at the newest keys, as recent rows change in most databases: they fall in one or two of
silver's files.

`merge_vs_copy_<N>` puts the copy-on-write merge into `big` rows against its floor, measured on the same
table right after: rewriting every file of the table with no merge (read it all, overwrite it), which a
batch at random keys cannot beat, since it touches every file.

`merge_scaling_100M` (full mode only, `merge_huge_bench`): the deletion-vector line at the next size, 100M
rows against 1M.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from decimal import Decimal
from pathlib import Path

from bench.common import Result
from bench.mysql_bench import _label

CHANGES = 1_000
REPEATS = 3


def _silver(spark, path: str, rows: int, deletion_vectors: bool) -> None:
    from ingest.lake.commits import Txn
    from ingest.lake.maintenance import compact
    from ingest.lake.merge import Layout, ordered_merge

    shutil.rmtree(path, ignore_errors=True)
    rows_df = spark.range(rows).selectExpr("CAST(id AS INT) AS id", "CAST(id AS INT) AS v",
                                           "concat('note-', id) AS note", "CAST(1 AS DECIMAL(38,0)) AS _pos",
                                           "false AS _deleted")
    ordered_merge(spark, path, rows_df, ["id"], {"kind": "silver", "bench": "merge_scaling"}, Txn("bench-silver", 0),
                  layout=Layout(deletion_vectors=deletion_vectors))
    compact(spark, path)


def _merge_seconds(spark, path: str, rows: int, seed: int, deletion_vectors: bool,
                   recent: bool = False) -> list[float]:
    """Seconds of each of REPEATS batches of CHANGES updates: at random keys, or (`recent`) at the newest
    keys not changed yet."""
    from ingest.lake.commits import Txn
    from ingest.lake.merge import Layout, ordered_merge

    rng = random.Random(seed)
    times = []
    for i in range(REPEATS):
        keys = list(range(rows - CHANGES * (i + 1), rows - CHANGES * i)) if recent else rng.sample(range(rows), CHANGES)
        df = spark.createDataFrame([(k, -k, "changed", Decimal(10 + i), False) for k in keys],
                                   "id int, v int, note string, _pos decimal(38,0), _deleted boolean")
        started = time.perf_counter()
        ordered_merge(spark, path, df, ["id"], {"kind": "silver", "bench": "merge_scaling"}, Txn("bench-merge", i),
                      expected_rows=CHANGES, layout=Layout(deletion_vectors=deletion_vectors))  # as silver passes a batch
        times.append(time.perf_counter() - started)
    return times


def _copy_seconds(spark, path: str) -> list[float]:
    """Seconds of each of REPEATS rewrites of the whole table with no merge: every row read and written
    again, one overwrite commit."""
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        spark.read.format("delta").load(path).write.format("delta").mode("overwrite").save(path)
        times.append(time.perf_counter() - started)
    return times


def _scaling(spark, work: Path, label: str, dv: bool, recent: bool, small: int, big: int, target: float | None,
             log) -> Result:
    """`label`_<big>: the median batch into a silver of `big` rows against the same into `small` rows."""
    from ingest.lake.merge import SILVER_FILE_ROWS

    seconds, files = {}, {}
    for rows in (small, big):  # a silver made afresh each time: random keys leave every file spanning them all
        path = str(work / f"merge-{rows}-{'dv' if dv else 'cow'}")
        log(f"{label}: writing silver of {rows:,} rows{' with deletion vectors' if dv else ''}")
        _silver(spark, path, rows, dv)
        files[rows] = int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"])
        times = _merge_seconds(spark, path, rows, seed=rows, deletion_vectors=dv, recent=recent)
        after = int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"])
        seconds[rows] = statistics.median(times)
        log(f"{label}: {CHANGES} updates at {'the newest' if recent else 'random'} keys into {rows:,} rows "
            f"({files[rows]} files): {', '.join(f'{t:.2f}' for t in times)} s ({after} files after)")
    return Result(f"{label}_{_label(big)}", seconds[big], f"same_batch_into_{small:,}_rows", seconds[small], "s",
                  higher_is_better=False, target=target,
                  details={"changes": CHANGES, "repeats": REPEATS, "big_rows": big, "small_rows": small,
                           "deletion_vectors": dv, "keys": "newest" if recent else "random",
                           "silver_files": files, "silver_file_rows": SILVER_FILE_ROWS})


def _warm_up(spark, work: Path, small: int, log) -> None:
    """Untimed merges on both layouts first: on a fresh server the first merges of the small table ran
    cold (2.5-2.8 s against 1.1-1.6 s in the full run, where earlier benches had warmed it), which made
    the ratio look better than it is."""
    for dv in (False, True):
        path = str(work / f"merge-warmup-{'dv' if dv else 'cow'}")
        _silver(spark, path, small, dv)
        _merge_seconds(spark, path, small, seed=0, deletion_vectors=dv)
    log("merge_scaling: warmed up (3 untimed batches into each layout)")


def merge_bench(spark, work: Path, small: int, big: int, log) -> list[Result]:
    results = []
    _warm_up(spark, work, small, log)
    for label, dv, recent in (("merge_scaling", False, False), ("merge_scaling_deletion_vectors", True, False),
                              ("merge_recent_keys", False, True)):
        results.append(_scaling(spark, work, label, dv, recent, small, big, None if recent else 2.0, log))
        if label == "merge_scaling":  # its floor, on the big table the merges just rewrote
            copies = _copy_seconds(spark, str(work / f"merge-{big}-cow"))
            log(f"merge_vs_copy: rewriting the {big:,} rows with no merge: {', '.join(f'{t:.2f}' for t in copies)} s")
            results.append(Result(f"merge_vs_copy_{_label(big)}", results[-1].ours, "rewrite_same_files_no_merge",
                                  statistics.median(copies), "s", higher_is_better=False, target=1.5,
                                  details={"changes": CHANGES, "repeats": REPEATS, "rows": big, "keys": "random"}))
    return results


def merge_huge_bench(spark, work: Path, small: int, big: int, log) -> list[Result]:
    """`merge_scaling_<big>` (full mode only): the same batch into a silver of `big` rows with deletion
    vectors against into `small` rows; each silver is removed once measured (100M rows take GiBs)."""
    _warm_up(spark, work, small, log)
    result = _scaling(spark, work, "merge_scaling", True, False, small, big, 3.0, log)
    for rows in (small, big):
        shutil.rmtree(work / f"merge-{rows}-dv", ignore_errors=True)
    return [result]
