"""Runs one snapshot in its own process, so a test can kill it with SIGKILL.

    python -m ingest_tests.integration.snapshot_worker '<json: params, table, path, settings>'
"""

import json
import sys

from ingest.lake.spark import build_spark_session
from ingest.sources.mysql.schema import ConnectionParams, describe_table
from ingest.sources.mysql.snapshot import run_snapshot


def main() -> None:
    args = json.loads(sys.argv[1])
    params = ConnectionParams(**args["params"])
    spark = build_spark_session("local[2]", "snapshot-worker", {"spark.sql.shuffle.partitions": "2"})
    with params.connect() as conn:
        schema = describe_table(conn, params.database, args["table"])
    run_snapshot(spark, params, schema, args["path"], source="test", log=lambda m: print(m, flush=True),
                 **args["settings"])


if __name__ == "__main__":
    main()
