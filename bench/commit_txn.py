"""Server CPU and wall time of a small append with Delta's idempotent transaction id, against the same
append without one (docs/performance.md).

Every commit of ours carries `txnAppId` / `txnVersion` (lake/commits.py), so that a repeated write is a
no-op. Delta 4.4 answers "was this id committed?" from the table's computed state
(`Snapshot.transactions`), which it builds with a Spark job over the log (checkpoint and newer
commits) for each new version of the table: after every commit. Without the id, a blind append
needs no state. One server, one 1,000-row table, 5-row appends alternating with and without an id
(a new one each time, as each batch has), the first rounds left out as warm-up:

    .venv/bin/python bench/commit_txn.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu import tree  # noqa: E402

COMMITS = 30
WARM_UP = 5


def main() -> None:
    from pyspark.sql import SparkSession

    from ingest.lake import connect

    folder = Path(tempfile.mkdtemp())
    state = connect.start_local(folder)
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
    path = str(folder / "t")
    figures: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        spark.range(1000).selectExpr("id", "'a' v").write.format("delta").save(path)
        for i in range(2 * (COMMITS + WARM_UP)):
            with_id = i % 2 == 1
            writer = spark.range(5).selectExpr(f"id + {1000 + i * 5} AS id", "'y' v").write.format("delta")
            writer = writer.mode("append")
            if with_id:
                writer = writer.option("txnAppId", f"bronze:bench:{i}").option("txnVersion", 0)
            cpu, wall = sum(tree([state.pid]).values()), time.perf_counter()
            writer.save(path)
            if i >= 2 * WARM_UP:
                figures[with_id].append((sum(tree([state.pid]).values()) - cpu, time.perf_counter() - wall))
    finally:
        spark.stop()
        connect.stop_local(folder)
    (cpu_id, wall_id), (cpu_plain, wall_plain) = ((statistics.mean(c for c, _ in figures[k]),
                                                   statistics.mean(w for _, w in figures[k])) for k in (True, False))
    print(f"append_with_txn_id_cpu: {cpu_id:.3f} CPU-s, baseline append without {cpu_plain:.3f} CPU-s, "
          f"ratio {cpu_id / cpu_plain:.2f}", flush=True)
    print(f"append_with_txn_id_wall: {wall_id:.3f} s, baseline append without {wall_plain:.3f} s, "
          f"ratio {wall_id / wall_plain:.2f}", flush=True)


if __name__ == "__main__":
    main()
