"""The `ingest` command: operations on the project's sources and lake from a shell.

    ingest status [--source NAME] [--table NAME]

Reads the same environment as the Dagster code location: INGEST_SOURCES (the
sources file), INGEST_LAKE_ROOT (the lake) and INGEST_SPARK_MASTER.
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
    from ingest.config import DynamoDBSource
    from ingest.defs.factory import resolve_tables

    if source is not None and source not in config.sources:
        raise UsageError(f"unknown source {source!r}; {config.path} has: {', '.join(sorted(config.sources))}")
    out = []
    for name, src in config.sources.items():
        if source is not None and name != source:
            continue
        tables = list(src.tables) if isinstance(src, DynamoDBSource) else resolve_tables(name, src, config)
        if table is not None:
            if table not in tables:
                raise UsageError(f"unknown table {table!r} in source {name}; it has: {', '.join(tables)}")
            tables = [table]
        out += [(name, src, t) for t in tables]
    if table is not None and source is None and not out:
        raise UsageError(f"no source has a table {table!r}")
    return out


def status(args) -> int:
    from ingest.config import DynamoDBSource, load_config
    from ingest.lake.spark import build_spark_session
    from ingest.status import format_table, source_position, table_status

    selected = select_tables(load_config(args.sources), args.source, args.table)
    spark = build_spark_session(os.environ.get("INGEST_SPARK_MASTER", "local[*]"), "ingest-status")
    spark.sparkContext.setLogLevel("ERROR")
    states = {name: ("n/a (DynamoDB)" if isinstance(src, DynamoDBSource) else source_position(src))
              for name, src, _ in selected}
    rows = [table_status(spark, args.lake, name, t, states[name], binlog=not isinstance(src, DynamoDBSource))
            for name, src, t in selected]
    print(format_table(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", default=os.environ.get("INGEST_SOURCES", str(PROJECT_ROOT / "sources.yaml")),
                        help="the sources file (default: $INGEST_SOURCES or ./sources.yaml)")
    parser.add_argument("--lake", default=os.environ.get("INGEST_LAKE_ROOT", str(local_dir() / "lake")),
                        help="the lake root (default: $INGEST_LAKE_ROOT or .local/lake)")
    commands = parser.add_subparsers(dest="command", required=True)
    st = commands.add_parser(
        "status", help="per source and table: snapshot, last batch, committed position, lag, retention headroom",
        description="Per source and table: the latest snapshot, the last committed change batch and how long "
                    "ago, the position committed through, when silver last merged, how far the source's "
                    "binlog head is past it, and how many binlog files the server may purge before that "
                    "position is lost. Read from the Delta log, not Dagster's event log.")
    st.add_argument("--source", help="only this source")
    st.add_argument("--table", help="only this table")
    st.set_defaults(run=status)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ingest.config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, ConfigError) as exc:
        print(f"ingest {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
