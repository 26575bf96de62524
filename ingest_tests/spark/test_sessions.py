"""Connect sessions pass from one process to the next (lake/sessions.py), real processes on the test
session's server: a clean exit hands the session on, a killed holder's session is never used again."""

import json
import os
import subprocess
import sys
import time

HOLDER = """
import json, os, signal, sys, threading, time
from ingest.lake.connect import _LEASED, connect
session = connect()
lease = _LEASED[os.environ["INGEST_SPARK_REMOTE"]][0]
print(json.dumps({"session": session.session_id, "reused": lease.reused, "one": session.range(3).count()}), flush=True)
if sys.argv[1] == "kill":  # SIGKILLed while a query runs in its session (one task: the shared server's
    # other core stays free for the next holder and the other worker's tests until the test stops it)
    threading.Thread(target=lambda: session.range(0, 10**11, 1, 1).selectExpr("sum(id)").collect(),
                     daemon=True).start()
    time.sleep(2)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def hold(tmp_path, how: str) -> dict:
    env = {**os.environ, "INGEST_SPARK_STATE_DIR": str(tmp_path / "state")}
    run = subprocess.run([sys.executable, "-c", HOLDER, how], env=env, capture_output=True, text=True, timeout=120)
    assert run.stdout, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[0])


def test_a_session_passes_on_after_a_clean_exit_and_never_after_its_holder_was_killed(spark_server, tmp_path):
    from pyspark.sql import SparkSession

    from ingest.lake.sessions import url_with_session

    first = hold(tmp_path, "exit")
    assert not first["reused"] and first["one"] == 3
    second = hold(tmp_path, "exit")
    assert second == {**first, "reused": True}
    killed = hold(tmp_path, "kill")
    assert killed["session"] == first["session"] and killed["reused"]
    after = hold(tmp_path, "exit")
    assert after["session"] != killed["session"] and not after["reused"]
    # the killed holder's query still runs on the server: stop it, as nothing else will
    left = SparkSession.builder.remote(url_with_session(spark_server.url, killed["session"])).create()
    deadline = time.monotonic() + 30
    while not left.interruptAll() and time.monotonic() < deadline:
        time.sleep(0.5)
    left.release_session_on_close = True
    left.stop()
