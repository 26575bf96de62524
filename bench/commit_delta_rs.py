"""What a small commit costs through delta-rs in the committing process, against Spark's Delta writer
(issue 46: a design question, not a path the project takes).

The same loop as bench/commit_zone.py (append and MERGE of 5 rows into a 1,000-row table, 30 of
each), once through the project's Spark Connect server (the server's CPU per commit) and once with
`deltalake` (delta-rs) in this process (this process's CPU per commit), then a check that the two
writers can share a table: delta-rs commits with the project's typed columns, a `userMetadata` and
an idempotent transaction (`txnAppId`/`txnVersion`) that Spark reads and honours.

    .venv/bin/python bench/commit_delta_rs.py
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.commit_zone import COMMITS, per_commit  # noqa: E402


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def delta_rs_per_commit() -> float:
    """This process's CPU-seconds per commit through delta-rs."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = str(Path(tempfile.mkdtemp()) / "t")

    def rows(ids, value):
        return pa.table({"id": pa.array(ids, pa.int64()), "v": [value] * len(ids)})

    write_deltalake(path, rows(list(range(1000)), "a"))
    for i in range(5):  # warm up
        write_deltalake(path, rows([i * 10 + 5000 + k for k in range(5)], "w"), mode="append")
    before = _cpu()
    for i in range(COMMITS):
        write_deltalake(path, rows([i * 10 + 100 + k for k in range(5)], "y"), mode="append")
        (DeltaTable(path).merge(rows(list(range(i, i + 5)), "z"), "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    return (_cpu() - before) / (2 * COMMITS)


def shared_table() -> str:
    """A Spark-made table with the lake's types, appended and merged by delta-rs with a commit record and
    a transaction, then written by Spark with the same transaction: what Spark sees."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from pyspark.sql import SparkSession

    from ingest.lake import connect

    folder = Path(tempfile.mkdtemp())
    path = str(folder / "t")
    state = connect.start_local(folder / "spark")
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
    try:
        spark.sql("SELECT 1 AS id, CAST(1.50 AS DECIMAL(12,2)) AS amount, TIMESTAMP'2026-01-01 00:00:00' AS at, "
                  "array('a') AS tags, X'01' AS raw, CAST(10 AS DECIMAL(38,0)) AS _pos, false AS _deleted"
                  ).write.format("delta").save(path)
        schema = pa.schema(DeltaTable(path).schema().to_arrow())
        row = {"at": None, "tags": ["c"], "raw": b"\x03", "_deleted": False}
        write_deltalake(path, pa.Table.from_pylist([{**row, "id": 2, "amount": Decimal("2.25"), "_pos": Decimal(20)}],
                                                   schema=schema), mode="append",
                        commit_properties=CommitProperties(custom_metadata={"userMetadata": json.dumps({"batch": 1})},
                                                           app_transactions=[Transaction(app_id="src.t", version=1)]))
        (DeltaTable(path).merge(pa.Table.from_pylist([{**row, "id": 1, "amount": Decimal("9.99"), "_pos": Decimal(30)}],
                                                     schema=schema),
                                "t.id = s.id AND s._pos > t._pos", source_alias="s", target_alias="t",
                                commit_properties=CommitProperties(
                                    custom_metadata={"userMetadata": json.dumps({"batch": 2})},
                                    app_transactions=[Transaction(app_id="src.t", version=2)]))
         .when_matched_update_all().when_not_matched_insert_all().execute())
        got = {r.id: r.amount for r in spark.read.format("delta").load(path).collect()}
        meta = [r.userMetadata for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()]
        spark.sql("SELECT 3 AS id").write.format("delta").mode("append").option("mergeSchema", "true") \
            .option("txnAppId", "src.t").option("txnVersion", "2").save(path)  # delta-rs committed 2: skipped
        after = spark.read.format("delta").load(path).count()
        return (f"Spark reads delta-rs's rows {got == {1: Decimal('9.99'), 2: Decimal('2.25')}}, its userMetadata "
                f"{meta[1:] == [json.dumps({'batch': 1}), json.dumps({'batch': 2})]}, skips a transaction delta-rs "
                f"committed {after == 2}")
    finally:
        spark.stop()
        os.kill(state.pid, 15)
        time.sleep(3)


def main() -> None:
    ours = delta_rs_per_commit()
    spark = per_commit("UTC")
    print(f"commit_cpu_delta_rs: ours {ours:.3f} CPU-s, baseline spark_connect_server {spark:.3f} CPU-s, "
          f"ratio {ours / spark:.3f}", flush=True)
    print(shared_table(), flush=True)


if __name__ == "__main__":
    main()
