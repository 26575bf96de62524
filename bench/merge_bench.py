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
table right after each merge: rewriting every file of the table with no merge (read it all, write it as a
table of its own), which a batch at random keys cannot beat, since it touches every file.

A ratio's two sides take turns (a batch into the small silver, one into the big one, its rewrite, and
again), so that both see the machine as it is then. Measured one side after the other, the same code's
`merge_vs_copy_10M` went from 1.11 to 1.30 and 1.54 within fifteen minutes, its merges' medians from
12.6 to 15.9 s (2026-12-02).

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


def _merge_once(spark, path: str, rows: int, i: int, rng: random.Random, deletion_vectors: bool,
                recent: bool = False) -> float:
    """Seconds of batch `i` of CHANGES updates: at random keys (`rng`'s), or (`recent`) at the newest keys
    not changed yet."""
    from ingest.lake.commits import Txn
    from ingest.lake.merge import Layout, ordered_merge

    keys = list(range(rows - CHANGES * (i + 1), rows - CHANGES * i)) if recent else rng.sample(range(rows), CHANGES)
    df = spark.createDataFrame([(k, -k, "changed", Decimal(10 + i), False) for k in keys],
                               "id int, v int, note string, _pos decimal(38,0), _deleted boolean")
    started = time.perf_counter()
    ordered_merge(spark, path, df, ["id"], {"kind": "silver", "bench": "merge_scaling"}, Txn("bench-merge", i),
                  expected_rows=CHANGES, layout=Layout(deletion_vectors=deletion_vectors))  # as silver passes a batch
    return time.perf_counter() - started


def _copy_seconds(spark, path: str, into: str) -> float:
    """Seconds of a rewrite of the whole table with no merge: every row of the table at `path` read and
    written again, one overwrite commit of the table at `into` (its own: the next merge finds the files
    the last one left)."""
    started = time.perf_counter()
    spark.read.format("delta").load(path).write.format("delta").mode("overwrite").save(into)
    return time.perf_counter() - started


def _scaling(spark, work: Path, label: str, dv: bool, recent: bool, small: int, big: int, target: float | None,
             log, copies: list[float] | None = None) -> Result:
    """`label`_<big>: the median batch into a silver of `big` rows against the same into `small` rows,
    the batches into the two taking turns. `copies`: gets the seconds of a rewrite of the big silver with
    no merge after each of its batches."""
    from ingest.lake.merge import SILVER_FILE_ROWS

    paths, files, times = {}, {}, {small: [], big: []}
    for rows in (small, big):  # a silver made afresh each time: random keys leave every file spanning them all
        paths[rows] = str(work / f"merge-{rows}-{'dv' if dv else 'cow'}")
        log(f"{label}: writing silver of {rows:,} rows{' with deletion vectors' if dv else ''}")
        _silver(spark, paths[rows], rows, dv)
        files[rows] = int(spark.sql(f"DESCRIBE DETAIL delta.`{paths[rows]}`").first()["numFiles"])
    rngs = {rows: random.Random(rows) for rows in (small, big)}
    for i in range(REPEATS):
        for rows in (small, big):
            times[rows].append(_merge_once(spark, paths[rows], rows, i, rngs[rows], dv, recent))
            if copies is not None and rows == big:
                copies.append(_copy_seconds(spark, paths[big], f"{paths[big]}-rewritten"))
    for rows in (small, big):
        after = int(spark.sql(f"DESCRIBE DETAIL delta.`{paths[rows]}`").first()["numFiles"])
        log(f"{label}: {CHANGES} updates at {'the newest' if recent else 'random'} keys into {rows:,} rows "
            f"({files[rows]} files): {', '.join(f'{t:.2f}' for t in times[rows])} s ({after} files after)")
    return Result(f"{label}_{_label(big)}", statistics.median(times[big]), f"same_batch_into_{small:,}_rows",
                  statistics.median(times[small]), "s", higher_is_better=False, target=target,
                  details={"changes": CHANGES, "repeats": REPEATS, "big_rows": big, "small_rows": small,
                           "deletion_vectors": dv, "keys": "newest" if recent else "random",
                           "silver_files": files, "silver_file_rows": SILVER_FILE_ROWS, "sides": "alternating"})


def _warm_up(spark, work: Path, small: int, log) -> None:
    """Untimed merges on both layouts first: on a fresh server the first merges of the small table ran
    cold (2.5-2.8 s against 1.1-1.6 s in the full run, where earlier benches had warmed it), which made
    the ratio look better than it is."""
    for dv in (False, True):
        path = str(work / f"merge-warmup-{'dv' if dv else 'cow'}")
        _silver(spark, path, small, dv)
        rng = random.Random(0)
        for i in range(REPEATS):
            _merge_once(spark, path, small, i, rng, dv)
    log("merge_scaling: warmed up (3 untimed batches into each layout)")


def merge_bench(spark, work: Path, small: int, big: int, log) -> list[Result]:
    results = []
    _warm_up(spark, work, small, log)
    for label, dv, recent in (("merge_scaling", False, False), ("merge_scaling_deletion_vectors", True, False),
                              ("merge_recent_keys", False, True)):
        copies = [] if label == "merge_scaling" else None  # its floor, on the big table each merge just rewrote
        results.append(_scaling(spark, work, label, dv, recent, small, big, None if recent else 2.0, log, copies))
        if copies:
            log(f"merge_vs_copy: rewriting the {big:,} rows with no merge, after each merge: "
                f"{', '.join(f'{t:.2f}' for t in copies)} s")
            results.append(Result(f"merge_vs_copy_{_label(big)}", results[-1].ours, "rewrite_same_files_no_merge",
                                  statistics.median(copies), "s", higher_is_better=False, target=1.5,
                                  details={"changes": CHANGES, "repeats": REPEATS, "rows": big, "keys": "random",
                                           "sides": "alternating"}))
    return results


def merge_huge_bench(spark, work: Path, small: int, big: int, log) -> list[Result]:
    """`merge_scaling_<big>` (full mode only): the same batch into a silver of `big` rows with deletion
    vectors against into `small` rows; each silver is removed once measured (100M rows take GiBs)."""
    _warm_up(spark, work, small, log)
    result = _scaling(spark, work, "merge_scaling", True, False, small, big, 3.0, log)
    for rows in (small, big):
        shutil.rmtree(work / f"merge-{rows}-dv", ignore_errors=True)
    return [result]
