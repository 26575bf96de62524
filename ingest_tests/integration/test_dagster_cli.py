"""Materializing through the Dagster CLI writes Delta tables and records positions and row counts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ingest_tests.integration.cdc_harness import register_batch_to_head

ROOT = Path(__file__).resolve().parents[2]

# The session's Spark server (INGEST_SPARK_REMOTE) for every dagster and ingest process these tests start:
# without it, the first one started an embedded server of its own, which outlives it by design.
pytestmark = pytest.mark.usefixtures("spark_server")


def test_materialize_snapshot_and_silver_through_the_cli(mariadb, root, database, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(20), balance DECIMAL(12,2))")
        cur.execute("INSERT INTO accounts SELECT seq, CONCAT('o', seq), seq * 1.5 FROM seq_1_to_5000")
        cur.execute("CREATE TABLE ledger (acct INT, seq INT, amount DECIMAL(12,2), PRIMARY KEY (acct, seq))")
        cur.execute("INSERT INTO ledger SELECT a.seq, b.seq, b.seq FROM seq_1_to_300 a JOIN seq_1_to_4 b")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"cli": {
        "host": "127.0.0.1", "port": mariadb.port, "user": "ingest", "password_env": "CLI_TEST_PW",
        "database": database, "tables": {"include": ["acc*", "ledger"]},
        "snapshot": {"chunk_size": 1000, "parallelism": 2, "chunks_per_commit": 2}}}}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_SOURCES": str(sources),
           "INGEST_LAKE_ROOT": str(tmp_path / "lake"), "CLI_TEST_PW": "ingest-test-pw"}
    dagster = str(Path(sys.executable).parent / "dagster")
    validate = subprocess.run([dagster, "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                              capture_output=True, text=True)
    assert validate.returncode == 0, validate.stderr[-3000:]
    def materialize(*args):
        run = subprocess.run([dagster, "asset", "materialize", "-m", "ingest.defs.definitions", *args],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
        assert "ingest-test-pw" not in run.stdout + run.stderr

    materialize("--select", "cli/accounts/snapshot,cli/ledger/snapshot")
    # the first change batch: from the snapshots' log start to the binlog head
    with root.cursor() as cur:
        cur.execute("UPDATE accounts SET balance = 0 WHERE id = 1")
    key = register_batch_to_head(env, root, "cli", "accounts")
    materialize("--select", "cli/accounts/changes,cli/ledger/changes,cli/accounts,cli/ledger", "--partition", key)

    os.environ["DAGSTER_HOME"] = str(home)
    try:
        from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

        instance = DagsterInstance.get()

        def latest(*key):
            result = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(list(key))), limit=1)
            return result.records[0].asset_materialization.metadata

        snap = latest("cli", "accounts", "snapshot")
        # 5000 rows in chunks of 1000; a dense key is cut by the server's row estimate, which may be off
        assert snap["rows"].value == 5000 and snap["chunks"].value in (4, 5, 6)
        assert snap["log_start"].value["file"].startswith("mysql-bin.")
        assert snap["min_chunk_position"].value["pos"] >= snap["log_start"].value["pos"]
        assert snap["table_uri"].value.endswith("/lake/cli/accounts/snapshot")
        silver = latest("cli", "accounts")
        assert silver["rows_live"].value == 5000 and silver["batch"].value == key
        assert latest("cli", "accounts", "changes")["rows_update"].value == 1
        assert latest("cli", "ledger")["rows_live"].value == 1200
        instance.dispose()
    finally:
        os.environ.pop("DAGSTER_HOME", None)
    assert (tmp_path / "lake" / "cli" / "ledger" / "silver" / "_delta_log").is_dir()


def test_dagster_dev_and_the_ingest_commands_print_no_warning(tmp_path):
    """What a user's console shows from Dagster as the README runs it for one's own sources (bin/dagster-dev:
    webserver, daemon and code server, from the project folder with DAGSTER_HOME elsewhere, sensors ticking)
    and from `ingest`:
    no warning (one no user can act on is silenced where it starts; any other would be fixed). The
    sensors' errors (this source does not answer) are the console's to show."""
    import socket
    import time

    from ingest.localdev.processes import free_port, stop_group

    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {  # sources nobody listens for, one of each asset shape
        "one": {"host": "127.0.0.1", "port": free_port(), "user": "u", "password_env": "ONE_PASSWORD", "database": "d",
                "tables": {"include": ["t"], "history": ["t"]}, "cdc": {"watch_seconds": 0}},
        "two": {"kind": "dynamodb", "endpoint_url": f"http://127.0.0.1:{free_port()}", "access_key_id_env": "TWO_KEY",
                "secret_access_key_env": "TWO_KEY", "tables": ["carts"], "history": ["carts"], "cdc": {"watch_seconds": 0}}}}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text())
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_SOURCES": str(sources), "ONE_PASSWORD": "x",
           "TWO_KEY": "local", "INGEST_LAKE_ROOT": str(tmp_path / "lake")}
    env.pop("PYTHONWARNINGS", None)
    port = free_port()
    dev = subprocess.Popen([str(ROOT / "bin" / "dagster-dev"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p",
                            str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert dev.poll() is None and time.monotonic() < deadline, dev.stdout.read()
            time.sleep(0.5)
        time.sleep(12)  # the daemon loads the code location and ticks the sensor (which fails: no source)
    finally:
        stop_group(dev, timeout=60)
    consoles = {"bin/dagster-dev": dev.stdout.read()}
    assert "one_binlog_sensor" in consoles["bin/dagster-dev"]  # the sensor ticked: its error is shown
    bin_dir = Path(sys.executable).parent
    for args in (["--help"], ["status"], ["check"]):
        run = subprocess.run([str(bin_dir / "ingest"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode in (0, 1), run.stderr  # check: 1, the source does not answer
        consoles[f"ingest {' '.join(args)}"] = run.stderr
    said = {name: [line for line in text.splitlines() if "warning" in line.lower()] for name, text in consoles.items()}
    assert not any(said.values()), said


def test_ingest_instance_names_a_postgresql_instance_that_is_down_and_passes_once_it_answers(
        dagster_postgres, tmp_path):
    """What deploy/systemd's webserver and daemon units run before each start (`ExecStartPre=`): against a
    PostgreSQL instance storage that does not answer, exit status 2 and one line that names the server
    and the fix, without the password; against the running server, exit status 0."""
    from ingest_tests.conftest import free_port

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text() + "\n"
                                       + (ROOT / "deploy" / "dagster-postgres.yaml").read_text())
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    command = [str(ROOT / ".venv" / "bin" / "ingest"), "instance"]
    up = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0 and up.stdout.startswith("instance ok: PostgreSQL at "), (up.stdout, up.stderr)

    port = free_port()  # nothing listens there: the instance's server is down
    marker = "pw-marker-7c1e9a"
    down = subprocess.run(command, env={**env, "DAGSTER_PG_PORT": str(port), "DAGSTER_PG_PASSWORD": marker},
                          capture_output=True, text=True, timeout=120)
    assert down.returncode == 2, (down.stdout, down.stderr)
    assert down.stderr.startswith(f"ingest instance: the Dagster instance's storage (PostgreSQL at "
                                  f"{dagster_postgres.host}:{port}, database "), down.stderr
    assert "does not answer: OperationalError: " in down.stderr and "Fix: start it, or correct DAGSTER_PG_HOST" \
        in down.stderr
    assert marker not in down.stdout + down.stderr and "Traceback" not in down.stderr
