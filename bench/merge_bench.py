"""What a small batch costs as silver grows: merge_scaling.

One batch of 1,000 updates at random keys, merged into silver by the silver merge's code
(`ordered_merge`) on the warm Spark Connect server, into a silver of `big` rows against the same
into `small` rows. Each silver is written as a snapshot merge writes it and compacted as the
maintenance job leaves it (OPTIMIZE); the figure is the median of 3 batches, each at new random keys.

A Delta MERGE rewrites every file holding a changed key; with random keys that is every file, so by
default the cost follows the table's size. The second line measures the same for a table opted into
deletion vectors (`tables.deletion_vectors`, `delta.enableDeletionVectors`): the merge then marks the
old rows in a vector and writes only the changed rows, and the batch's keys in its condition keep
the rest of the table out of its second join.
"""

from __future__ import annotations

import random
import statistics
import time
from decimal import Decimal
from pathlib import Path

from bench.common import Result

CHANGES = 1_000
REPEATS = 3


def _silver(spark, path: str, rows: int, deletion_vectors: bool) -> None:
    (spark.range(rows).selectExpr("CAST(id AS INT) AS id", "CAST(id AS INT) AS v", "concat('note-', id) AS note",
                                  "CAST(1 AS DECIMAL(38,0)) AS _pos", "false AS _deleted")
     .write.format("delta").mode("overwrite").save(path))
    if deletion_vectors:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')").collect()
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()


def _merge_seconds(spark, path: str, rows: int, seed: int, deletion_vectors: bool) -> list[float]:
    from ingest.lake.commits import Txn
    from ingest.lake.merge import ordered_merge

    rng = random.Random(seed)
    times = []
    for i in range(REPEATS):
        keys = rng.sample(range(rows), CHANGES)
        df = spark.createDataFrame([(k, -k, "changed", Decimal(10 + i), False) for k in keys],
                                   "id int, v int, note string, _pos decimal(38,0), _deleted boolean")
        started = time.perf_counter()
        ordered_merge(spark, path, df, ["id"], {"kind": "silver", "bench": "merge_scaling"}, Txn("bench-merge", i),
                      expected_rows=CHANGES, deletion_vectors=deletion_vectors)  # as silver passes a batch
        times.append(time.perf_counter() - started)
    return times


def merge_bench(spark, work: Path, small: int, big: int, log) -> list[Result]:
    results = []
    for dv in (False, True):
        seconds = {}
        for rows in (small, big):
            path = str(work / f"merge-{rows}-{'dv' if dv else 'cow'}")
            log(f"merge_scaling: writing silver of {rows:,} rows{' with deletion vectors' if dv else ''}")
            _silver(spark, path, rows, dv)
            times = _merge_seconds(spark, path, rows, seed=rows, deletion_vectors=dv)
            files = int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"])
            seconds[rows] = statistics.median(times)
            log(f"merge_scaling: {CHANGES} updates into {rows:,} rows: {', '.join(f'{t:.2f}' for t in times)} s "
                f"({files} files after)")
        name = f"merge_scaling{'_deletion_vectors' if dv else ''}_{big // 1_000_000 or big}{'M' if big >= 1e6 else ''}"
        results.append(Result(name, seconds[big], f"same_batch_into_{small:,}_rows", seconds[small], "s",
                              higher_is_better=False, target=2.0,
                              details={"changes": CHANGES, "repeats": REPEATS, "big_rows": big, "small_rows": small,
                                       "deletion_vectors": dv}))
    return results
