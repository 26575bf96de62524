"""Shared fixtures. Tiers: unit/ (no services), spark/ (one shared Spark Connect server),
integration/ (a real MariaDB started here, stopped by PID at the end)."""

from __future__ import annotations

import os
import signal

import pytest

from ingest.localdev.processes import free_port  # noqa: F401 - the tests' ports come from here


# A pytest started in the background by a script (no job control) begins with SIGINT ignored, and every
# process a test starts inherits that. `dagster dev` gives SIGTERM SIGINT's handler, so it then ignored
# both, and each test that stops one with SIGINT waited its 60 s for the SIGKILL. As in a terminal:
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_SIGTERM_AT_START = signal.getsignal(signal.SIGTERM)


@pytest.fixture(autouse=True)
def _sigterm_as_at_start():
    """SIGTERM's disposition put back after every test. Dagster's `capture_interrupts` (materialize,
    execute_in_process) ends by giving SIGTERM whatever SIGINT has; in a pytest started in the background
    by a script (no job control) SIGINT is ignored, so SIGTERM was left ignored, and an ignored signal
    stays ignored in every process a later test of the worker starts: bin/demo's bash could not trap it
    (test_demo waited its 300 s), and a JVM installs no handler for it (its stop waits for the SIGKILL)."""
    yield
    if signal.getsignal(signal.SIGTERM) is not _SIGTERM_AT_START:
        signal.signal(signal.SIGTERM, _SIGTERM_AT_START)


@pytest.fixture(scope="session")
def spark_server(tmp_path_factory):
    """One Spark Connect server for the whole test session, shared by the xdist workers (the first
    starts it, the last stops it by PID) and by every `dagster` process a test starts (through
    INGEST_SPARK_REMOTE)."""
    import fcntl
    import tempfile
    from pathlib import Path

    from ingest.lake.connect import HEAP_OPTIONS, start_local, stop_local

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"solo-{os.getpid()}"
    folder = Path(tempfile.gettempdir()) / f"ingest-tests-spark-{run}"
    folder.mkdir(exist_ok=True)

    def users(delta: int) -> int:
        with open(folder / "users.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            count = folder / "users"
            n = int(count.read_text() or 0) if count.exists() else 0
            count.write_text(str(n + delta))
            return n + delta

    users(+1)
    # two local cores: the tests' own processes need the rest. Interpreted expressions: the tests' tables
    # are small, and generating and compiling code for each of their thousands of small queries was a
    # third of the server's CPU (a loop of small appends, merges and counts: 146 CPU-s against 224-232
    # with code generation), which the whole suite waits on. The two evaluators give the same results;
    # production's small batches run this way too (lake/write.py SMALL_BATCH_CONF), and the servers tests
    # start for the demo and the cluster keep the production settings. The parallel collector instead of
    # G1, with the production server's generations: the spark tier (three workers, two rounds each) took
    # 285 and 285 CPU-s of the server and 171 and 172 s with G1, 249 and 246 CPU-s and 152 and 149 s with
    # it (the serial collector 238 and 262 CPU-s). Not G1's marking (2.6 s of cycles in 152 s): its write
    # barriers and remembered sets, paid in the server's own threads on every allocation of the tests'
    # thousands of small queries. Pauses do not matter here. docs/performance.md has the figures.
    # Half as eager a JIT (each tier's thresholds doubled): the tests' queries are thousands of short
    # different plans, and the server spent 35 % of its CPU compiling them (C1 and C2 threads, 146 of
    # 415 CPU-s in the spark tier). The spark tier, three rounds alternating: 247, 240, 265 s and 364,
    # 353, 391 server CPU-s against 272, 256, 279 s and 411, 395, 415 (C1 alone: 313 s, 477 CPU-s).
    parallel = (*(o for o in HEAP_OPTIONS if "G1" not in o and "InitiatingHeapOccupancy" not in o),
                "-XX:+UseParallelGC", "-XX:CompileThresholdScaling=2")
    # It logs the predicate the Parquet reader filters each file by, which the production server keeps
    # quiet (connect.QUIET_LOGGERS): test_ordered_merge reads there which keys a merge pushed.
    state = start_local(folder, {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2",
                                 "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                                 "spark.driver.extraJavaOptions": " ".join(parallel)},
                        log_levels={"org.apache.parquet.filter2.compat.FilterCompat": "info"})
    os.environ["INGEST_SPARK_REMOTE"] = state.url
    yield state
    if users(-1) == 0:
        stop_local(folder)


@pytest.fixture(scope="session")
def spark(spark_server):
    from ingest.lake.spark import spark_session

    session = spark_session(spark_server.url)
    yield session
    session.stop()  # releases this client's session on the server before the last worker stops it


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    """A throwaway MariaDB with the CDC binlog settings and a least-privilege ingest user."""
    from ingest.localdev.mariadb import MariaDBServer

    # A short path: the server's unix socket path must stay under 108 bytes.
    server = MariaDBServer(tmp_path_factory.mktemp("mdb"), free_port())
    server.start()
    server.create_ingest_user("ingest", "ingest-test-pw")
    os.environ["INGEST_TEST_MYSQL_PASSWORD"] = "ingest-test-pw"
    yield server
    server.stop()


@pytest.fixture(scope="module")
def dynamodb():
    """DynamoDB Local (AWS's emulator, with Streams), one per test module: after some 20k stream
    records one instance writes later stream tables several times slower. Stopped by PID."""
    from ingest.localdev.dynamodb_local import DynamoDBLocal
    from ingest.localdev.processes import LOCAL_CREDENTIALS, SHORT_LIVED_JVM

    for key, value in LOCAL_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    server = DynamoDBLocal(free_port(), java_options=SHORT_LIVED_JVM).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto():
    """A moto server over HTTP: the tests' S3 server. Stopped by PID at the end."""
    from ingest.localdev.moto import MotoServer
    from ingest.localdev.processes import LOCAL_CREDENTIALS

    for key, value in LOCAL_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    server = MotoServer(free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def aws(moto, dynamodb, monkeypatch):
    """A lake on S3: moto's S3 for the lake, DynamoDB Local for the per-table write locks."""
    monkeypatch.setenv("INGEST_S3_ENDPOINT_URL", moto.endpoint_url)
    monkeypatch.setenv("INGEST_LOCK_ENDPOINT_URL", dynamodb.endpoint_url)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return moto


@pytest.fixture(scope="module")
def pg():
    """A PostgreSQL 15 server with wal_level=logical, per module."""
    from ingest.localdev.postgres import PostgresServer

    server = PostgresServer(free_port()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def dagster_postgres(monkeypatch):
    """A PostgreSQL server with an empty `dagster` database, and the variables dagster-postgres.yaml reads."""
    from ingest.localdev.postgres import PostgresServer

    server = PostgresServer(free_port()).start()
    try:
        variables = {"DAGSTER_PG_HOST": server.host, "DAGSTER_PG_PORT": str(server.port),
                     "DAGSTER_PG_USER": server.user, "DAGSTER_PG_PASSWORD": server.password,
                     "DAGSTER_PG_DB": server.create_database("dagster")}
        for key, value in variables.items():
            monkeypatch.setenv(key, value)
        yield server
    finally:
        server.stop()


# The longest test files first (their seconds in a whole three-worker run): the xdist workers take a file
# at a time (--dist loadfile) in this order (bin/test's --no-loadscope-reorder: xdist's own order is by
# number of tests, which started the cluster module 546 s into the run and the kill harness later still),
# and a long file handed out last keeps one worker busy while the others have nothing left to do.
_LONGEST_FIRST = ("test_standalone.py",  # 808 s
                  "test_operations.py", "test_kill_harness.py", "test_cdc.py", "test_dynamodb.py",  # 512-232
                  "test_batch_scope.py", "test_cdc_edges.py", "test_dagster_cli.py", "test_security.py",  # 228-138
                  "test_postgres_source.py", "test_maintenance.py", "test_postgres_kill.py", "test_filters.py",
                  "test_transforms.py", "test_postgres_changes.py", "test_dynamodb_kill.py")  # 129-98


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
