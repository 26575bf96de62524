"""DynamoDB end to end on DynamoDB Local (AWS's emulator, with Streams) over HTTP: scan snapshot, stream batches, silver."""

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance

from ingest.lake.batchlog import logged_batches
from ingest.lake.deltalog import commits
from ingest_tests.integration.dynamodb_harness import (
    DynamoHarness, create_table, every_type_item, unique, write_sources,
)


@pytest.fixture
def harness(spark, dynamodb, tmp_path):
    def make(tables, **extra):
        sources = write_sources(tmp_path, dynamodb.endpoint_url, tables, **extra)
        return DynamoHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral(), dynamodb.endpoint_url)
    return make


@pytest.fixture
def ddb(dynamodb):
    import boto3

    return boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")


def test_snapshot_then_stream_batches_give_silver_equal_to_a_full_scan(harness, ddb):
    table = create_table(ddb, unique("orders"))
    for i in range(300):
        ddb.put_item(TableName=table, Item=every_type_item(i))
    h = harness([table])
    assert h.sync() == []  # no snapshot yet: the sensor waits
    h.snapshot(table)
    assert h.spark.read.format("delta").load(h.path(table, "snapshot")).count() == 300
    # puts, updates, overwrites, deletes and batch writes after the snapshot
    for i in range(300, 340):
        ddb.put_item(TableName=table, Item=every_type_item(i))
    for i in range(0, 60, 3):
        ddb.update_item(TableName=table, Key={"id": {"S": f"item-{i:05d}"}},
                        UpdateExpression="SET #t = :t, tags = :g REMOVE addr",
                        ExpressionAttributeNames={"#t": "total"}, ExpressionAttributeValues={":t": {"N": "0.01"}, ":g": {"SS": ["updated"]}})
    for i in range(1, 60, 5):
        ddb.put_item(TableName=table, Item=every_type_item(i, paid={"BOOL": True}, total={"N": "-5.5"}))
    for i in range(2, 80, 7):
        ddb.delete_item(TableName=table, Key={"id": {"S": f"item-{i:05d}"}})
    ddb.batch_write_item(RequestItems={table: [
        *[{"PutRequest": {"Item": every_type_item(i, hist={"L": []})}} for i in range(400, 410)],
        *[{"DeleteRequest": {"Key": {"id": {"S": f"item-{i:05d}"}}}} for i in range(100, 110)],
    ]})
    ran = h.sync_until_idle()
    assert ran == ["00000001"]
    assert h.silver_rows(table) == h.scan_rows(table)
    bronze = h.spark.read.format("delta").load(h.path(table, "bronze"))
    assert {r[0] for r in bronze.select("_op").distinct().collect()} == {"insert", "update", "delete"}
    first_batch = bronze.count()
    # more changes: the next batch continues where the first ended
    ddb.put_item(TableName=table, Item=every_type_item(500, blob={"B": base64.b64encode(b"\x01").decode()}))
    ddb.delete_item(TableName=table, Key={"id": {"S": "item-00300"}})
    assert h.sync_until_idle() == ["00000002"]
    assert h.silver_rows(table) == h.scan_rows(table)
    assert h.spark.read.format("delta").load(h.path(table, "bronze")).count() == first_batch + 2


def test_a_backlog_becomes_contiguous_batches_and_a_committed_batch_never_reads_again(harness, ddb):
    table = create_table(ddb, unique("events"), range_key=True)
    h = harness([table], cdc={"max_records": 25, "page_limit": 10})
    ddb.put_item(TableName=table, Item={"id": {"S": "seed"}, "sk": {"N": "1"}})
    h.snapshot(table)
    for i in range(90):
        ddb.put_item(TableName=table, Item={"id": {"S": f"k{i % 30}"}, "sk": {"N": str(i % 4)}, "v": {"N": str(i)}})
    ran = h.sync_until_idle()
    # 91 records from TRIM_HORIZON (the seed is replayed), 25 per batch
    assert ran == ["00000001", "00000002", "00000003", "00000004"]
    ends = {c.metadata["batch"]: c.metadata for c in commits(h.path(table, "bronze"))}
    for n in range(2, 5):
        assert ends[f"{n:08d}"]["start"] == ends[f"{n - 1:08d}"]["end"], "batches must be contiguous"
    assert h.silver_rows(table) == h.scan_rows(table)
    before = len(commits(h.path(table, "bronze")))
    result = h.run([AssetKey(["src", table, "changes"])], "00000002")
    assert len(commits(h.path(table, "bronze"))) == before
    mat = result.asset_materializations_for_node(f"src__{table}__changes")[0]
    assert mat.metadata["committed"].value is False


def test_a_batch_before_its_predecessor_committed_fails_clearly(harness, ddb):
    table = create_table(ddb, unique("early"))
    h = harness([table])
    h.snapshot(table)
    h.instance.add_dynamic_partitions(f"src_{table}_batches", ["00000002"])
    result = h.run([AssetKey(["src", table, "changes"])], "00000002", expect_success=False)
    assert "batch 00000002 continues batch 00000001, which has not committed" in h.failure(result)


def test_a_stream_without_new_images_and_a_missing_table_fail_clearly(harness, ddb):
    keys_only = create_table(ddb, unique("keys"), view="KEYS_ONLY")
    h = harness([keys_only, "no_such_table"])
    result = h.run([AssetKey(["src", keys_only, "snapshot"])], expect_success=False)
    assert "KEYS_ONLY" in h.failure(result) and "NEW_AND_OLD_IMAGES" in h.failure(result)
    result = h.run([AssetKey(["src", "no_such_table", "snapshot"])], expect_success=False)
    assert "DynamoDB table no_such_table does not exist" in h.failure(result)


def test_a_replaced_stream_stops_the_batches_until_a_resnapshot(harness, ddb):
    table = create_table(ddb, unique("replaced"))
    h = harness([table])
    ddb.put_item(TableName=table, Item={"id": {"S": "a"}})
    h.snapshot(table)
    assert h.sync_until_idle() == ["00000001"]
    # moto cannot re-enable a stream; a re-created table gets a new stream just the same
    ddb.delete_table(TableName=table)
    create_table(ddb, table)
    ddb.put_item(TableName=table, Item={"id": {"S": "b"}})
    h.instance.add_dynamic_partitions(f"src_{table}_batches", ["00000002"])
    result = h.run([AssetKey(["src", table, "changes"])], "00000002", expect_success=False)
    assert "the stream was replaced" in h.failure(result) and "re-snapshot" in h.failure(result)
    h.snapshot(table)  # the fix the error names; batches continue on the new stream
    h.run([AssetKey(["src", table, "changes"]), AssetKey(["src", table])], "00000002")
    ddb.put_item(TableName=table, Item={"id": {"S": "c"}})
    h.sync_until_idle()
    assert h.silver_rows(table) == h.scan_rows(table)


def test_a_resumed_snapshot_reads_only_the_segments_not_committed(harness, ddb, spark, monkeypatch):
    from ingest.adapters.dynamodb import ScanSnapshotWrite

    table = create_table(ddb, unique("resume"))
    for i in range(200):
        ddb.put_item(TableName=table, Item={"id": {"S": f"r{i}"}, "v": {"N": str(i)}})
    h = harness([table])
    settings = h.resources["dynamodb_src"].settings()
    write = ScanSnapshotWrite("src", table, settings, {}, segments=4, parallelism=2, segments_per_commit=1,
                              consistent_read=True, page_size=25)
    path = h.path(table, "snapshot")
    from ingest.adapters import dynamodb as scan

    real, calls = scan.read_segments_df, []

    def dies_on_third_wave(*args, **kwargs):
        calls.append(args[4])
        if len(calls) == 3:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(scan, "read_segments_df", dies_on_third_wave)
    with pytest.raises(RuntimeError, match="killed"):
        write.apply(spark, path, print)
    first = commits(path)[0].metadata
    assert first["segments_done"] == [0, 1] and not first["complete"]
    resumed_calls = []

    def spy(*args, **kwargs):
        resumed_calls.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(scan, "read_segments_df", spy)
    meta = write.apply(spark, path, print)
    assert resumed_calls == [[2], [3]] and meta["resumed"] and meta["snapshot_id"] == first["snapshot_id"]
    df = spark.read.format("delta").load(path)
    assert df.count() == 200 and df.select("id").distinct().count() == 200


def test_each_scan_segment_is_a_spark_partition(harness, ddb, spark):
    from ingest.adapters.dynamodb import read_segments_df

    table = create_table(ddb, unique("parts"))
    for i in range(40):
        ddb.put_item(TableName=table, Item={"id": {"S": f"p{i}"}})
    h = harness([table])
    df = read_segments_df(spark, h.resources["dynamodb_src"].settings(), table, h.types(table), [0, 1, 2, 3], 4,
                          False, None, 7)
    from pyspark.sql import functions as F

    assert df.select(F.spark_partition_id()).distinct().count() == 4
    assert sorted(r[0] for r in df.select("id").collect()) == sorted(f"p{i}" for i in range(40))
    assert {int(r[0]) for r in df.select("_pos").collect()} == {7}


def test_a_batch_with_a_value_its_column_cannot_hold_fails_naming_it_and_is_retried_then_left(harness, ddb):
    table = create_table(ddb, unique("badval"))
    h = harness([table], cdc={"max_batch_attempts": 3, "retry_backoff_seconds": 2})
    h.snapshot(table)
    ddb.put_item(TableName=table, Item={"id": {"S": "bad-1"}, "total": {"N": "1.239"}})  # declared decimal(12,2)
    assert h.sync(expect_success=False) == ["00000001"]
    err = h.failure(h.run([AssetKey(["src", table, "changes"])], "00000001", expect_success=False))
    assert "id='bad-1'" in err and "attribute 'total'" in err and "more than 2 decimal places" in err
    # the failed batch waits out its backoff: no later batch, no re-run yet
    skip = h.tick()
    assert not skip.run_requests and "running it again in" in skip.skip_reason.skip_message
    # past the backoff the sensor runs it again, until 3 of its runs failed (the untagged run above is not its own)
    h.instance.add_dynamic_partitions(f"src_{table}_batches", ["00000002"])  # a stray later partition is ignored
    time.sleep(2.1)  # backoff: 2 s after the first failure, 4 s after the second
    assert h.sync(expect_success=False) == ["00000001"]
    time.sleep(4.1)
    assert h.sync(expect_success=False) == ["00000001"]
    skip = h.tick()
    assert not skip.run_requests
    message = skip.skip_reason.skip_message
    assert "STOPPED: batch 00000001" in message and "failed 3 times" in message and "more than 2 decimal" in message
    assert f"ingest backfill src --table {table} --partitions 00000001" in message
    # the stop is on the batch log asset and the last failed run too, once
    (event,) = skip.asset_events
    assert event.asset_key == AssetKey(["src", table, "batch_log"]) and event.metadata["stopped"].value is True
    assert h.tick().asset_events == []
    assert not bronze_exists(h, table)  # nothing was committed by the failed runs


def bronze_exists(h, table):
    from ingest.lake.deltalog import is_delta_table

    return is_delta_table(h.path(table, "bronze"))


def test_the_code_location_loads_with_a_dynamodb_source(dynamodb, tmp_path):
    sources = write_sources(tmp_path, dynamodb.endpoint_url, ["some_table"],
                            access_key_id_env="DDB_TEST_KEY", secret_access_key_env="DDB_TEST_SECRET")
    env = {**os.environ, "INGEST_SOURCES": str(sources), "DAGSTER_HOME": str(tmp_path),
           "DDB_TEST_KEY": "local", "DDB_TEST_SECRET": "local"}
    (tmp_path / "dagster.yaml").write_text("")
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w",
                          "workspace.yaml"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_demo_carts_source_lands_with_its_declared_types(spark, dynamodb, tmp_path, monkeypatch):
    """The shipped sources.yaml's DynamoDB source, seeded and written by the demo's writer, through a
    snapshot and stream batches: silver equals a scan, in the declared types."""
    import yaml

    from ingest.localdev import demo_dynamodb
    from ingest.paths import PROJECT_ROOT

    shipped = yaml.safe_load((PROJECT_ROOT / "sources.yaml").read_text())["sources"]["demo_carts"]
    shipped["endpoint_url"] = dynamodb.endpoint_url
    for key in (shipped["access_key_id_env"], shipped["secret_access_key_env"]):
        monkeypatch.setenv(key, "local")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"demo_carts": shipped}}))
    h = DynamoHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral(), dynamodb.endpoint_url,
                      name="demo_carts")
    ddb = demo_dynamodb.client(dynamodb.endpoint_url)
    demo_dynamodb.seed(ddb, carts=100)
    h.snapshot(demo_dynamodb.TABLE)
    demo_dynamodb.write_forever(ddb, every=0, rounds=30)
    assert h.sync_until_idle()
    assert h.silver_rows(demo_dynamodb.TABLE) == h.scan_rows(demo_dynamodb.TABLE)
    types = dict(spark.read.format("delta").load(h.path(demo_dynamodb.TABLE, "silver")).dtypes)
    assert (types["customer_id"], types["total"], types["skus"]) == ("bigint", "decimal(12,2)", "array<string>")


def snapshotted(harness, ddb, prefix: str, items: int, **per_table: bool):
    """A new table of `items` items, its source (`per_table`: settings that list it, e.g. history=True)
    and its finished snapshot."""
    table = create_table(ddb, unique(prefix))
    for i in range(items):
        ddb.put_item(TableName=table, Item=every_type_item(i))
    h = harness([table], **{k: [table] for k, on in per_table.items() if on})
    h.snapshot(table)
    return table, h


def test_history_of_a_dynamodb_table_keeps_every_version_of_an_item(harness, ddb):
    """`history: [table]`: the sensor's batch runs also build the SCD2 history, before the batch log."""
    table, h = snapshotted(harness, ddb, "hist", 3, history=True)
    ddb.put_item(TableName=table, Item=every_type_item(0, total={"N": "1.50"}))
    ddb.delete_item(TableName=table, Key={"id": {"S": "item-00001"}})
    assert h.sync_until_idle() == ["00000001"]
    ddb.put_item(TableName=table, Item=every_type_item(0, total={"N": "2.50"}))
    ddb.put_item(TableName=table, Item=every_type_item(1, total={"N": "9.00"}))
    assert h.sync_until_idle() == ["00000002"]

    history = h.spark.read.format("delta").load(h.path(table, "history"))
    versions = {}
    for r in sorted(history.collect(), key=lambda r: (r.id, r._valid_from)):
        if r._valid_to == r._valid_from and not r._deleted:
            # the stream's puts from before the scan, read again by the snapshot: the same image, no version
            assert (str(r.total), r._current) == (versions[r.id][-1][0], False)
            continue
        versions.setdefault(r.id, []).append((str(r.total), r._deleted, r._current))
    assert versions == {
        "item-00000": [("0.00", False, False), ("1.50", False, False), ("2.50", False, True)],
        "item-00001": [("1.01", False, False), ("1.01", True, False), ("9.00", False, True)],
        "item-00002": [("2.02", False, True)],
    }
    current = sorted(r.id for r in history.where("_current").collect())
    assert current == sorted(r[0] for r in h.scan_rows(table))
    # the batch log records a batch only once its history is in: both batches are complete
    assert [e.batch for e in logged_batches(h.path(table, "batch_log"))] == ["00000002", "00000001"]


def test_a_dynamodb_table_opted_into_deletion_vectors_gets_them_in_silver(harness, ddb):
    from ingest_tests.merges import last_commit, names_keys

    table, h = snapshotted(harness, ddb, "dv", 20, deletion_vectors=True)
    assert h.sync_until_idle()
    ddb.put_item(TableName=table, Item=every_type_item(3, total={"N": "7.25"}))
    ddb.delete_item(TableName=table, Key={"id": {"S": "item-00004"}})
    assert h.sync_until_idle()
    assert h.silver_rows(table) == h.scan_rows(table)
    merge = last_commit(h.spark, h.path(table, "silver"))
    assert merge.deletion_vectors and names_keys(merge.predicate, "id"), merge.predicate
    assert int(merge.metrics["numTargetDeletionVectorsAdded"]) > 0


def test_reconciliation_of_a_dynamodb_table_leaves_unsynced_changes_and_names_hand_edits(harness, ddb):
    """The `reconciliation` check, run by the job its schedule launches: a Scan against silver, keys the
    stream changed after silver's position left out, silver's own divergences named by key."""
    from ingest_tests.integration.test_reconcile import scheduled_reconciliation
    from ingest.adapters.dynamodb import reconcile
    from ingest.lake.merge import delta_path
    from ingest.sources.dynamodb.client import client_settings

    table = create_table(ddb, unique("rec"), range_key=True)
    for i in range(120):
        ddb.put_item(TableName=table, Item=every_type_item(i, sk={"N": str(i % 3)}))
    h = harness([table])
    with pytest.raises(ValueError, match="no snapshot merged yet. Fix: materialize"):
        reconcile(h.spark, client_settings(h.source), h.name, table, {}, h.path(table, "silver"),
                  h.path(table, "snapshot"), segments=2, parallelism=2, consistent_read=True, page_size=None,
                  page_limit=1000)
    h.snapshot(table)
    ddb.put_item(TableName=table, Item=every_type_item(3, sk={"N": "0"}, total={"N": "7.25"}))
    ddb.delete_item(TableName=table, Key={"id": {"S": "item-00004"}, "sk": {"N": "1"}})
    assert h.sync_until_idle() == ["00000001"]
    synced = scheduled_reconciliation(h, table)
    assert synced.passed, synced.description
    assert synced.metadata["source_rows"].value == synced.metadata["silver_rows"].value == 119
    assert synced.metadata["ranges_compared_by_row"].value == 0

    # after the last batch: changes the next batch brings, not divergences
    ddb.put_item(TableName=table, Item=every_type_item(500, sk={"N": "2"}))
    ddb.put_item(TableName=table, Item=every_type_item(6, sk={"N": "0"}, total={"N": "1.00"}))
    ddb.delete_item(TableName=table, Key={"id": {"S": "item-00007"}, "sk": {"N": "1"}})
    pending = scheduled_reconciliation(h, table)
    assert pending.passed, pending.description
    assert pending.metadata["recently_changed_keys"].value == 3
    assert "left to the next batch" in pending.description and "the end of batch 00000001" in pending.description

    silver = delta_path(h.path(table, "silver"))  # hand edits, as a user with write access might
    h.spark.sql(f"UPDATE {silver} SET total = -1 WHERE id = 'item-00010'")
    h.spark.sql(f"DELETE FROM {silver} WHERE id = 'item-00011'")
    failed = scheduled_reconciliation(h, table)
    assert not failed.passed
    (described,) = failed.metadata["ranges"].value
    assert "1 missing, 0 extra, 1 different (e.g. ('item-00010', " in described, described
    assert "('item-00011', " in described and "Fix: re-snapshot" in failed.description
    assert failed.metadata["recently_changed_keys"].value == 3
