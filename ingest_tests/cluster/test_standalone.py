"""The cluster tier (issue 47): a Spark standalone cluster started here from pyspark's jars, a master and
two workers in JVMs of their own, and a Spark Connect server submitted to it, shared by this module's
tests. Delta writes and the project's Python code run in executors that are other processes than the
Connect server, their Python a virtualenv with the project installed from a wheel built from this tree,
as on a cluster's hosts.

On it, the production layout end to end: the Connect server, the code location as its own `dagster
code-server` and the daemon apart (deploy/systemd's units under the project's supervisor), the instance on
PostgreSQL (dagster-postgres), the lake on an S3 server with the write locks in DynamoDB Local. MySQL,
PostgreSQL and DynamoDB sources are snapshotted from the command line, then kept in sync by their sensors
alone, MySQL's and PostgreSQL's batches read on the executors; executors are SIGKILLed mid-snapshot and
mid-batch, and a worker JVM mid-batch, the reconciliation, maintenance and dbt runs follow, then the code
server, the daemon and the Connect server are killed, and silver still equals the source row for row."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
import yaml

from ingest.sources.mysql.schema import ConnectionParams
from ingest_tests.probes import SCHEDULES_STOPPED, parent_pid, ticks_after, wait_for

if TYPE_CHECKING:
    from ingest.localdev.cluster import StandaloneCluster

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
    from ingest.localdev.processes import SHORT_LIVED_JVM, free_port, process_alive, process_identity

    # pytest's own folders, which it removes after three later runs: the workers' folders (an application's
    # jars for each executor, the logs) take about 200 MiB
    folder = tmp_path_factory.mktemp("cluster")
    ui = free_port()
    python = worker_python(tmp_path_factory.mktemp("worker"))
    standalone = StandaloneCluster(folder / "cluster", java_options=SHORT_LIVED_JVM).start()
    # identities (PID and start time), not PIDs: a process that ended during the module (a replaced server, a
    # killed executor) may have left its PID to another of the suite's processes by the end
    started = [process_identity(p.pid) for p in standalone.processes]
    # the server's settings as a supervised `ingest spark run` on the driver takes them (INGEST_SPARK_CONF)
    settings = folder / "spark.conf"
    settings.write_text("".join(f"{k} {v}\n" for k, v in {
        "spark.master": standalone.url, "spark.executor.memory": "768m", "spark.executor.cores": "1",
        "spark.pyspark.python": str(python), "spark.ui.enabled": "true", "spark.ui.port": str(ui),
        # the module's JVMs live minutes (and executors are killed): C1 only, as processes.SHORT_LIVED_JVM says
        "spark.executor.extraJavaOptions": " ".join(SHORT_LIVED_JVM),
        "spark.driver.extraJavaOptions": connect.SHORT_LIVED_SERVER_OPTIONS}.items()))
    try:
        state = connect.start_local(folder / "spark", connect.configured_conf({"INGEST_SPARK_CONF": str(settings)}))
        started.append(process_identity(state.pid))
        yield Cluster(folder / "spark", settings, ui, python, standalone)
        started += [process_identity(pid) for pid in executor_pids()]
    finally:
        running = connect.read_state(folder / "spark")  # the one running now: a test may have replaced it
        if running:
            started.append(process_identity(running.pid))
        connect.stop_local(folder / "spark")
        standalone.stop()
    assert [who for who in started if process_alive(who)] == []


@dataclass(frozen=True)
class Cluster:
    state_dir: Path
    """The Connect server's state (INGEST_SPARK_STATE_DIR): the server running now, its port and log."""
    settings: Path
    """Its settings file (INGEST_SPARK_CONF)."""
    ui: int
    """Its status API's port."""
    python: Path
    """The workers' Python."""
    standalone: StandaloneCluster
    """The master and workers."""

    @property
    def server(self):
        from ingest.lake import connect

        return connect.read_state(self.state_dir)


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


def test_a_connect_server_on_a_standalone_cluster_writes_delta_from_executors_in_other_jvms(
        cluster, mariadb, spark, tmp_path):
    """`spark`: this process already holds a session to the tests' local server, and a session asked for
    the cluster's server is still the cluster's."""
    from pyspark.sql import functions as F

    from ingest.lake.spark import spark_session

    local, python = spark, cluster.python
    folder = tmp_path
    spark = spark_session(cluster.server.url)
    try:
        assert spark.conf.get("spark.master").startswith("spark://") and local.conf.get("spark.master") == "local[2]"
        path = str(folder / "t")
        spark.range(0, 20_000, numPartitions=4).selectExpr("id", "id % 7 AS k").write.format("delta").save(path)
        assert spark.read.format("delta").load(path).where("k = 3").count() == len(range(3, 20_000, 7))

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


def kill_a_busy_executor(ui: int, server_log: Path, during: str, its_worker: bool = False) -> None:
    """SIGKILL an executor JVM while it runs a task (as the OOM killer would), or the worker JVM that
    launched it (as a lost host would: the executor exits with it), and wait until the Connect server
    has lost that executor: the tasks it still ran are Spark's to run again. (Not a lost task: under
    load the task found running may end before the kill lands.)"""
    executor = wait_for(lambda: busy_executor(ui), 120, f"an executor running a task {during}")
    (pid,) = executor_pids(executor)
    if its_worker:
        pid = parent_pid(pid)
        assert b"org.apache.spark.deploy.worker.Worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: f"Lost executor {executor} on " in server_log.read_text(errors="replace"), 60,
             f"the Connect server to lose executor {executor} {during}")


def messages(instance, run_id: str) -> list[str]:
    return [r.user_message or "" for r in instance.all_logs(run_id)]


def source_runs(instance, source: str):
    from dagster import RunsFilter

    return instance.get_runs(RunsFilter(tags={"ingest/source": source}))


def test_every_source_kind_on_a_cluster_syncs_by_sensors_through_executor_server_and_process_kills(
        cluster, mariadb, pg, aws, dynamodb, dagster_postgres, tmp_path, monkeypatch):
    """Snapshots with an executor killed mid-task, sensor batches (MySQL's and PostgreSQL's read on the
    executors, an executor killed in one and a worker in the other), reconciliation, maintenance and dbt,
    then the code server, the daemon and the Connect server killed: silver equals the source after each
    (the module's docstring has the layout)."""
    from dagster import DagsterEventType, DagsterInstance, RunsFilter

    from ingest.lake.merge import live_rows
    from ingest.lake.spark import spark_session
    from ingest.lake.storage import s3a_conf
    from ingest.localdev import demo, demo_dynamodb
    from ingest.localdev.processes import alive, free_port, stop_group

    ui = cluster.ui
    began = time.monotonic()

    def say(what: str) -> None:  # the test's timeline, shown when it fails
        print(f"{time.monotonic() - began:7.1f} s  {what}", flush=True)

    server_log = Path(cluster.server.log)  # every server the state folder records appends to it
    bucket = "cluster-lake"
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)

    # the sources: MySQL `shop.orders`, PostgreSQL `bank.public.accounts`, DynamoDB `carts`, and the dbt
    # project's MySQL `demo` (customers, products, orders, order lines)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE cluster_shop")
        cur.execute("CREATE TABLE cluster_shop.orders (id INT PRIMARY KEY, v INT, s VARCHAR(40), d DECIMAL(12,2))")
        cur.execute(f"INSERT INTO cluster_shop.orders SELECT seq, seq % 97, CONCAT('order ', seq), seq / 8 "
                    f"FROM cluster_shop.seq_1_to_{ROWS}")
    demo.seed(mariadb, "cluster_demo", customers=50, orders=200)
    bank = pg.create_database("bank")
    with pg.connect(bank) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, v int, s varchar(40), d numeric(12,2))")
        conn.execute(f"INSERT INTO accounts SELECT g, g % 97, 'account ' || g, round(g / 8.0, 2) "
                     f"FROM generate_series(1, {ROWS}) g")
        conn.execute("CREATE PUBLICATION bank_pub FOR TABLE accounts")
    carts = demo_dynamodb.client(dynamodb.endpoint_url)
    demo_dynamodb.seed(carts, 2000)
    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    # small enough that every MySQL and PostgreSQL batch below is read on the executors
    cdc = {"min_interval_seconds": 1, "executor_min_bytes": 64 * 1024, "retry_backoff_seconds": 2}
    snapshot = {"chunk_size": 2000, "parallelism": 2, "chunks_per_commit": 1}
    mysql = {"host": "127.0.0.1", "port": mariadb.port, "user": "ingest", "password_env": "INGEST_TEST_MYSQL_PASSWORD",
             "snapshot": snapshot}
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {
        "shop": {**mysql, "database": "cluster_shop", "tables": {"include": ["orders"], "history": ["orders"]},
                 "cdc": cdc},
        "bank": {"kind": "postgres", "host": pg.host, "port": pg.port, "user": pg.user,
                 "password_env": "INGEST_TEST_PG_PASSWORD", "database": bank, "publication": "bank_pub",
                 "slot": "bank_slot", "tables": {"include": ["accounts"]}, "snapshot": snapshot, "cdc": cdc},
        "carts": {"kind": "dynamodb", "region": "us-east-1", "endpoint_url": dynamodb.endpoint_url,
                  "tables": ["carts"], "attributes": {"carts": CART_TYPES},
                  "snapshot": {"segments": 4, "segments_per_commit": 2}, "cdc": {"min_interval_seconds": 1}},
        # what dbt reads: its sensor merges the snapshots into silver
        "demo": {**mysql, "database": "cluster_demo", "tables": {"include": DEMO_TABLES},
                 "cdc": {**cdc, "min_interval_seconds": 5}}},
        "dbt": {"project_dir": str(ROOT / "dbt_project")},
        **SCHEDULES_STOPPED}))  # the test launches the scheduled jobs itself, once each

    # the instance: the shipped dagster.yaml with its PostgreSQL storage
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text() + "\n"
                                       + (ROOT / "deploy" / "dagster-postgres.yaml").read_text())
    # the Connect server is the embedded one of the driver's host, as deploy/systemd's ingest-spark unit
    # runs it: every process finds it through its state folder, whatever port a restart gave it
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_SOURCES": str(sources),
           "INGEST_LAKE_ROOT": f"s3://{bucket}/lake", "INGEST_SPARK_STATE_DIR": str(cluster.state_dir),
           "INGEST_SPARK_CONF": str(cluster.settings), "INGEST_LOCAL_DIR": str(tmp_path / "local"),
           "INGEST_CODE_SERVER_PORT": str(free_port())}
    env.pop("INGEST_SPARK_REMOTE", None)  # the tests' local server
    instance = DagsterInstance.from_config(str(home))

    commands: list[subprocess.Popen] = []  # stopped at the end, should the test fail while one runs

    def dagster(*args: str, log: str) -> subprocess.Popen:
        commands.append(subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster"), *args, "-m", "ingest.defs.definitions"], cwd=ROOT, env=env,
            stdout=open(tmp_path / f"{log}.log", "w"), stderr=subprocess.STDOUT, start_new_session=True))
        return commands[-1]

    def succeeded(process: subprocess.Popen, log: str, timeout: float = 600) -> None:
        assert process.wait(timeout) == 0, (log, (tmp_path / f"{log}.log").read_text()[-4000:])

    # 1. the snapshots, from the command line as a user starts them; an executor dies mid-snapshot
    shop_snapshot = dagster("asset", "materialize", "--select", "shop/orders/snapshot", log="shop_snapshot")
    kill_a_busy_executor(ui, server_log, "in the MySQL snapshot")
    succeeded(shop_snapshot, "shop_snapshot")
    say("executor killed in the MySQL snapshot")
    others = {"bank_snapshot": "bank/accounts/snapshot", "carts_snapshot": "carts/carts/snapshot",
              "demo_snapshot": ",".join(f"demo/{t}/snapshot" for t in DEMO_TABLES)}
    for log, process in [(log, dagster("asset", "materialize", "--select", keys, log=log))
                         for log, keys in others.items()]:
        succeeded(process, log)
    say("snapshots done")

    # 2. the Connect server, the code server and the daemon, as deploy/systemd's units run them, supervised
    # (the server's unit finds the server the module started, recorded in the state folder, and keeps it)
    units = tmp_path / "units"
    units.mkdir()
    for name in ("ingest-spark", "ingest-code-server", "ingest-daemon"):
        shutil.copy(ROOT / "deploy" / "systemd" / f"{name}.service", units)
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "ingest.localdev.supervise", "--units", str(units), "--state", str(tmp_path / "sup")],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=open(tmp_path / "supervise.log", "w"),
        stderr=subprocess.STDOUT, start_new_session=True)
    sessions: dict[int, object] = {}

    def lake():
        """A session to the server running now (a new one after the server was replaced)."""
        def listening():
            server = cluster.server
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
                return server
            except (AttributeError, OSError):  # none recorded yet, or not listening yet
                return None

        server = wait_for(listening, 120, "a Connect server listening")
        if server.pid not in sessions:
            for old in sessions.values():
                old.stop()
            sessions.clear()
            sessions[server.pid] = spark_session(server.url, s3a_conf(
                aws.endpoint_url, "us-east-1", os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                None))
        return sessions[server.pid]

    def table(source: str, name: str, layer: str = "silver"):
        return lake().read.format("delta").load(f"s3a://{bucket}/lake/{source}/{name}/{layer}")

    def silver(source: str, name: str) -> list[tuple]:
        if source == "carts":
            df = live_rows(table(source, name)).selectExpr("cart_id", "customer_id", "total", "status",
                                                           "array_sort(skus)")
        else:
            df = live_rows(table(source, name)).select("id", "v", "s", "d")
        return sorted((tuple(r) for r in df.collect()), key=lambda r: r[0])  # by key: other columns may be NULL

    def shop_rows() -> list[tuple]:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT id, v, s, d FROM cluster_shop.orders ORDER BY id")
            return [tuple(r) for r in cur.fetchall()]

    def bank_rows() -> list[tuple]:
        with pg.connect(bank) as conn:
            return [tuple(r) for r in conn.execute("SELECT id, v, s, d FROM accounts ORDER BY id").fetchall()]

    def cart_rows() -> list[tuple]:
        from decimal import Decimal

        def value(item: dict, name: str, kind: str, convert):  # an update of a missing cart makes one without
            return convert(item[name][kind]) if name in item else None

        return sorted(((i["cart_id"]["S"], value(i, "customer_id", "N", int), value(i, "total", "N", Decimal),
                        value(i, "status", "S", str), value(i, "skus", "SS", sorted))
                       for page in carts.get_paginator("scan").paginate(TableName="carts") for i in page["Items"]),
                      key=lambda r: r[0])

    def converged(source: str, name: str, rows) -> bool:
        return not any(not r.is_finished for r in source_runs(instance, source)) and silver(source, name) == rows()

    def demo_merged() -> bool:
        """Every demo table's silver holds its snapshot (the source does not change)."""
        def count(name: str) -> int:
            with mariadb.connect(database="cluster_demo") as conn, conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {name}")
                return cur.fetchone()[0]

        return not any(not r.is_finished for r in source_runs(instance, "demo")) and all(
            s3.list_objects_v2(Bucket=bucket, Prefix=f"lake/demo/{t}/silver/_delta_log/")["KeyCount"]
            and live_rows(table("demo", t)).count() == count(t) for t in DEMO_TABLES)

    def batch_read_by_executors(source: str, name: str, write) -> str:
        """Write a large change and wait for the sensor's run to append it from the executors; that run."""
        seen = {r.run_id for r in source_runs(instance, source)}
        write()
        marker = re.compile(rf"bronze {source}/{name} batch \S+: appending the changes read by executors")

        def reading():
            for run in source_runs(instance, source):
                if run.run_id not in seen and any(marker.search(m) for m in messages(instance, run.run_id)):
                    return run.run_id
            return None

        return wait_for(reading, 240, f"the {source} sensor's batch run to read on the executors", every=0.5)

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

    try:
        # 3. each sensor's batches: a large one (every row updated, some deleted and inserted) read on the
        # executors, an executor killed during the read; DynamoDB's carts opened, changed and checked out
        killed = {}
        for source, name, write in (("shop", "orders", shop_write), ("bank", "accounts", bank_write)):
            killed[source] = batch_read_by_executors(source, name, write)
            # in bank's, the worker JVM that launched the executor (its host lost), which its supervisor
            # then starts again
            kill_a_busy_executor(ui, server_log, f"in {source}'s batch", its_worker=source == "bank")
            say(f"{'worker' if source == 'bank' else 'executor'} killed in {source}'s batch run {killed[source]}")
        cluster.standalone.restart_dead_workers()
        # the maintenance job (compaction, vacuum and retention) on shop's tables, while its batches commit:
        # the lake's write locks take turns per table. One source's tables: the other sources' take the same
        # code path, and all 25 took 3.5 minutes on the S3 server (3-18 s a table), the test's longest wait
        only_shop = tmp_path / "maintain_shop.yaml"
        only_shop.write_text(yaml.safe_dump({"ops": {"maintain_lake_tables": {"config": {"sources": ["shop"]}}}}))
        maintenance = dagster("job", "execute", "-j", "lake_maintenance", "-c", str(only_shop),
                              log="lake_maintenance")
        demo_dynamodb.write_forever(carts, every=0, rounds=60)
        for source, name, rows in (("shop", "orders", shop_rows), ("bank", "accounts", bank_rows),
                                   ("carts", "carts", cart_rows)):
            wait_for(lambda: converged(source, name, rows), 600, f"{source}'s silver to equal the source", every=2)
            say(f"{source} converged")
        wait_for(demo_merged, 300, "the demo source's silver tables to hold their snapshots", every=2)
        say("demo merged")
        # Spark ran the lost tasks again: the runs an executor died in completed their batches themselves
        for source, run_id in killed.items():
            assert instance.get_run_by_id(run_id).status.value == "SUCCESS", (source, messages(instance, run_id)[-20:])
        # SCD2 history merged on the cluster too: the snapshot's version and the update's of each key
        # still there, one current version per live key
        history = table("shop", "orders", "history")
        assert history.where("_current").count() == len(shop_rows())
        assert history.where(f"id <= {ROWS} AND id % 10 != 3").groupBy("id").count().where("count = 2").count() \
            == len([i for i in range(1, ROWS + 1) if i % 10 != 3])

        # 4. the other jobs the schedules launch, run on the cluster from the command line at once:
        # reconciliation (each silver table against its source, by key-range checksums) and the dbt models
        jobs = {"reconcile_silver": dagster("job", "execute", "-j", "reconcile_silver", log="reconcile_silver"),
                "dbt": dagster("asset", "materialize", "--select", "group:analytics", log="dbt"),
                "lake_maintenance": maintenance}
        for name, job in jobs.items():
            succeeded(job, name)
        (maintained,) = instance.get_runs(RunsFilter(job_name="lake_maintenance"))
        (output,) = instance.get_records_for_run(maintained.run_id, of_type=DagsterEventType.STEP_OUTPUT).records
        per_table = output.event_log_entry.dagster_event.event_specific_data.metadata["per_table"].value
        # (its history and batch log as well when the batch running beside it had made them by then)
        assert all(path.startswith(f"s3a://{bucket}/lake/shop/") for path in per_table) and {
            f"s3a://{bucket}/lake/shop/orders/{layer}" for layer in ("bronze", "silver", "snapshot")
        } <= set(per_table), per_table
        (reconciled,) = instance.get_runs(RunsFilter(job_name="reconcile_silver"))
        evaluations = [r.event_log_entry.dagster_event.event_specific_data for r in instance.get_records_for_run(
            reconciled.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records]
        assert sorted(e.asset_key.to_user_string() for e in evaluations if e.passed) == sorted(
            ["bank/accounts", "carts/carts", "shop/orders", *(f"demo/{t}" for t in DEMO_TABLES)])
        assert silver("shop", "orders") == shop_rows() and silver("bank", "accounts") == bank_rows()
        assert silver("carts", "carts") == cart_rows()
        # the mart dbt built on the cluster from silver, against what the source database computes
        mart = lake().read.format("delta").load(f"s3a://{bucket}/lake/dbt/customer_orders").collect()
        with mariadb.connect(database="cluster_demo") as conn, conn.cursor() as cur:
            cur.execute(demo.CUSTOMER_ORDERS)
            assert sorted((r.customer_id, r.orders, r.revenue) for r in mart) == sorted(tuple(r) for r in cur.fetchall())
        say("reconciled, maintained, dbt built")

        # 5. the code server, then the daemon, killed as the OOM killer would: the supervisor starts each
        # again, and the sensor ticks within 60 s of the kill
        for unit in ("ingest-code-server", "ingest-daemon"):
            pid_file = tmp_path / "sup" / f"{unit}.pid"
            gone = int(pid_file.read_text())
            os.killpg(gone, signal.SIGKILL)
            at = time.time()
            wait_for(lambda: ticks_after(instance, "shop_binlog_sensor", at + 1), 90,
                     f"the shop sensor to tick again after {unit} was killed")
            resumed = time.time() - at
            say(f"the sensor ticked again {resumed:.1f} s after {unit} was killed")
            assert int(pid_file.read_text()) != gone and resumed < 60

        # 6. a later change, and the Connect server (the cluster's driver) killed while the batch's executors
        # read it: the run fails by itself, the supervisor starts a new server on the cluster, and the
        # sensor's next run commits the batch; bronze holds each change once
        doomed = cluster.server

        def later_change():
            with mariadb.connect() as conn, conn.cursor() as cur:
                cur.execute("UPDATE cluster_shop.orders SET s = 'after the kills' WHERE id <= 1500")

        run_id = batch_read_by_executors("shop", "orders", later_change)
        os.kill(doomed.pid, signal.SIGKILL)
        say(f"Connect server {doomed.pid} killed in shop's batch run {run_id}")
        wait_for(lambda: converged("shop", "orders", shop_rows), 600, "shop's silver after the server was killed",
                 every=2)
        say("shop converged after the server was killed")
        replaced = cluster.server
        assert replaced.pid != doomed.pid and not alive(doomed.pid)
        assert lake().conf.get("spark.master").startswith("spark://")  # the new server is the cluster's driver
        assert instance.get_run_by_id(run_id).status.value == "FAILURE", messages(instance, run_id)[-20:]
        bronze = table("shop", "orders", "bronze")
        assert bronze.count() == bronze.select("_pos").distinct().count()
    finally:
        for session in sessions.values():
            session.stop()
        for command in commands:
            stop_group(command, signal.SIGTERM, timeout=30)
        stop_group(supervisor, signal.SIGTERM, timeout=60)
        instance.dispose()


CART_TYPES = {"customer_id": "bigint", "total": "decimal(12,2)", "status": "string", "skus": "array<string>"}
DEMO_TABLES = ["customers", "products", "orders", "order_lines"]


def test_workers_without_the_project_give_an_error_that_names_it_and_the_fix(mariadb, tmp_path):
    """A worker host whose Python lacks the project: the snapshot fails naming spark.pyspark.python and
    the wheel, and writes nothing."""
    from pyspark.sql import SparkSession

    from ingest.lake import connect
    from ingest.lake.datasource import ProjectMissingOnWorkers
    from ingest.localdev.cluster import worker_python

    bare = worker_python(tmp_path, with_project=False)
    folder = tmp_path / "bare"
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


def test_executors_without_a_jdbc_driver_their_server_has_give_an_error_that_names_them_and_the_fix(
        mariadb, tmp_path, monkeypatch):
    """A cluster's server with the MariaDB driver on its own classpath (spark.driver.extraClassPath) that
    does not ship it to its executors: the snapshot fails naming the executors, the driver and the fix,
    and writes nothing. Spark's local-cluster master gives executors JVMs of their own, as the module's
    cluster does (whose cores its server holds)."""
    from ingest.lake import connect
    from ingest.lake.connect import MissingJarsError
    from ingest.lake.spark import spark_session
    from ingest.localdev.processes import SHORT_LIVED_JVM
    from ingest_tests.integration.conftest import snapshot

    shipped = tmp_path / "jars"  # every jar of jvm/jars but the MariaDB driver: what --jars ships
    shipped.mkdir()
    for jar in (ROOT / "jvm" / "jars").glob("*.jar"):
        if not jar.name.startswith("mariadb-java-client-"):
            (shipped / jar.name).symlink_to(jar)
    (driver,) = (ROOT / "jvm" / "jars").glob("mariadb-java-client-*.jar")
    monkeypatch.setenv("INGEST_JARS_DIR", str(shipped))
    params = mysql_table(mariadb, "jarless_t", 10)
    folder = tmp_path
    try:
        state = connect.start_local(folder / "spark", {
            "spark.master": "local-cluster[1,1,1024]", "spark.driver.extraClassPath": str(driver),
            "spark.driver.extraJavaOptions": connect.SHORT_LIVED_SERVER_OPTIONS,
            "spark.executor.extraJavaOptions": " ".join(SHORT_LIVED_JVM)})
        spark = spark_session(state.url)
        with pytest.raises(MissingJarsError, match=r"executors have no MariaDB JDBC driver "
                                                   r"\(org\.mariadb\.jdbc\.Driver\), though its server has one"
                                                   r".*Fix: .*--jars or spark\.jars"):
            snapshot(spark, params, "t", str(folder / "lake" / "t"))
        assert not list((folder / "lake" / "t").glob("_delta_log/*.json"))
        spark.stop()
    finally:
        connect.stop_local(folder / "spark")
