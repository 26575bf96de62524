"""Parallel Scan against a single-segment Scan of the same DynamoDB table, in one run.

Starts its own moto server, loads N items (default 50,000), then snapshots the
table into Delta twice with the project's scan (ScanSnapshotWrite): once with
one segment, once with 4 segments read by 2 Spark tasks at a time. A warm-up
snapshot first keeps JVM and Python-worker start-up out of both figures.

    .venv/bin/python bench/dynamodb_scan.py [--items 50000] [--json out.json]

Prints: `<name>: ours <value> <unit>, baseline <name> <value> <unit>, ratio <ours/baseline>`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load(client, table: str, items: int) -> None:
    for start in range(0, items, 25):
        client.batch_write_item(RequestItems={table: [
            {"PutRequest": {"Item": {"id": {"S": f"item-{i:08d}"}, "n": {"N": str(i)}, "s": {"S": "x" * 40},
                                     "tags": {"SS": ["a", "b"]}, "m": {"M": {"k": {"N": str(i % 97)}}}}}}
            for i in range(start, min(start + 25, items))]})


def raw_scan(client, table: str, segments: int, threads: int) -> float:
    """Seconds for bare boto3 Scan loops over `segments` segments on `threads` threads (nothing done per item)."""
    import concurrent.futures

    def one(segment: int) -> int:
        kwargs = {"TableName": table, "Segment": segment, "TotalSegments": segments}
        n = 0
        while True:
            page = client.scan(**kwargs)
            n += len(page["Items"])
            if "LastEvaluatedKey" not in page:
                return n
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        sum(pool.map(one, range(segments)))
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import boto3

    from ingest.lake.spark import build_spark_session
    from ingest.localdev.moto import LOCAL_CREDENTIALS, MotoServer
    from ingest.sources.dynamodb.client import ClientSettings
    from ingest.sources.dynamodb.scan import ScanSnapshotWrite
    from ingest_tests.conftest import free_port

    os.environ.update(LOCAL_CREDENTIALS)
    moto = MotoServer(free_port()).start()
    lake = Path(tempfile.mkdtemp(prefix="bench-ddb-"))
    try:
        client = boto3.client("dynamodb", endpoint_url=moto.endpoint_url, region_name="us-east-1")
        client.create_table(TableName="bench", KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST",
                            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
        t0 = time.monotonic()
        load(client, "bench", args.items)
        print(f"loaded {args.items} items in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        spark = build_spark_session("local[2]", "bench-dynamodb", {"spark.sql.shuffle.partitions": "2"})
        spark.sparkContext.setLogLevel("ERROR")
        settings = ClientSettings("us-east-1", moto.endpoint_url, "local", "local")
        quiet = lambda msg: None  # noqa: E731

        def snapshot(segments: int, parallelism: int, path: str) -> float:
            write = ScanSnapshotWrite("bench", "bench", settings, {"n": "bigint"}, segments, parallelism,
                                      segments, False, None)
            started = time.monotonic()
            meta = write.apply(spark, str(lake / path), quiet)
            seconds = time.monotonic() - started
            assert meta["rows"] == args.items, meta
            return seconds

        snapshot(2, 2, "warmup")
        single = snapshot(1, 1, "single")
        parallel = snapshot(4, 2, "parallel")
        ours, base = args.items / parallel, args.items / single
        line = (f"dynamodb_scan_{args.items // 1000}k: ours {ours:,.0f} items/s (4 segments, 2 at a time, "
                f"{parallel:.1f} s), baseline single_segment_scan {base:,.0f} items/s ({single:.1f} s), "
                f"ratio {ours / base:.2f}")
        print(line)
        raw_single, raw_parallel = raw_scan(client, "bench", 1, 1), raw_scan(client, "bench", 4, 2)
        print(f"dynamodb_scan_limit_{args.items // 1000}k: ours {ours:,.0f} items/s, baseline raw_boto3_scan "
              f"{args.items / raw_single:,.0f} items/s (4 segments on 2 threads: {args.items / raw_parallel:,.0f} "
              f"items/s), ratio {ours / (args.items / raw_single):.2f}")
        if args.json:
            args.json.write_text(json.dumps({
                "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                            "platform": platform.platform()},
                "results": [{"name": "dynamodb_scan", "items": args.items, "ours_items_per_s": ours,
                             "baseline": "single_segment_scan", "baseline_items_per_s": base,
                             "ratio": ours / base, "raw_boto3_single_items_per_s": args.items / raw_single,
                             "raw_boto3_4_segments_2_threads_items_per_s": args.items / raw_parallel}]}, indent=2))
        spark.stop()
    finally:
        moto.stop()
        shutil.rmtree(lake, ignore_errors=True)


if __name__ == "__main__":
    main()
