"""DynamoDB benchmarks on DynamoDB Local (AWS's emulator): the scan snapshot against a single-threaded boto3 Scan loop,
reconciliation of the snapshot's silver against that snapshot, and a stream batch against a raw GetRecords loop
over the same records."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Result  # noqa: E402

ATTRIBUTES = {"n": "bigint"}


def create_table(client, name: str) -> None:
    client.create_table(TableName=name, KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST",
                        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})


def put_items(client, table: str, items: int) -> None:
    for start in range(0, items, 25):
        client.batch_write_item(RequestItems={table: [
            {"PutRequest": {"Item": {"id": {"S": f"item-{i:08d}"}, "n": {"N": str(i)}, "s": {"S": "x" * 40},
                                     "tags": {"SS": ["a", "b"]}, "m": {"M": {"k": {"N": str(i % 97)}}}}}}
            for i in range(start, min(start + 25, items))]})


def raw_scan(client, table: str) -> tuple[float, int]:
    """One thread, one segment, Scan pages until LastEvaluatedKey runs out; nothing done per item."""
    started = time.perf_counter()
    kwargs, n = {"TableName": table}, 0
    while True:
        page = client.scan(**kwargs)
        n += len(page["Items"])
        if "LastEvaluatedKey" not in page:
            return time.perf_counter() - started, n
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def raw_get_records(client, streams, table: str) -> tuple[float, int]:
    """Every shard from TRIM_HORIZON, GetRecords (Limit 1000) until a page comes back empty."""
    started = time.perf_counter()
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    n = 0
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            page = streams.get_records(ShardIterator=it, Limit=1000)
            if not page["Records"]:
                break
            n += len(page["Records"])
            it = page.get("NextShardIterator")
    return time.perf_counter() - started, n


def dynamodb_bench(spark, start_server, lake: Path, items: int, log) -> list[Result]:
    """`start_server()` starts a DynamoDB Local and returns it (`.endpoint_url`, `.stop()`): the scan and
    the stream each get their own, since one instance writes stream tables several times slower once
    it holds some 20k stream records."""
    server = start_server()
    try:
        scans = scan_bench(spark, server.endpoint_url, lake, items, log)
    finally:
        server.stop()
    server = start_server()
    try:
        return [*scans, stream_bench(spark, server.endpoint_url, lake, items, log)]
    finally:
        server.stop()


def clients(endpoint_url: str):
    import boto3

    from ingest.sources.dynamodb.client import ClientSettings

    return (boto3.client("dynamodb", endpoint_url=endpoint_url, region_name="us-east-1"),
            boto3.client("dynamodbstreams", endpoint_url=endpoint_url, region_name="us-east-1"),
            ClientSettings("us-east-1", endpoint_url, "local", "local"))


def snapshot(spark, settings, lake: Path, table: str, segments: int, parallelism: int) -> tuple[float, dict]:
    from ingest.adapters.dynamodb import ScanSnapshotWrite

    write = ScanSnapshotWrite("bench", table, settings, ATTRIBUTES, segments, parallelism, segments, False, None)
    started = time.perf_counter()
    meta = write.apply(spark, str(lake / table / "snapshot"), lambda _m: None)
    return time.perf_counter() - started, meta


def scan_bench(spark, endpoint_url: str, lake: Path, items: int, log) -> list[Result]:
    client, _, settings = clients(endpoint_url)
    # Scan: a loaded table; a warm-up snapshot first keeps JVM and Python-worker start-up out.
    create_table(client, "scan")
    put_items(client, "scan", items)
    create_table(client, "warm")
    put_items(client, "warm", 200)
    snapshot(spark, settings, lake, "warm", 2, 2)
    raw_s, n = raw_scan(client, "scan")
    assert n == items, (n, items)
    ours_s, meta = snapshot(spark, settings, lake, "scan", 4, 2)
    assert meta["rows"] == items, meta
    log(f"scan: ours {ours_s:.1f} s, raw {raw_s:.1f} s")
    return [Result(f"dynamodb_scan_{items // 1000}k", items / ours_s, "boto3_scan_loop_1_thread", items / raw_s,
                   "items/s", target=1.0,
                   details={"segments": 4, "parallelism": 2, "ours_seconds": ours_s, "raw_seconds": raw_s}),
            reconcile_bench(spark, settings, lake, "scan", items, ours_s, log, warm="warm")]


def reconcile_bench(spark, settings, lake: Path, table: str, items: int, snapshot_s: float, log, warm: str) -> Result:
    """The `reconciliation` check of the snapshot's silver (a Scan, silver's key sample, range checksums)
    against the snapshot of the same table just before: both read the whole table once. The check runs
    on the snapshotted `warm` table first, as the snapshot did, to keep its first plan's start-up out."""
    from ingest.adapters.dynamodb import reconcile
    from ingest.lake.silver import SilverFromSnapshot
    from ingest.lake.tables import LakeTable

    for name in (warm, table):
        snap, silver = str(lake / name / "snapshot"), str(lake / name / "silver")
        SilverFromSnapshot("bench", name, LakeTable(spark, snap)).apply(spark, silver, lambda _m: None)
        result = reconcile(spark, settings, "bench", name, ATTRIBUTES, silver, snap, segments=4, parallelism=2,
                           consistent_read=True, page_size=None, page_limit=1000)
        assert result.passed, result.summary()
    assert result.source_rows == items, result.summary()
    log(f"reconcile: {result.seconds:.1f} s in {result.ranges_checked} ranges, snapshot {snapshot_s:.1f} s")
    return Result(f"dynamodb_reconcile_{items // 1000}k", items / result.seconds, "scan_snapshot_same_table",
                  items / snapshot_s, "items/s", target=1.0,
                  details={"ours_seconds": result.seconds, "snapshot_seconds": snapshot_s,
                           "ranges": result.ranges_checked, "segments": 4, "parallelism": 2})


def stream_bench(spark, endpoint_url: str, lake: Path, items: int, log) -> Result:
    from ingest.adapters.dynamodb import StreamBatchWrite

    client, streams, settings = clients(endpoint_url)
    # Stream: snapshot an empty table (its positions: the stream's start), then write, then one batch.
    create_table(client, "changes")
    snapshot(spark, settings, lake, "changes", 1, 1)
    put_items(client, "changes", items)
    raw_stream_s, records = raw_get_records(client, streams, "changes")
    assert records == items, (records, items)
    batch = StreamBatchWrite("bench", "changes", "00000001", settings, ATTRIBUTES, items + 1, 1000)
    started = time.perf_counter()
    got = batch.apply(spark, str(lake / "changes" / "bronze"), lambda _m: None)
    ours_stream_s = time.perf_counter() - started
    assert got["rows"] == items, got
    log(f"stream: ours {ours_stream_s:.1f} s, raw {raw_stream_s:.1f} s")
    return Result(f"dynamodb_stream_{items // 1000}k", items / ours_stream_s, "boto3_get_records_loop",
                  items / raw_stream_s, "records/s", target=1.0,
                  details={"ours_seconds": ours_stream_s, "raw_seconds": raw_stream_s,
                           "includes": "GetRecords, decoding, bronze append"})
