"""One snapshot in a fresh process (its own Spark Connect server), for the memory benchmark.

    python bench/snapshot_child.py PORT TABLE LAKE_PATH CHUNK_SIZE PARALLELISM CHUNKS_PER_COMMIT

Prints one JSON line: rows, seconds (from before the SparkSession to the last commit) and the server's
live heap after a full GC at the end (what the JVM still holds once the snapshot is done).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    port, table, path, chunk_size, parallelism, per_commit = sys.argv[1:7]
    from bench.mysql_bench import DATABASE, PASSWORD, our_snapshot
    from ingest.lake.spark import spark_session
    from ingest.sources.mysql.schema import ConnectionParams

    from bench.common import jvm_live_heap_bytes
    from ingest.lake.connect import read_state, stop_local

    started = time.perf_counter()
    try:
        spark = spark_session()
        params = ConnectionParams("127.0.0.1", int(port), "bench", PASSWORD, DATABASE, 30)
        _, rows = our_snapshot(spark, params, table, path, int(chunk_size), int(parallelism), int(per_commit))
        seconds = time.perf_counter() - started
        server = read_state()
        live = jvm_live_heap_bytes(server.pid) if server else None
        print(json.dumps({"rows": rows, "seconds": seconds, "live_heap_mib": live and round(live / 2**20)}))
    finally:
        stop_local()  # the server this process started (INGEST_SPARK_STATE_DIR is its own)


if __name__ == "__main__":
    main()
