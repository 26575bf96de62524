"""The benchmarks, in one run, against their baselines measured in the same run.

    .venv/bin/python bench/run.py --quick      # small sizes: about 30 minutes, 20 of them the soak
    .venv/bin/python bench/run.py              # the full sizes: hours, most of them the soak
    .venv/bin/python bench/run.py --only soak --soak-batches 200   # one benchmark, a size of your own
    .venv/bin/python bench/run.py --quick --cluster   # the snapshot, CDC and freshness lines on a
                                                      # standalone cluster against the local server

Starts its own MariaDB, PostgreSQL and DynamoDB Local servers (stopped by PID at the end) and one
local SparkSession. Prints one line per benchmark,

    <name>: ours <value> <unit>, baseline <name> <value> <unit>, ratio <ours/baseline>

with the issue's target after it, and writes the figures with the machine's
description to bench/out/<mode>.json (or --json PATH). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BENCH_DIR, SNAPSHOT, Result, free_port, machine  # noqa: E402

# Sizes per mode. The memory benchmark compares a snapshot of `memory_small`
# rows with one of `memory_large` rows, each in a fresh process.
MODES = {
    "quick": {"snapshot_rows": 1_000_000, "cdc_events": 1_000_000, "memory_small": 100_000,
              "memory_large": 1_000_000, "freshness_seconds": 30, "dynamodb_items": 5_000, "tables": 100,
              "soak_batches": 500, "pg_rows": 1_000_000, "pg_events": 300_000, "merge_small": 100_000,
              "merge_big": 1_000_000, "sources_seconds": 60},
    "full": {"snapshot_rows": 10_000_000, "cdc_events": 5_000_000, "memory_small": 1_000_000,
             "memory_large": 10_000_000, "freshness_seconds": 180, "dynamodb_items": 50_000, "tables": 100,
             "soak_batches": 5_000, "pg_rows": 10_000_000, "pg_events": 3_000_000, "merge_small": 100_000,
             "merge_big": 10_000_000, "sources_seconds": 180, "merge_huge_small": 1_000_000,
             "merge_huge": 100_000_000},
}
BENCHMARKS = ("snapshot", "cdc", "large_txn", "memory", "reconcile", "freshness", "sources", "dynamodb", "postgres", "batch",
              "merge", "merge_huge", "soak")


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def commit() -> str:
    """The checked-out commit, `-dirty` when the tree has changes (what the figures were measured on)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCH_DIR.parent, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def merged(path: Path, fresh: list[dict]) -> list[dict]:
    """This run's results, then the earlier ones in `path` for lines this run did not measure."""
    try:
        earlier = json.loads(path.read_text()).get("results", [])
    except (OSError, ValueError):
        earlier = []
    names = {r["name"] for r in fresh}
    return fresh + [r for r in earlier if r.get("name") not in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (the soak's 500 batches take most of it)")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, help="run only these benchmarks")
    parser.add_argument("--soak-batches", type=int, help="batches of the soak benchmark (default: the mode's)")
    parser.add_argument("--tables", type=int, help="tables of the wide source in table_scaling (default: the mode's)")
    parser.add_argument("--cluster", action="store_true",
                        help="the snapshot, CDC and freshness lines on a Spark standalone cluster started here "
                             "(master and two workers in JVMs of their own) against the local server "
                             "(bench/cluster_bench.py); alone unless --only names others")
    parser.add_argument("--json", type=Path, help="where to write the figures (default bench/out/<mode>.json)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    sizes = MODES[mode]
    chosen = [*(args.only or ()), "cluster"] if args.cluster else args.only or BENCHMARKS
    out_path = args.json or BENCH_DIR / "out" / f"{mode}.json"
    # the code the figures were measured on: as checked out when the run starts
    stamp = {"commit": commit(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    from ingest.lake.connect import start_local, stop_local
    from ingest.lake.spark import spark_session
    from ingest.localdev.mariadb import MariaDBServer
    from ingest.localdev.dynamodb_local import DynamoDBLocal
    from ingest.localdev.processes import LOCAL_CREDENTIALS

    os.environ.update(LOCAL_CREDENTIALS)

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    # Small binlog files: a CDC backlog becomes several batches, as the sensor cuts it.
    server = MariaDBServer(work / "mdb", free_port(), extra_args=("--max-binlog-size=67108864",
                                                                  "--innodb-buffer-pool-size=1G"))
    results: list[Result] = []
    try:
        server.start()
        from bench import mysql_bench

        params = mysql_bench.setup_database(server)
        # one Spark Connect server for the run and every process it starts, warm before anything is timed
        spark_state = start_local(work / "spark")
        os.environ["INGEST_SPARK_REMOTE"] = spark_state.url
        spark = spark_session()
        lake = work / "lake"
        for name in chosen:
            log(f"--- {name}")
            if name == "snapshot":
                got = mysql_bench.snapshot_bench(spark, server, params, lake, sizes["snapshot_rows"], log=log,
                                                 **SNAPSHOT)
            elif name == "dynamodb":
                from bench.dynamodb_bench import dynamodb_bench

                got = dynamodb_bench(spark, lambda: DynamoDBLocal(free_port()).start(), lake / "dynamodb",
                                     sizes["dynamodb_items"], log)
            elif name == "postgres":
                from bench.postgres_bench import postgres_bench

                got = postgres_bench(spark, work, lake / "postgres", sizes["pg_rows"], sizes["pg_events"], log,
                                     mysql=(server, params))
            elif name == "memory":
                got = mysql_bench.memory_bench(server, lake, sizes["memory_small"], sizes["memory_large"], log=log,
                                               **SNAPSHOT)
            elif name == "large_txn":  # one transaction of 1M row events against one of 10k, in both modes
                got = mysql_bench.large_txn_bench(spark, server, params, lake, 10_000, 1_000_000, log=log)
            elif name == "reconcile":  # the snapshot's size, and a tenth of it
                got = mysql_bench.reconcile_bench(spark, server, params, lake, sizes["snapshot_rows"] // 10,
                                                  sizes["snapshot_rows"], log=log, **SNAPSHOT)
            elif name == "freshness":
                from bench.freshness import freshness_bench

                got = freshness_bench(server, params, work, sizes["freshness_seconds"], log)
            elif name == "sources":  # a busy deployment: the demo's three sources, then ten MySQL sources
                from bench.multi_source import ten_sources_bench, three_sources_bench

                got = three_sources_bench(server, work, sizes["sources_seconds"], log)
                got += ten_sources_bench(server, work, sizes["sources_seconds"], log)
            elif name == "cdc":
                got = mysql_bench.cdc_bench(spark, server, params, lake, sizes["cdc_events"], log=log)
            elif name == "batch":
                from bench.batch_bench import batch_bench

                got = batch_bench(server, params, work, args.tables or sizes["tables"], log)
            elif name == "merge":
                from bench.merge_bench import merge_bench

                got = merge_bench(spark, work, sizes["merge_small"], sizes["merge_big"], log)
            elif name == "merge_huge" and "merge_huge" in sizes:  # full mode only
                from bench.merge_bench import merge_huge_bench

                got = merge_huge_bench(spark, work, sizes["merge_huge_small"], sizes["merge_huge"], log)
            elif name == "cluster":
                from bench.cluster_bench import cluster_bench

                got = cluster_bench(spark, server, params, work, lake / "cluster", sizes["snapshot_rows"],
                                    sizes["cdc_events"], sizes["freshness_seconds"], log, SNAPSHOT)
            elif name == "soak":
                from bench.soak_bench import soak_bench

                got = soak_bench(server, params, work, args.soak_batches or sizes["soak_batches"], log)
            else:
                continue
            for result in got:
                print(result.line(), flush=True)
            results.extend(got)
    finally:
        if "spark" in locals():  # before the server goes: at exit the client would retry a call to it for minutes
            spark.stop()
        stop_local(work / "spark")
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps({
        "mode": mode, "sizes": sizes, "snapshot_settings": SNAPSHOT, "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
        # the lines this run did not measure keep their latest figures (bench/report.py tables them all)
        "results": merged(out_path, [{**r.to_json(), **stamp} for r in results]),
    }, indent=2, default=str))
    log(f"done in {time.perf_counter() - started:.0f} s; figures in {out_path}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
