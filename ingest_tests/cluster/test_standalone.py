"""The cluster tier (issue 47): a Spark standalone cluster started here from pyspark's jars, a master and
two workers in JVMs of their own, and a Spark Connect server submitted to it, shared by this module's
tests. Delta writes and the project's Python code run in executors that are other processes than the
Connect server, their Python a virtualenv with the project installed from a wheel built from this tree,
as on a cluster's hosts.

On it, the production layout end to end: the code location as its own `dagster code-server` and the
daemon apart (deploy/systemd's units under the project's supervisor), the instance on PostgreSQL
(dagster-postgres), the lake on an S3 server with the write locks in DynamoDB Local. A MySQL and a
PostgreSQL source are snapshotted from the command line, then kept in sync by their sensors alone with
batches read on the executors; executors are SIGKILLed mid-snapshot and mid-batch, the reconciliation
and maintenance jobs run, the code server and the daemon are killed, and silver still equals the source
row for row."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import pytest
import yaml

from ingest.sources.mysql.schema import ConnectionParams
from ingest_tests.probes import parent_pid, ticks_after, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
ROWS = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two workers of one core each and a Connect server submitted to their master, with its status API
    on (which executor runs a task). After the module, the master, the workers, the executors they
    launched and the server are all gone."""
    from ingest.lake import connect
    from ingest.localdev.cluster import StandaloneCluster, worker_python
    from ingest.localdev.processes import alive, free_port

    folder = Path(tempfile.mkdtemp(prefix="ingest-cluster-test-"))
    ui = free_port()
    python = worker_python(tmp_path_factory.mktemp("worker"))
    standalone = StandaloneCluster(folder / "cluster").start()
    started = [p.pid for p in standalone.processes]
    state = None
    try:
        state = connect.start_local(folder / "spark", {
            "spark.master": standalone.url, "spark.executor.memory": "768m", "spark.executor.cores": "1",
            "spark.pyspark.python": str(python), "spark.ui.enabled": "true", "spark.ui.port": str(ui)})
        yield state, ui, python
        started += executor_pids()
    finally:
        connect.stop_local(folder / "spark")
        standalone.stop()
    assert [pid for pid in (*started, *([state.pid] if state else [])) if alive(pid)] == []


def executor_pids(executor_id: str | None = None) -> list[int]:
    """PIDs of the executor JVMs workers launched (of `executor_id` only, if given), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and (
                executor_id is None or args[args.index(b"--executor-id") + 1].decode() == executor_id):
            found.append(int(entry.name))
    return found


def mysql_table(mariadb, database: str, rows: int) -> ConnectionParams:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {database}")
    with mariadb.connect(database=database) as conn, conn.cursor() as cur:  # seq_1_to_N: in a database
        cur.execute("CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT IGNORE INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_{rows}")
    return ConnectionParams("127.0.0.1", mariadb.port, "ingest", "ingest-test-pw", database)


def python_reader_snapshot(spark, params: ConnectionParams, path: str):
    """A MySQL snapshot whose chunks the project's Python data source reads (not Spark's JDBC reader)."""
    import ingest.sources.mysql.jdbc as jdbc
    from ingest_tests.integration.conftest import snapshot

    with pytest.MonkeyPatch.context() as m:
        m.setattr(jdbc, "jdbc_columns", lambda columns, table="?": None)
        return snapshot(spark, params, "t", path)


def test_a_connect_server_on_a_standalone_cluster_writes_delta_from_executors_in_other_jvms(cluster, mariadb, spark):
    """`spark`: this process already holds a session to the tests' local server, and a session asked for
    the cluster's server is still the cluster's."""
    from pyspark.sql import functions as F

    from ingest.lake.spark import spark_session

    local, (server, _, python) = spark, cluster
    folder = Path(tempfile.mkdtemp(prefix="ingest-cluster-lake-"))
    spark = spark_session(server.url)
    try:
        assert spark.conf.get("spark.master").startswith("spark://") and local.conf.get("spark.master") == "local[2]"
        path = str(folder / "t")
        spark.range(0, 100_000, numPartitions=4).selectExpr("id", "id % 7 AS k").write.format("delta").save(path)
        assert spark.read.format("delta").load(path).where("k = 3").count() == len(range(3, 100_000, 7))

        @F.udf("string")
        def python_worker(_):
            import ingest

            return f"{os.getpid()}:{os.getppid()}:{ingest.__file__}"

        rows = spark.range(0, 8, numPartitions=4).select(python_worker("id")).collect()
        parents = {int(r[0].split(":")[1]) for r in rows}
        # each Python worker was started by an executor JVM that ran its task (itself, or through
        # pyspark's worker daemon): not by the Connect server
        jvms = set(executor_pids())
        assert parents and all(p in jvms or parent_pid(p) in jvms for p in parents)
        # and the project it imports is the wheel's, in the workers' virtualenv
        (imported,) = {r[0].split(":")[2] for r in rows}
        assert imported.startswith(str(python.parent.parent) + "/lib/") and imported.endswith(
            "/site-packages/ingest/__init__.py")

        # the project's own Python data source, read on those executors: a MySQL snapshot's chunks
        progress = python_reader_snapshot(spark, mysql_table(mariadb, "cluster_t", 2500), str(folder / "m"))
        landed = spark.read.format("delta").load(str(folder / "m"))
        assert progress.chunks_total >= 2 and landed.count() == 2500
        assert landed.where("v = concat('v', id)").count() == 2500
    finally:
        spark.stop()


def test_workers_without_the_project_give_an_error_that_names_it_and_the_fix(mariadb, tmp_path):
    """A worker host whose Python lacks the project: the snapshot fails naming spark.pyspark.python and
    the wheel, and writes nothing."""
    from pyspark.sql import SparkSession

    from ingest.lake import connect
    from ingest.lake.datasource import ProjectMissingOnWorkers
    from ingest.localdev.cluster import worker_python

    bare = worker_python(tmp_path, with_project=False)
    folder = Path(tempfile.mkdtemp(prefix="ingest-bare-worker-test-"))
    params = mysql_table(mariadb, "bare_t", 2)
    try:
        state = connect.start_local(folder / "spark", {"spark.pyspark.python": str(bare)})
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{state.port}").create()
        with pytest.raises(ProjectMissingOnWorkers) as failed:
            python_reader_snapshot(spark, params, str(folder / "lake" / "t"))
        assert "spark.pyspark.python" in str(failed.value) and "wheel" in str(failed.value)
        assert not (folder / "lake" / "t" / "_delta_log").exists()
        spark.stop()
    finally:
        connect.stop_local(folder / "spark")


def busy_executor(ui: int) -> str | None:
    """The id of an executor running a task now, from the Connect server's status API."""
    import json
    import urllib.request

    def get(path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/api/v1/applications{path}", timeout=5) as reply:
            return json.load(reply)

    (app,) = get("")
    return next((e["id"] for e in get(f"/{app['id']}/executors")
                 if e["id"] != "driver" and e["activeTasks"] > 0), None)


def kill_a_busy_executor(ui: int, server_log: Path, during: str) -> None:
    """SIGKILL an executor JVM while it runs a task (as the OOM killer or a lost host would), and wait
    until the Connect server has lost that task: it is Spark's to run again."""
    lost = server_log.read_text(errors="replace").count("ExecutorLostFailure")
    executor = wait_for(lambda: busy_executor(ui), 120, f"an executor running a task {during}")
    (pid,) = executor_pids(executor)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: server_log.read_text(errors="replace").count("ExecutorLostFailure") > lost, 60,
             f"the Connect server to lose the task of executor {executor} {during}")


def messages(instance, run_id: str) -> list[str]:
    return [r.user_message or "" for r in instance.all_logs(run_id)]


def source_runs(instance, source: str):
    from dagster import RunsFilter

    return instance.get_runs(RunsFilter(tags={"ingest/source": source}))


def test_two_sources_on_a_cluster_sync_by_their_sensors_through_executor_kills(
        cluster, mariadb, pg, aws, dagster_postgres, tmp_path, monkeypatch):
    """Snapshots with an executor killed mid-task, sensor batches read on the executors with one killed in
    each, then reconciliation and maintenance, then the code server and the daemon killed: silver equals
    the source after each (the module's docstring has the layout)."""
    from dagster import DagsterEventType, DagsterInstance, RunsFilter

    from ingest.lake.merge import live_rows
    from ingest.lake.spark import spark_session
    from ingest.lake.storage import s3a_conf
    from ingest.localdev.processes import free_port, stop_group

    server, ui, _ = cluster
    began = time.monotonic()

    def say(what: str) -> None:  # the test's timeline, shown when it fails
        print(f"{time.monotonic() - began:7.1f} s  {what}", flush=True)

    server_log = Path(server.log)
    bucket = "cluster-lake"
    boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1").create_bucket(Bucket=bucket)

    # the sources: MySQL `shop.orders` and PostgreSQL `bank.public.accounts`
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE cluster_shop")
        cur.execute("CREATE TABLE cluster_shop.orders (id INT PRIMARY KEY, v INT, s VARCHAR(40), d DECIMAL(12,2))")
        cur.execute(f"INSERT INTO cluster_shop.orders SELECT seq, seq % 97, CONCAT('order ', seq), seq / 8 "
                    f"FROM cluster_shop.seq_1_to_{ROWS}")
    bank = pg.create_database("bank")
    with pg.connect(bank) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, v int, s varchar(40), d numeric(12,2))")
        conn.execute(f"INSERT INTO accounts SELECT g, g % 97, 'account ' || g, round(g / 8.0, 2) "
                     f"FROM generate_series(1, {ROWS}) g")
        conn.execute("CREATE PUBLICATION bank_pub FOR TABLE accounts")
    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    # small enough that every batch below is read on the executors
    cdc = {"min_interval_seconds": 1, "executor_min_bytes": 64 * 1024}
    snapshot = {"chunk_size": 2000, "parallelism": 2, "chunks_per_commit": 1}
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {
        "shop": {"host": "127.0.0.1", "port": mariadb.port, "user": "ingest",
                 "password_env": "INGEST_TEST_MYSQL_PASSWORD", "database": "cluster_shop",
                 "tables": {"include": ["orders"], "history": ["orders"]}, "snapshot": snapshot, "cdc": cdc},
        "bank": {"kind": "postgres", "host": pg.host, "port": pg.port, "user": pg.user,
                 "password_env": "INGEST_TEST_PG_PASSWORD", "database": bank, "publication": "bank_pub",
                 "slot": "bank_slot", "tables": {"include": ["accounts"]}, "snapshot": snapshot, "cdc": cdc}}}))

    # the instance: the shipped dagster.yaml with its PostgreSQL storage
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text() + "\n"
                                       + (ROOT / "deploy" / "dagster-postgres.yaml").read_text())
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_SOURCES": str(sources),
           "INGEST_LAKE_ROOT": f"s3://{bucket}/lake", "INGEST_SPARK_REMOTE": server.url,
           "INGEST_LOCAL_DIR": str(tmp_path / "local"), "INGEST_CODE_SERVER_PORT": str(free_port())}
    instance = DagsterInstance.from_config(str(home))

    # 1. the snapshots, from the command line as a user starts them; an executor dies mid-snapshot
    def materialize(key: str) -> subprocess.Popen:
        return subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m",
                                 "ingest.defs.definitions", "--select", key], cwd=ROOT, env=env,
                                stdout=open(tmp_path / f"{key.replace('/', '_')}.log", "w"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    shop_snapshot = materialize("shop/orders/snapshot")
    kill_a_busy_executor(ui, server_log, "in the MySQL snapshot")
    assert shop_snapshot.wait(300) == 0, (tmp_path / "shop_orders_snapshot.log").read_text()[-4000:]
    say("executor killed in the MySQL snapshot")
    bank_snapshot = materialize("bank/accounts/snapshot")
    assert bank_snapshot.wait(300) == 0, (tmp_path / "bank_accounts_snapshot.log").read_text()[-4000:]
    say("snapshots done")

    # 2. the code server and the daemon, as deploy/systemd's units run them, supervised
    units = tmp_path / "units"
    units.mkdir()
    for name in ("ingest-code-server", "ingest-daemon"):
        shutil.copy(ROOT / "deploy" / "systemd" / f"{name}.service", units)
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "ingest.localdev.supervise", "--units", str(units), "--state", str(tmp_path / "sup")],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=open(tmp_path / "supervise.log", "w"),
        stderr=subprocess.STDOUT, start_new_session=True)
    spark = spark_session(server.url, s3a_conf(aws.endpoint_url, "us-east-1", os.environ["AWS_ACCESS_KEY_ID"],
                                               os.environ["AWS_SECRET_ACCESS_KEY"], None))

    def silver(source: str, table: str) -> list[tuple]:
        df = live_rows(spark.read.format("delta").load(f"s3a://{bucket}/lake/{source}/{table}/silver"))
        return sorted(tuple(r) for r in df.select("id", "v", "s", "d").collect())

    def shop_rows() -> list[tuple]:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT id, v, s, d FROM cluster_shop.orders ORDER BY id")
            return [tuple(r) for r in cur.fetchall()]

    def bank_rows() -> list[tuple]:
        with pg.connect(bank) as conn:
            return [tuple(r) for r in conn.execute("SELECT id, v, s, d FROM accounts ORDER BY id").fetchall()]

    def converged(source: str, table: str, rows) -> bool:
        return not any(not r.is_finished for r in source_runs(instance, source)) and silver(source, table) == rows()

    def batch_killed_mid_read(source: str, table: str, write) -> str:
        """Write a large change, wait for the sensor's run to append it from the executors, kill one of
        them then; the run it was in."""
        seen = {r.run_id for r in source_runs(instance, source)}
        write()
        marker = re.compile(rf"bronze {source}/{table} batch \S+: appending the changes read by executors")

        def reading():
            for run in source_runs(instance, source):
                if run.run_id not in seen and any(marker.search(m) for m in messages(instance, run.run_id)):
                    return run.run_id
            return None

        run_id = wait_for(reading, 240, f"the {source} sensor's batch run to read on the executors")
        kill_a_busy_executor(ui, server_log, f"in {source}'s batch")
        say(f"executor killed in {source}'s batch run {run_id}")
        return run_id

    try:
        # 3. each sensor's batches: a large one (every row updated, some deleted and inserted) read on the
        # executors, an executor killed during the read
        def shop_write():
            with mariadb.connect() as conn, conn.cursor() as cur:
                cur.execute("UPDATE cluster_shop.orders SET v = v + 1, s = CONCAT(s, ' updated')")
                cur.execute("DELETE FROM cluster_shop.orders WHERE id % 10 = 3")
                cur.execute(f"INSERT INTO cluster_shop.orders SELECT {ROWS} + seq, seq, 'late', seq / 4 "
                            "FROM cluster_shop.seq_1_to_500")
                conn.commit()

        def bank_write():
            with pg.connect(bank) as conn:
                conn.execute("UPDATE accounts SET v = v + 1, s = s || ' updated'")
                conn.execute("DELETE FROM accounts WHERE id % 10 = 3")
                conn.execute(f"INSERT INTO accounts SELECT {ROWS} + g, g, 'late', g / 4.0 "
                             "FROM generate_series(1, 500) g")

        killed = {"shop": batch_killed_mid_read("shop", "orders", shop_write),
                  "bank": batch_killed_mid_read("bank", "accounts", bank_write)}
        wait_for(lambda: converged("shop", "orders", shop_rows), 600, "shop's silver to equal the source")
        say("shop converged")
        wait_for(lambda: converged("bank", "accounts", bank_rows), 600, "bank's silver to equal the source")
        say("bank converged")
        # Spark ran the lost tasks again: the runs an executor died in completed their batches themselves
        for source, run_id in killed.items():
            assert instance.get_run_by_id(run_id).status.value == "SUCCESS", (source, messages(instance, run_id)[-20:])
        # SCD2 history merged on the cluster too: the snapshot's version and the update's of each key
        # still there, one current version per live key
        history = spark.read.format("delta").load(f"s3a://{bucket}/lake/shop/orders/history")
        assert history.where("_current").count() == len(shop_rows())
        assert history.where(f"id <= {ROWS} AND id % 10 != 3").groupBy("id").count().where("count = 2").count() \
            == len([i for i in range(1, ROWS + 1) if i % 10 != 3])

        # 4. the jobs the schedules launch, run on the cluster from the command line: reconciliation
        # (each silver table against its source, by key-range checksums) and maintenance (compaction,
        # vacuum and retention of every table), then silver still the source's
        # (both at once, as their schedules may start them)
        jobs = {name: subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster"), "job", "execute", "-m", "ingest.defs.definitions",
             "-j", name], cwd=ROOT, env=env, stdout=open(tmp_path / f"{name}.log", "w"), stderr=subprocess.STDOUT)
            for name in ("reconcile_silver", "lake_maintenance")}
        for name, job in jobs.items():
            assert job.wait(600) == 0, (name, (tmp_path / f"{name}.log").read_text()[-4000:])
        (reconciled,) = instance.get_runs(RunsFilter(job_name="reconcile_silver"))
        evaluations = [r.event_log_entry.dagster_event.event_specific_data for r in instance.get_records_for_run(
            reconciled.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records]
        assert sorted(e.asset_key.to_user_string() for e in evaluations if e.passed) == ["bank/accounts", "shop/orders"]
        assert silver("shop", "orders") == shop_rows() and silver("bank", "accounts") == bank_rows()
        say("reconciled and maintained")

        # 5. the code server, then the daemon, killed as the OOM killer would: the supervisor starts each
        # again, the sensor ticks within 60 s of the kill, and a later change still reaches silver
        for unit in ("ingest-code-server", "ingest-daemon"):
            pid_file = tmp_path / "sup" / f"{unit}.pid"
            killed = int(pid_file.read_text())
            os.killpg(killed, signal.SIGKILL)
            at = time.time()
            wait_for(lambda: ticks_after(instance, "shop_binlog_sensor", at + 1), 90,
                     f"the shop sensor to tick again after {unit} was killed")
            resumed = time.time() - at
            say(f"the sensor ticked again {resumed:.1f} s after {unit} was killed")
            assert int(pid_file.read_text()) != killed and resumed < 60
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute("UPDATE cluster_shop.orders SET s = 'after the kills' WHERE id <= 10")
        wait_for(lambda: converged("shop", "orders", shop_rows), 300, "shop's silver to take the later change")
        say("shop converged after the kills")
    finally:
        spark.stop()
        stop_group(supervisor, signal.SIGTERM, timeout=60)
        instance.dispose()
