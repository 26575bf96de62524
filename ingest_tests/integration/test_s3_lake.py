"""A lake on S3 (moto's, over HTTP): a full sync through S3A, and the per-table write lock in DynamoDB
(DynamoDB Local)."""

import os
import threading
import time

import boto3
import pytest
from dagster import DagsterInstance

from ingest.lake.deltalog import last_commit
from ingest.lake.locks import LockTimeout, ensure_table, table_lock
from ingest.lake.snapshot import snapshot_positions
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def s3_harness(spark, mariadb, database: str, tmp_path, table: str, bucket: str) -> CdcHarness:
    """A harness over a MySQL source of `table` whose lake is `s3://<bucket>/lake`, with the resources the
    project's definitions build for such a lake (S3A settings, write locks)."""
    from ingest.defs.definitions import build_definitions

    sources = write_sources(tmp_path, mariadb.port, database, [table])
    harness = CdcHarness(spark, sources, tmp_path / "unused", DagsterInstance.ephemeral())
    defs = build_definitions(sources, lake_root=f"s3://{bucket}/lake")
    harness.resources = {k: v for k, v in defs.resources.items() if k in ("spark", "lake")}
    return harness


def test_a_full_sync_writes_and_reads_its_delta_tables_on_s3(aws, spark, mariadb, database, root, tmp_path):
    from ingest.lake.merge import live_rows

    bucket = f"lake-{database.replace('_', '-')}"[:60]
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    with root.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO items SELECT seq, CONCAT('v', seq) FROM seq_1_to_500")
    harness = s3_harness(spark, mariadb, database, tmp_path, "items", bucket)
    assert harness.resources["lake"].lake_root == f"s3a://{bucket}/lake"

    harness.snapshot()
    # its rows and position range from the log and ranged reads of the Parquet footers on S3
    snapshot_path = f"s3a://{bucket}/lake/src/items/snapshot"
    found = snapshot_positions(snapshot_path, last_commit(snapshot_path, kind="snapshot").metadata["snapshot_id"])
    assert found is not None and found[0] == 500 and 0 < found[1] <= found[2]
    with root.cursor() as cur:
        cur.execute("UPDATE items SET v = 'changed' WHERE id <= 10")
        cur.execute("DELETE FROM items WHERE id > 490")
        cur.execute("INSERT INTO items VALUES (1000, 'new')")
    assert harness.sync() is not None

    keys = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page["Contents"]}
    for layer in ("snapshot", "bronze", "silver"):
        assert f"lake/src/items/{layer}/_delta_log/00000000000000000000.json" in keys
    # read back through S3A, as the next run would
    silver = live_rows(spark.read.format("delta").load(f"s3a://{bucket}/lake/src/items/silver"))
    got = sorted(tuple(r) for r in silver.select("id", "v").collect())
    with root.cursor() as cur:
        cur.execute("SELECT id, v FROM items ORDER BY id")
        assert got == [tuple(r) for r in cur.fetchall()]
    locks = boto3.client("dynamodb", endpoint_url=os.environ["INGEST_LOCK_ENDPOINT_URL"], region_name="us-east-1")
    assert locks.scan(TableName="ingest_lake_locks")["Count"] == 0  # every write released its lock


def test_the_write_lock_admits_one_holder_at_a_time_and_outlives_a_crashed_one(aws):
    dynamodb = boto3.client("dynamodb", endpoint_url=os.environ["INGEST_LOCK_ENDPOINT_URL"], region_name="us-east-1")
    ensure_table(dynamodb, "test_locks")
    ensure_table(dynamodb, "test_locks")  # a second process finding it there
    held, overlaps = [], []
    inside = threading.Lock()

    def writer(n):
        for _ in range(3):
            with table_lock(dynamodb, "test_locks", "s3a://b/t/silver", lease_seconds=6, poll_seconds=0.05):
                if not inside.acquire(blocking=False):
                    overlaps.append(n)
                    continue
                held.append(n)
                time.sleep(0.1)
                inside.release()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and sorted(held) == [0, 0, 0, 1, 1, 1, 2, 2, 2]

    # a holder that died without releasing: the lock waits for its lease, then is taken over
    dynamodb.put_item(TableName="test_locks", Item={"lock_key": {"S": "dead"}, "holder": {"S": "gone"},
                                                    "lease_until": {"N": str(time.time() + 2)}})
    with pytest.raises(LockTimeout, match="dead"):
        with table_lock(dynamodb, "test_locks", "dead", wait_seconds=0.5, poll_seconds=0.1):
            pass
    started = time.monotonic()
    with table_lock(dynamodb, "test_locks", "dead", wait_seconds=10, poll_seconds=0.1) as owner:
        assert time.monotonic() - started >= 1.0
        item = dynamodb.get_item(TableName="test_locks", Key={"lock_key": {"S": "dead"}})["Item"]
        assert item["holder"]["S"] == owner


@pytest.mark.parametrize("refusal", ["endpoint_down", "no_bucket"])
def test_a_lake_on_s3_that_refuses_fails_the_snapshot_naming_the_endpoint_and_the_fix(
        refusal, aws, spark, mariadb, database, root, tmp_path, monkeypatch, capsys):
    """The lake's S3 endpoint does not answer, or has no such bucket: the run fails with an error that
    names the endpoint (or bucket) and the fix, writes nothing, and leaves no write lock behind; `ingest
    status` says the same."""
    from ingest.cli import main
    from ingest_tests.conftest import free_port

    bucket = f"nolake-{database.replace('_', '-')}"[:60]
    if refusal == "endpoint_down":
        endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        monkeypatch.setenv("INGEST_S3_ENDPOINT_URL", endpoint)
        expected = [f"the lake's S3 endpoint {endpoint} does not answer", "Fix: start the S3 server"]
    else:
        expected = [f"has no bucket {bucket!r}", "Fix: create the bucket, or correct INGEST_LAKE_ROOT"]
    with root.cursor() as cur:
        cur.execute("CREATE TABLE gone (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO gone VALUES (1), (2)")
    harness = s3_harness(spark, mariadb, database, tmp_path, "gone", bucket)
    failure = harness.failure(harness.snapshot(expect_success=False))
    assert all(part in failure for part in expected), failure
    assert "Nothing was written" in failure

    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    assert bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}  # nothing made it, nothing written
    locks = boto3.client("dynamodb", endpoint_url=os.environ["INGEST_LOCK_ENDPOINT_URL"], region_name="us-east-1")
    assert locks.scan(TableName="ingest_lake_locks")["Count"] == 0  # the failed write released its lock
    assert main(["--sources", str(harness.sources), "--lake", f"s3://{bucket}/lake", "status"]) == 2
    err = capsys.readouterr().err
    assert all(part in err for part in expected) and "Traceback" not in err, err
