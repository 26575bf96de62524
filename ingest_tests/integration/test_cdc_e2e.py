"""The Dagster daemon with the sensor on keeps silver in sync; racing runs of one batch apply it once.

Killed runs: see test_kill_harness.py."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ingest.lake.commits import commits
from ingest.lake.merge import live_rows
from ingest.lake.tables import table_location
from ingest_tests.conftest import free_port
from ingest_tests.integration.cdc_harness import dagster_env, register_batch_to_head, write_sources

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
    sources = write_sources(tmp_path, mariadb.port, database, ["live"], cdc={"min_interval_seconds": 1})
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
        os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()


def test_two_runs_of_the_same_batch_racing_apply_it_once(spark, mariadb, database, root, tmp_path):
    """Fencing: the txn id per source and batch lets one of two racing writers commit, never both."""
    with root.cursor() as cur:
        cur.execute("CREATE TABLE race (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO race SELECT seq, 0 FROM seq_1_to_500")
    sources = write_sources(tmp_path, mariadb.port, database, ["race"])
    env = dagster_env(tmp_path, sources)
    base = [DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions"]
    snap = subprocess.run([*base, "--select", "src/race/snapshot"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert snap.returncode == 0, snap.stderr[-3000:]
    with root.cursor() as cur:
        cur.execute("UPDATE race SET v = v + 1 WHERE id <= 300")
        cur.execute("INSERT INTO race SELECT seq, 9 FROM seq_1000_to_1200")
    key = register_batch_to_head(env, root, "src", "race")
    cmd = [*base, "--select", "src/race/changes,src/race", "--partition", key]
    racers = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    outcomes = [(r.wait(600), r.stdout.read()) for r in racers]
    assert any(code == 0 for code, _ in outcomes), outcomes[0][1][-3000:]
    bronze = spark.read.format("delta").load(table_location(str(tmp_path / "lake"), "src", "race", "bronze"))
    assert bronze.count() == 501 == bronze.select("_pos").distinct().count()  # 300 updates + 201 inserts, once
    bronze_commits = commits(spark, table_location(str(tmp_path / "lake"), "src", "race", "bronze"))
    assert sum(1 for c in bronze_commits if c.metadata.get("batch") == key) == 1
    # whichever lost, a re-run converges and silver equals the source
    rerun = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    got = sorted(tuple(r) for r in live_rows(spark.read.format("delta").load(
        table_location(str(tmp_path / "lake"), "src", "race", "silver"))).select("id", "v").collect())
    with root.cursor() as cur:
        cur.execute("SELECT id, v FROM race")
        assert got == sorted(cur.fetchall())
