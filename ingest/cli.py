"""The `ingest` command: operations on the project's sources and lake from a shell.

    ingest status [--source NAME] [--table NAME]
    ingest backfill SOURCE [--table NAME ...] (--partitions K1,K2 | --from K1 [--to K2] | --all) [--wait]
    ingest resnapshot SOURCE TABLE [--wait]
    ingest spark start|stop|status|run
    ingest instance

Reads the same environment as the Dagster code location: INGEST_SOURCES (the
sources file), INGEST_LAKE_ROOT (the lake) and INGEST_SPARK_REMOTE.
"""

from __future__ import annotations

import argparse
import os
import sys

from ingest.paths import PROJECT_ROOT, local_dir


class UsageError(Exception):
    pass


def select_tables(config, source: str | None, table: str | None) -> list[tuple[str, object, str]]:
    """(source name, source, table) for the selection; unknown names raise UsageError naming what exists."""
    from ingest.config import DynamoDBSource, PostgresSource
    from ingest.defs.mysql import resolve_tables

    if source is not None and source not in config.sources:
        raise UsageError(f"unknown source {source!r}; {config.path} has: {', '.join(sorted(config.sources))}")
    out = []
    for name, src in config.sources.items():
        if source is not None and name != source:
            continue
        tables = (list(src.tables) if isinstance(src, DynamoDBSource) else src.tables.static_tables()
                  if isinstance(src, PostgresSource) else resolve_tables(name, src, config))
        if table is not None:
            if table not in tables:
                raise UsageError(f"unknown table {table!r} in source {name}; it has: {', '.join(tables)}")
            tables = [table]
        out += [(name, src, t) for t in tables]
    if table is not None and source is None and not out:
        raise UsageError(f"no source has a table {table!r}")
    return out


def select_partitions(existing: list[str], keys: list[str] | None, first: str | None, last: str | None,
                      everything: bool, what: str) -> list[str]:
    """The partitions a backfill covers, from a list, a range [first, last] or all; unknown keys raise
    UsageError naming them and what exists (pure)."""
    def known(key: str) -> str:
        if key not in existing:
            shown = ", ".join(existing[-5:]) if existing else "none yet"
            raise UsageError(f"{what} has no partition {key!r}; its latest are: {shown}. Partitions are added "
                             "by the sensor (or `dagster asset materialize`) as batches are cut")
        return key

    if everything:
        if not existing:
            raise UsageError(f"{what} has no partitions yet")
        return list(existing)
    if keys:
        return [known(k) for k in keys]
    if first is None:
        raise UsageError("name the partitions: --partitions K1,K2, --from K1 [--to K2], or --all")
    lo = existing.index(known(first))
    hi = existing.index(known(last)) if last else len(existing) - 1
    if hi < lo:
        raise UsageError(f"--to {last} comes before --from {first} in {what}")
    return existing[lo:hi + 1]


def backfill_targets(config, source: str, tables: list[str] | None) -> tuple[list[list[str]], list[str]]:
    """The asset keys a batch backfill runs for the selection, and the asset whose partitions it uses."""
    from ingest.config import DynamoDBSource
    from dagster import AssetKey

    from ingest.defs.assets import table_key
    from ingest.lake.tables import BATCH_LOG, CHANGES, SOURCE_BATCH_LOG

    selected = [t for _, _, t in select_tables(config, source, None)]
    for t in tables or []:
        if t not in selected:
            raise UsageError(f"unknown table {t!r} in source {source}; it has: {', '.join(selected)}")
    tables = tables or selected
    if isinstance(config.sources[source], DynamoDBSource):
        if len(tables) != 1:
            raise UsageError(f"DynamoDB source {source}: each table has its own batches; name one with --table "
                             f"({', '.join(selected)})")
        changes = [table_key(source, tables[0], CHANGES)]
        logs = [table_key(source, tables[0], BATCH_LOG)]
    else:  # one binlog read serves every table of the source: its changes asset comes whole
        changes = [table_key(source, t, CHANGES) for t in selected]
        # the batch log records a batch as complete: only when every table's silver is in the run
        logs = [AssetKey([source, SOURCE_BATCH_LOG])] if set(tables) == set(selected) else []
    keys = changes + [table_key(source, t) for t in tables] + logs
    return [k.path for k in keys], changes[0].path


def backfill(args) -> int:
    from ingest.config import load_config
    from ingest.webserver import BACKFILL_DONE, BACKFILL_OK, Webserver

    keys, partitioned = backfill_targets(load_config(args.sources), args.source, args.table)
    server = Webserver(args.url)
    existing = server.partition_keys(partitioned)
    if existing is None:
        raise UsageError(f"the webserver at {args.url} has no asset {'/'.join(partitioned)}: is it serving "
                         f"the same sources file ({args.sources})?")
    partitions = select_partitions(existing, args.partitions.split(",") if args.partitions else None,
                                   args.first, args.last, args.all, f"source {args.source}")
    backfill_id = server.launch_backfill(keys, partitions, f"ingest backfill {args.source}")
    print(f"backfill {backfill_id}: {len(partitions)} partitions ({partitions[0]} .. {partitions[-1]}) of "
          f"{len(keys)} assets; see {args.url.rstrip('/')}/runs/b/{backfill_id}")
    if not args.wait:
        return 0
    state = server.wait(lambda: server.backfill_status(backfill_id), BACKFILL_DONE, args.timeout)
    print(f"backfill {backfill_id}: {state}")
    return 0 if state in BACKFILL_OK else 1


def resnapshot(args) -> int:
    from ingest.config import load_config
    from ingest.defs.assets import table_key
    from ingest.webserver import RUN_DONE, Webserver

    ((name, _, table),) = select_tables(load_config(args.sources), args.source, args.table)
    server = Webserver(args.url)
    # The table's snapshot alone: the other tables' batches keep running. Silver takes the new
    # snapshot in with the table's next batch (merge, then catch-up from the new log start).
    run_id = server.launch_run([table_key(name, table, "snapshot").path], {"ingest/resnapshot": f"{name}.{table}"})
    print(f"run {run_id}: a new snapshot of {name}/{table}; see {args.url.rstrip('/')}/runs/{run_id}")
    if not args.wait:
        return 0
    state = server.wait(lambda: server.run_status(run_id), RUN_DONE, args.timeout)
    print(f"run {run_id}: {state}")
    return 0 if state == "SUCCESS" else 1


def status(args) -> int:
    from ingest.config import MySQLSource, PostgresSource, load_config
    from ingest.lake.storage import spark_lake_root
    from ingest.sources.mysql.positions import BinlogPosition
    from ingest.sources.postgres.positions import Lsn
    from ingest.status import binlog_view, committed, format_table, logged_ends, row, slot_view

    # the Delta logs are read as files (local or S3, see lake/deltalog.py): no Spark, an answer in seconds
    selected = select_tables(load_config(args.sources), args.source, args.table)
    lake = spark_lake_root(args.lake)
    rows = []
    for name in dict.fromkeys(name for name, _, _ in selected):
        src = next(s for n, s, _ in selected if n == name)
        parse = (BinlogPosition.from_metadata if isinstance(src, MySQLSource) else
                 Lsn.from_metadata if isinstance(src, PostgresSource) else None)
        logged = logged_ends(lake, name, parse) if parse else []
        tables = [committed(lake, name, t, parse, logged) for n, _, t in selected if n == name]
        view = (binlog_view(src, [t.end for t in tables if t.end is not None]) if isinstance(src, MySQLSource)
                else slot_view(name, src) if isinstance(src, PostgresSource) else "n/a (DynamoDB)")
        rows += [row(t, view) for t in tables]
    print(format_table(rows))
    return 0


def check(args) -> int:
    from ingest.config import DynamoDBSource, PostgresSource, load_config
    from ingest.defs.mysql import resolve_tables
    from ingest.sources.mysql.preflight import check_source, failed

    config = load_config(args.sources)
    names = [args.source] if args.source else list(config.sources)
    problems = 0
    for name in names:
        if name not in config.sources:
            raise UsageError(f"no source {name!r} in {config.path} (it has {', '.join(config.sources)})")
        source = config.sources[name]
        if isinstance(source, DynamoDBSource):
            print(f"skip  source {name}: DynamoDB sources are checked when their assets run")
            continue
        if isinstance(source, PostgresSource):
            from ingest.defs.postgres import check_postgres

            findings = check_postgres(name, source)
        else:
            findings = check_source(name, source, resolve_tables(name, source, config))
        print("\n".join(f.line() for f in findings))
        problems += len(failed(findings))
    print(f"{problems} problem(s)" if problems else "all checks passed")
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", default=os.environ.get("INGEST_SOURCES", str(PROJECT_ROOT / "sources.yaml")),
                        help="the sources file (default: $INGEST_SOURCES or ./sources.yaml)")
    parser.add_argument("--lake", default=os.environ.get("INGEST_LAKE_ROOT", str(local_dir() / "lake")),
                        help="the lake root (default: $INGEST_LAKE_ROOT or .local/lake)")
    commands = parser.add_subparsers(dest="command", required=True)
    st = commands.add_parser(
        "status", help="per source and table: snapshot, last batch, committed position, changes waiting, "
                       "retention headroom",
        description="Per source and table: the latest snapshot, the last committed change batch and how long "
                    "ago, the position the lake has the table's changes through, when silver last merged, "
                    "which tables the source has changes for after that position (and how many bytes of "
                    "its log are not read yet), and how many binlog files the server may purge before that "
                    "position is lost. Read from the Delta log, not Dagster's event log.")
    st.add_argument("--source", help="only this source")
    st.add_argument("--table", help="only this table")
    st.set_defaults(run=status)

    ck = commands.add_parser(
        "check", help="preflight: connection, binlog settings, grants, anonymous users, tables, keys and types",
        description="Connects to each MySQL/MariaDB source and reports, before anything runs: the binlog "
                    "settings CDC needs, the ingest user's grants, anonymous accounts that shadow it, and per "
                    "table whether it exists, has a primary key and only column types the contract covers "
                    "(less the columns tables.columns.<table>.exclude leaves out). Each problem names its fix. "
                    "Exit status 1 when there is a problem.")
    ck.add_argument("--source", help="only this source")
    ck.set_defaults(run=check)

    def webserver_args(p):
        p.add_argument("--url", default=os.environ.get("INGEST_WEBSERVER_URL", "http://127.0.0.1:3000"),
                       help="the Dagster webserver (default: $INGEST_WEBSERVER_URL or http://127.0.0.1:3000)")
        p.add_argument("--wait", action="store_true", help="wait until it is done; exit 1 if it failed")
        p.add_argument("--timeout", type=float, default=3600, help="seconds --wait waits (default 3600)")

    bf = commands.add_parser(
        "backfill", help="launch a backfill of change batches (changes and silver), as the UI does",
        description="Launches an asset backfill of a source's change batches through the webserver's GraphQL "
                    "API (launchPartitionBackfill), so it is listed on the UI's backfills page and the daemon "
                    "runs it. The batches of a range run in order in one run (single-run backfill policy).")
    bf.add_argument("source", help="the source, as named in the sources file")
    bf.add_argument("--table", action="append", help="only this table's silver (repeatable; DynamoDB: required "
                                                     "when the source has several tables)")
    which = bf.add_mutually_exclusive_group()
    which.add_argument("--partitions", help="comma-separated partition keys")
    which.add_argument("--from", dest="first", help="first partition of a range")
    which.add_argument("--all", action="store_true", help="every partition")
    bf.add_argument("--to", dest="last", help="last partition of a range (default: the newest)")
    webserver_args(bf)
    bf.set_defaults(run=backfill)

    rs = commands.add_parser(
        "resnapshot", help="take a new snapshot of one table while the others keep syncing",
        description="Launches a run of the table's snapshot asset through the webserver. A finished snapshot "
                    "is never resumed, so this starts a new one; the table's next change batch merges it into "
                    "silver and catches up on every change since its log start. The other tables' batches "
                    "keep running meanwhile.")
    rs.add_argument("source", help="the source, as named in the sources file")
    rs.add_argument("table", help="the table")
    webserver_args(rs)
    rs.set_defaults(run=resnapshot)

    ins = commands.add_parser(
        "instance", help="check that the Dagster instance's storage answers (what the units run before starting)",
        description="Opens the Dagster instance of DAGSTER_HOME and asks its storage one question. Exit status 2, "
                    "with the storage named (never its credentials) and the fix, when it does not answer: "
                    "deploy/systemd's webserver and daemon units run this before each start.")
    ins.set_defaults(run=instance)

    sp = commands.add_parser(
        "spark", help="the embedded Spark Connect server: start, stop, status, run (in the foreground)",
        description="Every run reaches Spark through a Spark Connect server. Unless INGEST_SPARK_REMOTE (or "
                    "spark.remote in the sources file) names one, the first run starts a local server and later "
                    "runs reuse it; its PID, port and log are under .local/spark-connect (INGEST_SPARK_STATE_DIR).")
    sp.add_argument("action", choices=("start", "stop", "status", "run"),
                    help="run: start it (or find it running) and stay until it ends or this command is stopped, "
                         "which stops it: what a supervisor runs (deploy/systemd/ingest-spark.service)")
    sp.set_defaults(run=spark)
    return parser


def instance(args) -> int:
    from ingest.defs.instance import check_instance

    print(f"instance ok: {check_instance()}")
    return 0


def spark(args) -> int:
    from ingest.lake.connect import read_state, remote_url, start_local, state_dir, stop_local

    remote = remote_url()
    if args.action == "run":
        return run_spark()
    if args.action == "start":
        state = start_local()
        print(f"Spark Connect server up at {state.url} (pid {state.pid}, log {state.log})")
    elif args.action == "stop":
        state = stop_local()
        print(f"stopped the Spark Connect server (pid {state.pid})" if state else
              f"no local Spark Connect server recorded in {state_dir()}")
    else:
        state = read_state()
        print(f"local: {state.url} (pid {state.pid}, log {state.log})" if state else
              f"local: not running (state in {state_dir()}); the next run starts it")
        if remote:
            print(f"remote: {remote} (INGEST_SPARK_REMOTE): runs use this one, not the local server")
        return 0 if state or remote else 1
    return 0


def run_spark() -> int:
    """The embedded server in the foreground: exit 1 when it ends by itself (a supervisor starts this
    again, which starts a new one); stop it on SIGTERM or SIGINT."""
    import signal
    import threading

    from ingest.lake.connect import start_local, stop_local
    from ingest.localdev.processes import alive

    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    state = start_local()
    print(f"Spark Connect server up at {state.url} (pid {state.pid}, log {state.log})", flush=True)
    while not stopped.is_set() and alive(state.pid):
        stopped.wait(1)
    if stopped.is_set():
        stop_local(timeout=20)  # within the supervisor's 30 s, which then kills this process, not the server
        return 0
    print(f"the Spark Connect server (pid {state.pid}) ended; see {state.log}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    from ingest.config import ConfigError
    from ingest.defs.instance import InstanceUnavailable
    from ingest.lake.connect import SparkUnavailable
    from ingest.lake.deltalog import LakeUnavailable
    from ingest.webserver import WebserverError

    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, ConfigError, WebserverError, SparkUnavailable, LakeUnavailable, InstanceUnavailable) as exc:
        print(f"ingest {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
