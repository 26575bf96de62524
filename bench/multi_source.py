"""Freshness of a busy deployment: several sources at once, each with its writer, under the daemon.

    freshness_3_sources_p50/p95   the demo's three sources (MariaDB `shop`, PostgreSQL `bank`, DynamoDB
                                  Local `carts`), each with the demo's writer changing a few rows every
                                  3 s; the worst source's figure
    machine_cpu_3_sources         the deployment's CPU (Spark Connect server, daemon, code server, run
                                  workers) over the measured window, as a fraction of the machine's cores
    freshness_10_sources_p50      ten MySQL sources (ten databases of one MariaDB), each with a light
                                  writer; the worst source's figure

A probe row per source every few seconds (a new key in a table the source lands) is timed from its
commit to the first silver commit that holds it live, read from the Delta log and the Parquet files
that commit added (a few KB: the measuring stays out of the cores the deployment needs). Baseline: the
same sources' probes seen by a bare poll of the source itself (how soon a reader can see the row at all).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import PROJECT_ROOT, Dagster, Result, free_port  # noqa: E402
from ingest.localdev.processes import stop_group  # noqa: E402

DAGSTER = str(Path(sys.executable).with_name("dagster"))
PASSWORD = "bench-multi-pw"
PROBE_BASE = 1_000_000_000


class SilverWatcher:
    """When each key first appears live in a silver table: from the commits in its Delta log and the
    Parquet files they add (only the key and `_deleted` columns are read)."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key
        self.seen: dict[str, float] = {}
        self._next_version = 0

    def poll(self) -> None:
        import pyarrow.parquet as pq

        log = self.path / "_delta_log"
        while (f := log / f"{self._next_version:020d}.json").exists():
            try:
                actions = [json.loads(line) for line in f.read_text().splitlines() if line]
            except (OSError, ValueError):
                return  # being written: read it next time
            at = next((a["commitInfo"]["timestamp"] / 1000 for a in actions if "commitInfo" in a), time.time())
            for add in (a["add"] for a in actions if "add" in a):
                table = pq.read_table(self.path / add["path"], columns=[self.key, "_deleted"])
                for key, deleted in zip(table.column(self.key).to_pylist(), table.column("_deleted").to_pylist()):
                    if not deleted:
                        self.seen.setdefault(str(key), at)
            self._next_version += 1


@dataclass
class Probe:
    """One source's probe: `write(n)` commits a row with key `key_of(n)` and returns at its commit."""

    source: str
    table: str
    key: str
    write: Callable[[int], None]
    key_of: Callable[[int], str] = str
    visible_at_source: Callable[[int], bool] | None = None
    written: dict[str, float] = field(default_factory=dict)
    raw_seen: dict[str, float] = field(default_factory=dict)


def deployment(sources: dict, work: Path, env: dict[str, str], log) -> Dagster:
    """The sources file, a Dagster home with the shipped instance config, every snapshot materialized,
    and the code server and daemon started (sensors on)."""
    import yaml

    (work / "sources.yaml").write_text(yaml.safe_dump({"sources": sources}))
    home = work / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "deploy" / "dagster.yaml").read_text())
    env.update({"DAGSTER_HOME": str(home), "INGEST_SOURCES": str(work / "sources.yaml"),
                "INGEST_LAKE_ROOT": str(work / "lake")})
    snap = subprocess.run([DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions", "--select",
                           "key:*/*/snapshot"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    if snap.returncode != 0:
        raise RuntimeError(f"the snapshots for the multi-source benchmark failed: {snap.stderr[-3000:]}")
    log(f"{len(sources)} sources snapshotted; starting the code server and the daemon")
    return Dagster(env, work)


def measure(probes: list[Probe], lake: Path, dagster: Dagster, spark_pid: int,
            seconds: float, warmup: float, every: float, log) -> dict:
    """Probes round-robin, one source every `every / len(probes)` s, for `warmup` (unmeasured) then
    `seconds`; waits for every probe in silver. Per source the latencies, and the deployment's CPU."""
    from bench.cpu import by_role, difference
    from ingest.lake.tables import table_location

    watchers = {p.source: SilverWatcher(Path(table_location(str(lake), p.source, p.table, "silver")), p.key)
                for p in probes}
    last = {p.source: p.key_of(PROBE_BASE) for p in probes}

    def waiting() -> list[str]:
        for w in watchers.values():
            w.poll()
        return [s for s, key in last.items() if key not in watchers[s].seen]

    for p in probes:
        p.write(PROBE_BASE)
    deadline = time.monotonic() + 300
    while missing := waiting():
        if time.monotonic() > deadline or dagster.ended():
            raise RuntimeError(f"silver of {missing} never caught up; Dagster's logs: {dagster.log_tail()}")
        time.sleep(0.5)
    log("every source's silver is live; probing")
    stop = threading.Event()

    def watch_sources() -> None:  # the baseline: a bare poll of each source for its newest probe
        while not stop.is_set():
            for p in probes:
                for n_key, at in list(p.written.items()):
                    if n_key not in p.raw_seen and p.visible_at_source and p.visible_at_source(int(n_key)):
                        p.raw_seen[n_key] = time.time()
            time.sleep(0.05)

    raw = threading.Thread(target=watch_sources, daemon=True)
    raw.start()
    n, measured_from = PROBE_BASE + 1, time.monotonic() + warmup
    until = measured_from + seconds
    cpu_before = None
    measured_keys: dict[str, list[int]] = {p.source: [] for p in probes}
    try:
        while time.monotonic() < until:
            for p in probes:
                if time.monotonic() >= measured_from and cpu_before is None:
                    cpu_before, cores_before, window_start = by_role([*dagster.pids, spark_pid]), _machine_busy(), time.time()
                p.write(n)
                p.written[str(n)] = time.time()
                last[p.source] = p.key_of(n)
                if cpu_before is not None:
                    measured_keys[p.source].append(n)
                n += 1
                waiting()
                time.sleep(every / len(probes))
        cpu_after, cores_after, window_end = by_role([*dagster.pids, spark_pid]), _machine_busy(), time.time()
        log("probes written; waiting for the last of each source in silver")
        deadline = time.monotonic() + 300
        while late := waiting():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the last probes of {late} never reached silver; Dagster's logs: "
                                   f"{dagster.log_tail()}")
            time.sleep(0.5)
    finally:
        stop.set()
        dagster.stop()
    latencies = {p.source: [watchers[p.source].seen[p.key_of(k)] - p.written[str(k)] for k in measured_keys[p.source]]
                 for p in probes}
    raw_latencies = {p.source: [p.raw_seen[str(k)] - p.written[str(k)] for k in measured_keys[p.source]
                                if str(k) in p.raw_seen] for p in probes}
    window = window_end - window_start
    spent = difference(cpu_before, cpu_after)
    return {"latencies": latencies, "raw": raw_latencies, "cpu_by_process": spent, "window_seconds": window,
            "deployment_cores": sum(spent.values()) / window / (os.cpu_count() or 1),
            "machine_cores": (cores_after - cores_before) / window / (os.cpu_count() or 1)}


def _machine_busy() -> float:
    """CPU seconds the whole machine spent busy since boot (all cores), from /proc/stat."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def worst(latencies: dict[str, list[float]], figure: Callable[[list[float]], float]) -> tuple[str, float]:
    source = max(latencies, key=lambda s: figure(latencies[s]) if latencies[s] else float("inf"))
    return source, figure(latencies[source])


def _writer(code: str, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """A demo writer in a process of its own (python -c `code`), stopped by PID at the end."""
    return subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def three_sources_bench(server, work: Path, seconds: float, log, every: float = 3.0, warmup: float = 60.0) -> list[Result]:
    """The demo's three sources and writers (ingest/localdev/demo*.py) on this run's servers."""
    import boto3

    from ingest.lake.connect import read_state
    from ingest.localdev import demo, demo_dynamodb, demo_postgres
    from ingest.localdev.dynamodb_local import DynamoDBLocal
    from ingest.localdev.postgres import PostgresServer
    from ingest.localdev.processes import LOCAL_CREDENTIALS

    work = work / "three"
    work.mkdir()
    pg = PostgresServer(free_port()).start()  # a folder of its own: the postgres user must reach it
    ddb_local = DynamoDBLocal(free_port()).start()
    try:
        server.create_ingest_user("ingest", PASSWORD)
        demo.seed(server)
        demo_postgres.seed(pg.port, pg.password, PASSWORD)
        ddb = demo_dynamodb.client(ddb_local.endpoint_url)
        demo_dynamodb.seed(ddb)
        sources = {
            "demo": {"kind": "mysql", "host": "127.0.0.1", "port": server.port, "user": "ingest",
                     "password_env": "BENCH_PASSWORD", "database": "shop",
                     "tables": {"include": ["customers", "products", "orders", "order_lines"],
                                "history": ["customers"]},
                     "cdc": {"watch_seconds": 4, "max_batch_files": 1}},
            "demo_carts": {"kind": "dynamodb", "endpoint_url": ddb_local.endpoint_url,
                           "access_key_id_env": "BENCH_AWS_KEY_ID", "secret_access_key_env": "BENCH_AWS_SECRET",
                           "tables": ["carts"],
                           "attributes": {"carts": {"customer_id": "bigint", "total": "decimal(12,2)",
                                                    "status": "string", "skus": "array<string>"}}},
            "demo_bank": {"kind": "postgres", "host": "127.0.0.1", "port": pg.port, "user": "ingest",
                          "password_env": "BENCH_PASSWORD", "database": "bank", "publication": "demo_bank",
                          "tables": {"include": ["accounts", "transfers"]}},
        }
        env = {**os.environ, "BENCH_PASSWORD": PASSWORD, "BENCH_AWS_KEY_ID": "local", "BENCH_AWS_SECRET": "local",
               **LOCAL_CREDENTIALS}
        dagster = deployment(sources, work, env, log)
        writers = [
            _writer("from pathlib import Path; from ingest.localdev.demo import write_forever; "
                    "from ingest.localdev.mariadb import MariaDBServer; "
                    f"write_forever(MariaDBServer(Path({str(server.datadir)!r}), {server.port}), {every})",
                    env, work / "writer-mysql.log"),
            _writer(f"from ingest.localdev.demo_postgres import write_forever; "
                    f"write_forever({pg.port}, {pg.password!r}, {every})", env, work / "writer-pg.log"),
            _writer(f"from ingest.localdev.demo_dynamodb import client, write_forever; "
                    f"write_forever(client({ddb_local.endpoint_url!r}), {every})", env, work / "writer-ddb.log"),
        ]
        mysql = server.connect(database="shop")
        mysql.autocommit(True)
        mysql_lock = threading.Lock()
        pg_conn = demo_postgres.connect(pg.port, "bank", pg.password)
        pg_lock = threading.Lock()
        probe_ddb = boto3.client("dynamodb", endpoint_url=ddb_local.endpoint_url, region_name="us-east-1",
                                 aws_access_key_id="local", aws_secret_access_key="local")

        def mysql_write(n: int) -> None:
            with mysql_lock, mysql.cursor() as cur:
                cur.execute("INSERT INTO customers (id, name) VALUES (%s, 'probe')", (n,))

        def mysql_seen(n: int) -> bool:
            with mysql_lock, mysql.cursor() as cur:
                cur.execute("SELECT 1 FROM customers WHERE id = %s", (n,))
                return cur.fetchone() is not None

        def pg_write(n: int) -> None:
            with pg_lock:
                pg_conn.execute("INSERT INTO accounts (id, owner, balance, opened_at) VALUES (%s, 'probe', 0, now())",
                                (n,))

        def pg_seen(n: int) -> bool:
            with pg_lock:
                return pg_conn.execute("SELECT 1 FROM accounts WHERE id = %s", (n,)).fetchone() is not None

        def ddb_write(n: int) -> None:
            probe_ddb.put_item(TableName="carts", Item={"cart_id": {"S": f"probe-{n}"}, "status": {"S": "probe"}})

        def ddb_seen(n: int) -> bool:
            return "Item" in probe_ddb.get_item(TableName="carts", Key={"cart_id": {"S": f"probe-{n}"}},
                                                ConsistentRead=True)

        probes = [Probe("demo", "customers", "id", mysql_write, visible_at_source=mysql_seen),
                  Probe("demo_bank", "accounts", "id", pg_write, visible_at_source=pg_seen),
                  Probe("demo_carts", "carts", "cart_id", ddb_write, key_of=lambda n: f"probe-{n}",
                        visible_at_source=ddb_seen)]
        spark_state = read_state(work.parent / "spark")
        got = measure(probes, work / "lake", dagster, spark_state.pid if spark_state else -1, seconds,
                      warmup, every, log)
    finally:
        for w in locals().get("writers", []):
            stop_group(w, signal.SIGTERM, timeout=10)
        ddb_local.stop()
        pg.stop()
    lat, raw = got["latencies"], got["raw"]
    for source in lat:
        log(f"  {source}: n {len(lat[source])}, p50 {statistics.median(lat[source]):.2f} s, "
            f"p95 {pct(lat[source], 95):.2f} s, max {max(lat[source]):.2f} s")
    log("  deployment CPU over the window (s): " + ", ".join(f"{k} {v:.1f}" for k, v in got["cpu_by_process"].items()))
    p50_source, p50 = worst(lat, statistics.median)
    p95_source, p95 = worst(lat, lambda v: pct(v, 95))
    raw_all = [v for values in raw.values() for v in values] or [float("nan")]
    details = {"per_source": {s: {"n": len(v), "p50": round(statistics.median(v), 2), "p95": round(pct(v, 95), 2),
                                  "max": round(max(v), 2)} for s, v in lat.items()},
               "cpu_seconds_by_process": got["cpu_by_process"], "window_seconds": round(got["window_seconds"], 1),
               "machine_cores_busy_fraction": round(got["machine_cores"], 3), "write_every_seconds": every}
    return [
        Result("freshness_3_sources_p50", p50, "raw_source_poll_p50", statistics.median(raw_all), "s",
               higher_is_better=False, limit=5, details={**details, "worst_source": p50_source}),
        Result("freshness_3_sources_p95", p95, "raw_source_poll_p95", pct(raw_all, 95), "s",
               higher_is_better=False, limit=10, details={"worst_source": p95_source}),
        Result("machine_cpu_3_sources", got["deployment_cores"], "whole_machine_busy", got["machine_cores"],
               "of the cores", higher_is_better=False, limit=0.5, details={"cpu_seconds_by_process": got["cpu_by_process"]}),
    ]


def ten_sources_bench(server, work: Path, seconds: float, log, sources_count: int = 10, every: float = 3.0,
                      warmup: float = 60.0) -> list[Result]:
    """Ten MySQL sources, one database each (a table of 1,000 rows), each written every `every` s."""
    from ingest.lake.connect import read_state
    from ingest.localdev.processes import LOCAL_CREDENTIALS

    work = work / "ten"
    work.mkdir()
    server.create_ingest_user("ingest", PASSWORD)
    names = [f"src{i:02d}" for i in range(sources_count)]
    with server.connect() as conn, conn.cursor() as cur:
        for name in names:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {name}")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {name}.items (id BIGINT PRIMARY KEY, note VARCHAR(40), "
                        "qty INT)")
            cur.execute(f"USE {name}")  # the sequence engine's tables are the current database's
            cur.execute("INSERT IGNORE INTO items SELECT seq, 'seed', 1 FROM seq_1_to_1000")
    sources = {name: {"kind": "mysql", "host": "127.0.0.1", "port": server.port, "user": "ingest",
                      "password_env": "BENCH_PASSWORD", "database": name, "tables": {"include": ["items"]},
                      "cdc": {"watch_seconds": 4}} for name in names}
    env = {**os.environ, "BENCH_PASSWORD": PASSWORD, **LOCAL_CREDENTIALS}
    dagster = deployment(sources, work, env, log)
    conns = {name: server.connect(database=name) for name in names}
    locks = {name: threading.Lock() for name in names}
    for c in conns.values():
        c.autocommit(True)

    def writer(name: str):
        def write(n: int) -> None:
            with locks[name], conns[name].cursor() as cur:
                cur.execute("INSERT INTO items VALUES (%s, 'probe', 1)", (n,))
                cur.execute("UPDATE items SET qty = qty + 1 WHERE id = %s", (1 + n % 1000,))

        def seen(n: int) -> bool:
            with locks[name], conns[name].cursor() as cur:
                cur.execute("SELECT 1 FROM items WHERE id = %s", (n,))
                return cur.fetchone() is not None
        return write, seen

    probes = []
    for name in names:
        write, seen = writer(name)
        probes.append(Probe(name, "items", "id", write, visible_at_source=seen))
    spark_state = read_state(work.parent / "spark")
    got = measure(probes, work / "lake", dagster, spark_state.pid if spark_state else -1, seconds,
                  warmup, every, log)
    lat, raw = got["latencies"], got["raw"]
    p50_source, p50 = worst(lat, statistics.median)
    log(f"  worst source {p50_source}: p50 {p50:.2f} s; per source p50: "
        + ", ".join(f"{s} {statistics.median(v):.1f}" for s, v in lat.items()))
    raw_all = [v for values in raw.values() for v in values] or [float("nan")]
    return [Result("freshness_10_sources_p50", p50, "raw_source_poll_p50", statistics.median(raw_all), "s",
                   higher_is_better=False, limit=10,
                   details={"worst_source": p50_source,
                            "per_source_p50": {s: round(statistics.median(v), 2) for s, v in lat.items()},
                            "per_source_p95": {s: round(pct(v, 95), 2) for s, v in lat.items()},
                            "cpu_seconds_by_process": got["cpu_by_process"],
                            "deployment_cores_busy_fraction": round(got["deployment_cores"], 3)})]
