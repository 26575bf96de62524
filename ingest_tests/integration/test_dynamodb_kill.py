"""Stream batch runs killed with SIGKILL (early, and right after the bronze commit) or racing each other."""

import os
import signal
import subprocess
import time
from pathlib import Path

from dagster import DagsterInstance

from ingest.lake.merge import live_rows
from ingest_tests.integration.cdc_harness import add_partitions, dagster_env
from ingest_tests.integration.dynamodb_harness import DynamoHarness, create_table, unique, write_sources
from ingest_tests.integration.test_cdc_e2e import DAGSTER, ROOT, wait_for


def test_a_killed_stream_batch_reruns_without_duplicates_or_loss(spark, dynamodb, tmp_path):
    import boto3

    ddb = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    table = create_table(ddb, unique("killed"))
    sources = write_sources(tmp_path, dynamodb.endpoint_url, [table])
    h = DynamoHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral(), dynamodb.endpoint_url)
    for start in range(0, 2000, 25):
        ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": {"id": {"S": f"k{i}"}, "v": {"N": "0"}}}}
                                                   for i in range(start, start + 25)]})
    h.snapshot(table)
    for start in range(0, 6000, 25):  # 6,000 writes after the snapshot: updates, inserts, deletes
        requests = []
        for i in range(start, start + 25):
            if i % 6 == 5:
                requests.append({"DeleteRequest": {"Key": {"id": {"S": f"k{i % 2000}"}}}})
            else:
                requests.append({"PutRequest": {"Item": {"id": {"S": f"k{i % 3000}"}, "v": {"N": str(i)}}}})
        ddb.batch_write_item(RequestItems={table: requests})
    env = {**dagster_env(tmp_path, sources), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    add_partitions(env, f"src_{table}_batches", ["00000001"])
    cmd = [DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions",
           "--select", f"src/{table}/changes,src/{table}", "--partition", "00000001"]
    bronze_log = Path(h.path(table, "bronze")) / "_delta_log"

    run_log = tmp_path / "run.log"

    def start():
        with open(run_log, "w") as out:
            return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def kill(proc):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    proc = start()  # killed as it starts reading the stream: nothing may be committed
    try:
        deadline = time.monotonic() + 300
        while "reading the stream from" not in run_log.read_text():  # polled closely: the read takes ~1 s
            assert proc.poll() is None and time.monotonic() < deadline, run_log.read_text()[-4000:]
            time.sleep(0.02)
    finally:
        kill(proc)
    assert not list(bronze_log.glob("*.json"))
    proc = start()  # killed right after the bronze commit, before silver and the Dagster event
    try:
        wait_for(lambda: bronze_log.is_dir() and any(bronze_log.glob("*.json")), 300, "a bronze commit", proc)
    finally:
        kill(proc)
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    bronze = spark.read.format("delta").load(h.path(table, "bronze"))
    assert bronze.count() == stream_length(dynamodb.endpoint_url, table)  # all of it, from TRIM_HORIZON
    assert bronze.select("_txid").distinct().count() == bronze.count(), "a stream record landed twice"
    silver = live_rows(spark.read.format("delta").load(h.path(table, "silver")))
    assert silver.count() == silver.select("id").distinct().count()
    assert h.silver_rows(table) == h.scan_rows(table)


def stream_length(endpoint: str, table: str) -> int:
    """Records in the table's (single-shard) stream, read raw with boto3."""
    import boto3

    arn = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1").describe_table(
        TableName=table)["Table"]["LatestStreamArn"]
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint, region_name="us-east-1")
    (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                    ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    total = 0
    while True:
        page = streams.get_records(ShardIterator=it, Limit=1000)
        if not page["Records"]:
            return total
        total += len(page["Records"])
        it = page["NextShardIterator"]


def test_two_runs_of_the_same_stream_batch_racing_commit_it_once_and_the_next_batch_continues(spark, dynamodb,
                                                                                              tmp_path):
    """Fencing: two racers of batch 1, started a second apart while writes keep landing (so they may
    read different ends), commit it once; batch 2 starts at the committed end and nothing is lost."""
    import boto3

    from ingest.lake.deltalog import commits

    ddb = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    table = create_table(ddb, unique("race"))
    sources = write_sources(tmp_path, dynamodb.endpoint_url, [table])
    h = DynamoHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral(), dynamodb.endpoint_url)
    ddb.put_item(TableName=table, Item={"id": {"S": "seed"}})
    h.snapshot(table)
    for i in range(300):
        ddb.put_item(TableName=table, Item={"id": {"S": f"r{i % 120}"}, "v": {"N": str(i)}})
    env = {**dagster_env(tmp_path, sources), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    add_partitions(env, f"src_{table}_batches", ["00000001", "00000002"])

    def batch(key):
        return [DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions",
                "--select", f"src/{table}/changes,src/{table}", "--partition", key]

    logs = [tmp_path / "racer-0.log", tmp_path / "racer-1.log"]  # files, not pipes: a full pipe blocks a racer

    def racer(n):
        return subprocess.Popen(batch("00000001"), cwd=ROOT, env=env, stdout=open(logs[n], "w"),
                                stderr=subprocess.STDOUT)

    racers = [racer(0)]
    for i in range(600):  # writes for as long as the racers run
        if len(racers) == 2 and all(r.poll() is not None for r in racers):
            break
        ddb.put_item(TableName=table, Item={"id": {"S": f"late{i}"}, "v": {"N": str(i)}})
        time.sleep(0.1)
        if i == 10:
            racers.append(racer(1))
    outcomes = [(r.wait(600), log.read_text()) for r, log in zip(racers, logs)]
    assert any(code == 0 for code, _ in outcomes), outcomes[0][1][-3000:]
    bronze_path = h.path(table, "bronze")
    assert sum(1 for c in commits(bronze_path) if c.metadata.get("batch") == "00000001") == 1
    run = subprocess.run(batch("00000002"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    bronze = spark.read.format("delta").load(bronze_path)
    assert bronze.count() == bronze.select("_txid").distinct().count() == stream_length(dynamodb.endpoint_url, table)
    assert h.silver_rows(table) == h.scan_rows(table)
