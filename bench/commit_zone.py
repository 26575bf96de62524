"""Server CPU of small Delta commits by the JVM's time zone (docs/performance.md, issue 46).

Delta 4.4 rebuilds a table's whole state after every commit when the session's, the JVM's or
`user.timezone`'s zone is not UTC (`allFilesInCrc.verificationMode.forceOnNonUTC.enabled`). The
project's session zone is UTC; the JVM's follows the machine. Each round starts its own Spark
Connect server with TZ set, appends and merges 5 rows into a 1,000-row table 30 times each, and
prints the server's CPU per commit against the UTC server's in the same run:

    .venv/bin/python bench/commit_zone.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu import tree  # noqa: E402

COMMITS = 30


def per_commit(zone: str, java_options: str = "", heap: tuple[str, ...] | None = None) -> float:
    """Server CPU-seconds per commit with the JVM's default zone `zone` (and `heap`, the server's heap
    options, connect.HEAP_OPTIONS by default)."""
    from pyspark.sql import SparkSession

    from ingest.lake import connect

    folder = Path(tempfile.mkdtemp())
    os.environ["TZ"] = zone  # the server's JVM takes its default zone from it
    try:
        state = connect.start_local(folder, extra_conf={
            "spark.driver.extraJavaOptions": " ".join((*(heap or connect.HEAP_OPTIONS), java_options))})
    finally:
        os.environ.pop("TZ")
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
    path = str(folder / "t")
    try:
        spark.range(1000).selectExpr("id", "'a' v").write.format("delta").save(path)
        for i in range(5):  # warm up
            spark.range(5).selectExpr(f"id + {i * 10} AS id", "'w' v").write.format("delta").mode("append").save(path)
        before = sum(tree([state.pid]).values())
        for i in range(COMMITS):
            spark.range(5).selectExpr(f"id + {i * 10 + 100} AS id", "'y' v").write.format("delta").mode("append").save(path)
            spark.sql(f"MERGE INTO delta.`{path}` t USING (SELECT id, 'z' v FROM range({i}, {i} + 5)) s "
                      "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        return (sum(tree([state.pid]).values()) - before) / (2 * COMMITS)
    finally:
        spark.stop()
        os.kill(state.pid, 15)
        time.sleep(3)


def main() -> None:
    utc = per_commit("UTC")
    for label, zone, options in (("berlin", "Europe/Berlin", ""),
                                 ("berlin_user_timezone_utc", "Europe/Berlin", "-Duser.timezone=UTC")):
        ours = per_commit(zone, options)
        print(f"commit_cpu_{label}: ours {ours:.3f} CPU-s, baseline commit_cpu_utc {utc:.3f} CPU-s, "
              f"ratio {ours / utc:.2f}", flush=True)


if __name__ == "__main__":
    main()
