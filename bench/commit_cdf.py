"""What silver's change data feed costs a small batch's merge (issue 50 against issue 46).

Silver and history record Delta's change data feed unless a table opts out (`without_change_feed`,
`Layout.change_feed`): a MERGE that updates rows also writes their before and after images to
`_change_data` files. One Spark Connect server, two 1,000-row tables, one with the feed and one opted
out of it; in alternating rounds each gets the project's ordered merge of 5 rows
(3 updates, 2 inserts) 15 times, and the server's CPU per merge is printed against the table without
the feed, measured in the same run:

    .venv/bin/python bench/commit_cdf.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu import tree  # noqa: E402

ROUNDS, MERGES = 4, 15
SCHEMA = "id bigint, v string, _pos decimal(38,0), _deleted boolean"


def main() -> None:
    from pyspark.sql import SparkSession

    from ingest.lake import connect
    from ingest.lake.commits import Txn
    from ingest.lake.merge import Layout, ordered_merge

    folder = Path(tempfile.mkdtemp())
    state = connect.start_local(folder)
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
    try:
        paths = {"with_feed": str(folder / "feed"), "without_feed": str(folder / "plain")}
        layouts = {"with_feed": Layout(), "without_feed": Layout(change_feed=False)}
        base = spark.createDataFrame([(i, "a", Decimal(1), False) for i in range(1000)], SCHEMA)
        for label, path in paths.items():
            ordered_merge(spark, path, base, ["id"], {"kind": "silver"}, Txn(label, 0), layout=layouts[label])
        cpu = {k: 0.0 for k in paths}
        n = 0
        for round_no in range(ROUNDS):
            for label, path in paths.items():
                before = sum(tree([state.pid]).values())
                for i in range(MERGES):
                    n_pos = 10 + round_no * MERGES + i
                    rows = [(k, f"r{n_pos}", Decimal(n_pos), False) for k in (i, i + 100, i + 200, 5000 + n_pos,
                                                                               6000 + n_pos)]
                    ordered_merge(spark, path, spark.createDataFrame(rows, SCHEMA), ["id"], {"kind": "silver"},
                                  Txn(label, 1 + round_no * MERGES + i), layout=layouts[label])
                cpu[label] += sum(tree([state.pid]).values()) - before
            n += MERGES
        ours, baseline = cpu["with_feed"] / n, cpu["without_feed"] / n
        print(f"merge_cpu_with_change_feed: {ours:.3f} CPU-s per merge, baseline merge_cpu_without_change_feed "
              f"{baseline:.3f} CPU-s, ratio {ours / baseline:.2f}", flush=True)
    finally:
        spark.stop()
        os.kill(state.pid, 15)
        time.sleep(3)


if __name__ == "__main__":
    main()
