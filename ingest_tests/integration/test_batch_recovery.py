"""A batch whose run fails is run again by the sensor before any later range; one that keeps failing
stops the source loudly. Real MariaDB, real Delta tables, Dagster runs in process; the failure is a
silver table the run cannot write (its folder replaced by a file), after bronze committed."""

import os
import shutil
import time
from contextlib import contextmanager

from dagster import AssetKey, DagsterInstance, RunsFilter, SensorResult

from ingest.defs.batches import GAVE_UP_TAG
from ingest.sources.mysql.positions import BatchRange
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources


def make(spark, root, mariadb, database, tmp_path, **cdc):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE r (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO r SELECT seq, seq FROM seq_1_to_100")
    h = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["r"], cdc=cdc), tmp_path / "lake",
                   DagsterInstance.ephemeral())
    h.snapshot()
    assert h.sync()
    return h


@contextmanager
def silver_unwritable(h):
    """Silver's folder is a file for a while: a silver step fails after bronze committed."""
    path = h.silver_path("r")
    shutil.move(path, path + ".away")
    open(path, "w").close()
    try:
        yield
    finally:
        os.remove(path)
        shutil.move(path + ".away", path)


def run_request(h, result):
    assert isinstance(result, SensorResult) and result.run_requests, result
    (request,) = result.run_requests
    for add in result.dynamic_partitions_requests:
        h.instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
    return request


def live(h):
    return h.live("r", ["id", "v"])


def source(root):
    with root.cursor() as cur:
        cur.execute("SELECT id, v FROM r")
        return sorted(cur.fetchall())


def test_a_failed_batch_is_run_again_before_any_later_range_and_nothing_is_lost(
        spark, root, mariadb, database, tmp_path):
    h = make(spark, root, mariadb, database, tmp_path, retry_backoff_seconds=3)
    with root.cursor() as cur:
        cur.execute("UPDATE r SET v = -v WHERE id <= 40")
        cur.execute("DELETE FROM r WHERE id > 90")
    request = run_request(h, h.tick())
    failed = request.partition_key
    with silver_unwritable(h):
        h.run(list(request.asset_selection), failed, expect_success=False)
    # bronze holds the batch, silver does not: the batch is not complete
    assert h.spark.read.format("delta").load(h.silver_path("r").replace("silver", "bronze")).where(
        f"_batch = '{failed}'").count() == 50
    with root.cursor() as cur:  # later writes: the head moves past the failed batch
        cur.execute("INSERT INTO r VALUES (500, 5)")
    waiting = h.tick()
    assert not waiting.run_requests, "nothing runs during the backoff, and no later range is planned"
    assert f"batch {failed}" in waiting.skip_reason.skip_message and "running it again in" in waiting.skip_reason.skip_message
    time.sleep(3.2)
    retry = run_request(h, h.tick())
    assert retry.partition_key == failed and retry.tags["ingest/attempt"] == "2"
    h.run(list(retry.asset_selection), failed, tags=retry.tags)
    # only now does the next batch start, at the failed batch's end
    following = run_request(h, h.tick())
    assert BatchRange.from_key(following.partition_key, "b").start == BatchRange.from_key(failed, "b").end
    h.run(list(following.asset_selection), following.partition_key, tags=following.tags)
    assert live(h) == source(root)
    assert h.check("_batch_log", "batch_contiguity").passed


def test_a_batch_that_keeps_failing_stops_the_source_and_says_which_why_and_how_to_retry(
        spark, root, mariadb, database, tmp_path):
    h = make(spark, root, mariadb, database, tmp_path, retry_backoff_seconds=0, max_batch_attempts=2)
    with root.cursor() as cur:
        cur.execute("UPDATE r SET v = 0 WHERE id = 7")
    first = run_request(h, h.tick())
    batch = first.partition_key
    with silver_unwritable(h):
        h.run(list(first.asset_selection), batch, expect_success=False, tags=first.tags)
        again = run_request(h, h.tick())
        assert again.partition_key == batch
        h.run(list(again.asset_selection), batch, expect_success=False, tags=again.tags)
    with root.cursor() as cur:
        cur.execute("UPDATE r SET v = 1 WHERE id = 8")
    stopped = h.tick()
    assert not stopped.run_requests and not stopped.dynamic_partitions_requests
    message = stopped.skip_reason.skip_message
    assert f"STOPPED: batch {batch} of source src failed 2 times" in message
    assert "silver" in message  # the error: the silver table could not be written
    assert f"ingest backfill src --partitions {batch} --wait" in message
    (event,) = stopped.asset_events
    assert event.asset_key == AssetKey(["src", "_batch_log"]) and event.partition == batch
    (last,) = h.instance.get_run_records(RunsFilter(tags={"dagster/partition": batch}), limit=1)
    assert message[:200] in last.dagster_run.tags[GAVE_UP_TAG]
    assert h.tick().asset_events == []  # said once
    # a person fixes the cause and runs the batch: the sensor goes on from its end
    h.run_batch(batch)
    following = run_request(h, h.tick())
    assert BatchRange.from_key(following.partition_key, "b").start == BatchRange.from_key(batch, "b").end
    h.run(list(following.asset_selection), following.partition_key)
    assert live(h) == source(root)
