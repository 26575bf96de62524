"""Delta writes that commit rows and their source position together, idempotently."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from ingest.lake.columns import SOURCE_NAME, lake_name, widenings
from ingest.lake.commits import Txn, encode_user_metadata
from ingest.lake.deltalog import latest, table_version
from ingest.retry import retrying

T = TypeVar("T")

# Settings for one command (txnAppId / txnVersion / userMetadata for MERGE, OPTIMIZE's file sizes,
# a write's row groups) go through session confs, which every thread of the session shares: one such
# command at a time per process (re-entrant: a command may set more within another's settings).
_SESSION_CONF_LOCK = threading.RLock()

_TXN_CONFS = (
    "spark.databricks.delta.write.txnAppId",
    "spark.databricks.delta.write.txnVersion",
    "spark.databricks.delta.commitInfo.userMetadata",
)


# Delta's optimistic concurrency: a commit that lost a race to another writer of
# the same table (two batch runs of a backfill, or two creating the table).
_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
              "ConcurrentTransactionException", "ConcurrentWriteException", "ProtocolChangedException",
              "MetadataChangedException", "DELTA_CONCURRENT_", "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED")


class WriteConflict(RuntimeError):
    pass


def is_write_conflict(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(name in text for name in _CONFLICTS)


def retry_conflicts(apply: Callable[[], T], what: str, attempts: int = 6) -> T:
    """Run a lake write again when it lost a commit race to another writer.

    Safe because every write here is idempotent (txn ids, the ordered merge):
    the second attempt reads the winner's commit and adds only what is missing.
    """
    def give_up(exc: BaseException, tries: int) -> WriteConflict:
        return WriteConflict(f"{what}: lost the commit race to other writers {tries} times ({type(exc).__name__}). "
                             "Fix: run fewer batches of the source at once; a re-run continues safely")

    return retrying(apply, is_write_conflict, give_up, attempts=attempts, base_delay=0.5)


@dataclass(frozen=True)
class WriteOutcome:
    version: int | None
    """Table version after the write."""
    committed: bool
    """False when Delta skipped the write because the txn was already committed."""
    rows: int = 0
    """Rows the commit wrote (0 when skipped)."""

    @classmethod
    def after(cls, path: str, before: int | None) -> WriteOutcome:
        head = latest(path)
        if head is None or head[0] == before:
            return cls(before, False, 0)
        return cls(head[0], True, int(head[1].get("numOutputRows", head[1].get("numTargetRowsInserted", 0))))


@contextmanager
def session_conf(spark, settings: dict[str, str]) -> Iterator[None]:
    """`settings` on the session for one command, put back after: the session may be a leased one that
    later runs reuse, and its threads share it (one such command at a time per process). A key the
    session had gets its value back; one it did not is unset (unsetting a key the server sets would
    give it Spark's built-in default, not the server's)."""
    with _SESSION_CONF_LOCK:
        before = {key: spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in before.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


SMALL_BATCH_CONF = {
    # Projections built without code generation. Each Spark task of a Delta commit (the log's state
    # after each commit, its AddFile decoding, a file's statistics) generates and formats Java source
    # for the projections it builds, though the compiled class is cached: for a few rows that was a
    # quarter of the Spark server's CPU per change batch (JFR samples in CodeFormatter and
    # GenerateSafeProjection). Interpreted projections cost nothing to build and little for a few
    # rows; whole-stage code generation, which large reads use, is not affected. A batch of 5 rows
    # into a 1,000-row silver: server CPU 3.75 s -> 2.85 s, wall 2.55 s -> 2.04 s (bronze append,
    # merge and batch log commit, alternating in one session).
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Session settings for the commits of a change batch small enough to be decoded by its run."""


def small_batch_settings(spark):
    """SMALL_BATCH_CONF for the commits of a small change batch (unset after; see session_conf)."""
    return session_conf(spark, SMALL_BATCH_CONF)


def session_txn(spark, metadata: dict[str, Any], txn: Txn):
    return session_conf(spark, dict(zip(_TXN_CONFS, (txn.app_id, str(txn.version),
                                                      encode_user_metadata(metadata, txn)))))


def lake_columns(df):
    """`df` with every column under its lake name, the source name kept in the column's metadata
    (see lake/columns.py)."""
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    if all(lake_name(c) == c for c in df.columns):
        return df
    return df.select(*[F.col(spark_ident(c)).alias(lake_name(c), metadata={SOURCE_NAME: c}) if lake_name(c) != c
                       else F.col(spark_ident(c)) for c in df.columns])


def widen_for(spark, df, path: str) -> dict[str, str]:
    """Make the columns of the table at `path` wide enough for `df`'s: a source MODIFY to a wider type.

    The table is rewritten once, in one overwrite commit, with the wider types: in-place widening
    would need Delta's typeWidening reader feature, which other Delta readers refuse. Returns the
    widened columns and their new types ({} when none needed it, the usual case)."""
    from pyspark.sql import functions as F

    from ingest.lake.tables import spark_ident

    table = spark.read.format("delta").load(path)
    plan = widenings(dict(table.dtypes), dict(df.dtypes), path)
    if plan:
        fields = {f.name: f for f in table.schema.fields}
        wide = table.select(*[F.col(spark_ident(c)).cast(plan[c]).alias(c, metadata=fields[c].metadata) if c in plan
                              else F.col(spark_ident(c)) for c in table.columns])
        version = table_version(path) or 0
        append(wide, path, {"kind": "widen", "columns": plan}, Txn("ingest-widen", version), overwrite=True,
               overwrite_schema=True)
    return plan


STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def stats_on(columns: Sequence[str]) -> dict[str, str]:
    """The table property that keeps Delta's per-file statistics (min, max, nulls) to `columns`.

    A landing table (snapshot, bronze) is read whole or by a few columns: statistics of the others
    cost about a sixth of its writes (BigDecimal and string comparisons per row) and serve no read
    of ours. Silver keeps them for every column, for the readers of the lake."""
    from ingest.lake.tables import spark_ident

    return {STATS_COLUMNS: ",".join(spark_ident(lake_name(c)) for c in columns)}


def _drop_other_stats_columns(df, path: str, properties: dict[str, str]) -> None:
    """Before an overwrite: Delta keeps an existing table's properties (a write's own apply when it
    creates the table) and refuses a write whose schema lacks a column STATS_COLUMNS names (a new
    primary key). A table whose columns differ from this write's goes back to statistics on every
    column."""
    spark = df.sparkSession
    row = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").select("properties").first()
    named = ((row["properties"] or {}) if row else {}).get(STATS_COLUMNS)
    if named and named != properties.get(STATS_COLUMNS):
        spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES IF EXISTS ('{STATS_COLUMNS}')")


def append(df, path: str, metadata: dict[str, Any], txn: Txn, overwrite: bool = False,
           overwrite_schema: bool = False, merge_schema: bool = False,
           properties: dict[str, str] | None = None, max_rows_per_file: int | None = None,
           parquet: dict[str, str] | None = None) -> WriteOutcome:
    """Append (or overwrite with) `df` in one commit that carries `metadata`.

    Safe to repeat: a second call with the same txn adds nothing. With `merge_schema` the
    table gains `df`'s new columns, and its columns widen where `df`'s types are wider.
    `properties`: table properties for a table this write creates (an existing table keeps its own).
    `max_rows_per_file`: a task starts a new file after this many rows.
    `parquet`: Parquet writer settings (Hadoop-style keys such as `parquet.block.size`) for this write
    only.
    """
    df = lake_columns(df)
    if merge_schema and table_version(path) is not None:
        widen_for(df.sparkSession, df, path)
    before = table_version(path)
    if overwrite_schema and properties and before is not None:
        _drop_other_stats_columns(df, path, properties)
    writer = (
        df.write.format("delta")
        .mode("overwrite" if overwrite else "append")
        .option("txnAppId", txn.app_id)
        .option("txnVersion", txn.version)
        .option("userMetadata", encode_user_metadata(metadata, txn))
    )
    if overwrite_schema:
        writer = writer.option("overwriteSchema", "true")
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    for key, value in (properties or {}).items():
        writer = writer.option(key, value)
    if max_rows_per_file:
        writer = writer.option("maxRecordsPerFile", str(max_rows_per_file))
    if parquet:  # Spark hands a session's Hadoop-style keys to the file writers
        with session_conf(df.sparkSession, parquet):
            writer.save(path)
    else:
        writer.save(path)
    return WriteOutcome.after(path, before)
