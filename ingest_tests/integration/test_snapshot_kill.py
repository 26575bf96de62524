"""A snapshot killed with SIGKILL midway resumes without duplicating or losing rows."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ingest.lake.commits import last_commit
from ingest_tests.integration.conftest import snapshot


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def test_killed_snapshot_resumes_without_duplicates_or_loss(spark, root, params, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO k SELECT seq, CONCAT('v', seq) FROM seq_1_to_30000")
    path = str(tmp_path / "k")
    settings = {"chunk_size": 2500, "parallelism": 1, "chunks_per_commit": 1}  # 12 waves
    arg = json.dumps({"params": dataclasses.asdict(params), "table": "k", "path": path, "settings": settings})
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([sys.executable, "-m", "ingest_tests.integration.snapshot_worker", arg],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        # let three waves commit, then kill the driver and its JVM mid-snapshot
        third = Path(path) / "_delta_log" / "00000000000000000002.json"
        wait_for(lambda: third.exists() or worker.poll() is not None, 240, "three committed waves")
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    before = last_commit(spark, path, kind="snapshot")
    assert before.metadata["complete"] is False and before.metadata["wave"] >= 2

    progress = snapshot(spark, path=path, params=params, table="k", **settings)
    assert progress.resumed_from_wave == before.metadata["wave"]
    assert progress.snapshot_id == before.metadata["snapshot_id"]
    assert last_commit(spark, path, kind="snapshot").metadata["complete"] is True

    df = spark.read.format("delta").load(path)
    ids = [r[0] for r in df.select("id").collect()]
    assert len(ids) == len(set(ids)) == 30000, f"{len(ids) - len(set(ids))} duplicated rows"
    with root.cursor() as cur:
        cur.execute("SELECT id, v FROM k")
        assert sorted(map(tuple, df.select("id", "v").collect())) == sorted(cur.fetchall())
