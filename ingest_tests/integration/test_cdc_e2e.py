"""The Dagster daemon with the sensor on keeps silver in sync; racing runs of one batch apply it once.

Killed runs: see test_kill_harness.py."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from ingest.lake.deltalog import commits
from ingest.lake.merge import live_rows
from ingest.lake.tables import table_location
from ingest.localdev.processes import stop_group
from ingest_tests.conftest import free_port
from ingest_tests.integration.cdc_harness import dagster_env, write_sources

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).parent / "dagster")


def wait_for(predicate, timeout, what, proc=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended early while waiting for {what}: {log.read_text()[-4000:] if log else ''}")
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}" + (f": {log.read_text()[-4000:]}" if log else ""))


def silver_ids(spark, path):
    try:
        return {r[0] for r in live_rows(spark.read.format("delta").load(path)).select("id").collect()}
    except Exception:  # the table does not exist yet
        return set()


def test_daemon_and_sensor_bring_a_committed_row_into_silver(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE live (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO live SELECT seq, 'a' FROM seq_1_to_100")
    # the daemon ticks the sensor, which watches the binlog head within each tick (the default)
    sources = write_sources(tmp_path, mariadb.port, database, ["live"], cdc={"watch_seconds": 4.0})
    env = dagster_env(tmp_path, sources)
    snap = subprocess.run([DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions", "--select",
                           "src/live/snapshot"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert snap.returncode == 0, snap.stderr[-3000:]
    log = tmp_path / "dagster_dev.log"
    port = str(free_port())
    dev = subprocess.Popen([DAGSTER, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", port], cwd=ROOT,
                           env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    silver = table_location(str(tmp_path / "lake"), "src", "live", "silver")
    try:
        # the sensor starts on its own: the first batch builds silver from the snapshot
        wait_for(lambda: len(silver_ids(spark, silver)) == 100, 300, "silver from the first batch", dev, log)
        with root.cursor() as cur:
            cur.execute("INSERT INTO live VALUES (1000, 'new')")
        committed = time.monotonic()
        wait_for(lambda: 1000 in silver_ids(spark, silver), 300, "the new row in silver", dev, log)
        seconds = time.monotonic() - committed
        print(f"freshness: a row committed in MariaDB was live in silver after {seconds:.1f} s")
    finally:
        stop_group(dev, signal.SIGINT, timeout=60)


def test_racing_and_stale_batch_runs_apply_each_change_once_and_never_move_the_position_back(
        spark, mariadb, database, root, tmp_path):
    """Fencing, with real processes: two runs of batch 1 race each other and a run of batch 2, so batch 1
    may commit after the newer batch 2 (a stale run). Delta's txn id per source and batch lets one writer
    of a batch commit; the ordered merge keeps batch 2's newer values whatever commits last; a commit
    race lost to another writer is retried; and the next batch starts at the newest end."""
    from dagster import AssetKey, SensorResult, build_sensor_context

    from ingest.config import load_config
    from ingest.defs.sources import build_source_defs
    from ingest.sources.mysql.positions import BatchRange, BinlogPosition
    from ingest_tests.integration.cdc_harness import add_partitions, instance_at, latest_metadata_in

    with root.cursor() as cur:
        cur.execute("CREATE TABLE race (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO race SELECT seq, 0 FROM seq_1_to_500")
    sources = write_sources(tmp_path, mariadb.port, database, ["race"])
    env = dagster_env(tmp_path, sources)
    base = [DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions"]
    snap = subprocess.run([*base, "--select", "src/race/snapshot"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert snap.returncode == 0, snap.stderr[-3000:]
    def head():
        with root.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            return BinlogPosition(*cur.fetchone()[:2])

    snapshot_meta = latest_metadata_in(env, AssetKey(["src", "race", "snapshot"]))
    start = BinlogPosition.from_metadata(snapshot_meta["log_start"].value)
    with root.cursor() as cur:
        cur.execute("UPDATE race SET v = v + 1 WHERE id <= 300")
        cur.execute("INSERT INTO race SELECT seq, 9 FROM seq_1000_to_1200")
    batch1 = BatchRange(start, head())
    with root.cursor() as cur:
        cur.execute("UPDATE race SET v = v * 10 WHERE id <= 100")  # newer values of rows batch 1 changed
        cur.execute("DELETE FROM race WHERE id BETWEEN 1100 AND 1150")
    batch2 = BatchRange(batch1.end, head())
    add_partitions(env, "src_batches", [batch1.key, batch2.key])
    cmds = [[*base, "--select", "src/race/changes,src/race,src/_batch_log", "--partition", key]
            for key in (batch1.key, batch2.key, batch1.key)]
    logs = [tmp_path / f"racer-{i}.log" for i in range(len(cmds))]  # files, not pipes: a full pipe blocks a racer
    racers = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
              for cmd, log in zip(cmds, logs)]
    outcomes = [(r.wait(600), log.read_text()) for r, log in zip(racers, logs)]
    # commit races between the runs (creating bronze and silver, merging into silver) are retried
    for code, output in outcomes:
        assert code == 0, output[-3000:]
    bronze_path = table_location(str(tmp_path / "lake"), "src", "race", "bronze")
    bronze = spark.read.format("delta").load(bronze_path)
    # batch 1: 300 updates + 201 inserts; batch 2: 100 updates + 51 deletes; each once
    assert bronze.count() == 652 == bronze.select("_pos").distinct().count()
    for key in (batch1.key, batch2.key):
        assert sum(1 for c in commits(bronze_path) if c.metadata.get("batch") == key) == 1
    # a stale run of batch 1 after everything: nothing applies twice, silver keeps batch 2's values
    rerun = subprocess.run(cmds[0], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    got = sorted(tuple(r) for r in live_rows(spark.read.format("delta").load(
        table_location(str(tmp_path / "lake"), "src", "race", "silver"))).select("id", "v").collect())
    with root.cursor() as cur:
        cur.execute("SELECT id, v FROM race")
        assert got == sorted(cur.fetchall())
        cur.execute("UPDATE race SET v = 1 WHERE id = 1")
    (defs,) = build_source_defs(load_config(sources), str(tmp_path / "lake"))
    with instance_at(env) as instance, build_sensor_context(instance=instance) as context:
        result = defs.sensor(context)
    assert isinstance(result, SensorResult), result
    (request,) = result.run_requests
    assert BatchRange.from_key(request.partition_key, "mysql-bin").start == batch2.end  # the newest end
