"""The ordered merge (DESIGN principle 2) that builds silver tables.

A change applies only when its `_pos` is newer than the row's; deletes stay
as tombstones (`_deleted = true`) so that a late, older change cannot bring a
deleted row back. Applying any set of batches in any order, any number of
times, converges to the same table. The plan (conditions and assignments) is
pure; `ordered_merge` runs it with Delta.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ingest.lake.columns import lake_name
from ingest.lake.commits import Txn
from ingest.lake.connect import THREAD_STACK_MIB, server_thread_stack
from ingest.lake.deltalog import is_delta_table, table_file_spread, table_size, table_version
from ingest.lake.tables import spark_ident as _col
from ingest.lake.write import (WriteOutcome, append, lake_columns, retry_conflicts, session_conf, session_txn,
                               widen_for)

POS = "_pos"
DELETED = "_deleted"

# A batch of at most this many changes names its keys in the merge's condition (see `narrowing`).
NARROW_MAX_KEYS = 10_000
# A narrowed batch of at most PUSH_MAX_KEYS keys, and at most PUSH_KEYS_PER_FILE of them to each of the
# table's files on average, reaches the Parquet reader as equalities (see `key_pushdown`).
PUSH_MAX_KEYS = 1_000
PUSH_KEYS_PER_FILE = 10
# ... and at most this many where the server's threads have less stack than the embedded server gives
# them (a server started elsewhere, with the JVM's 1 MiB: see connect.THREAD_STACK_MIB).
PUSH_MAX_KEYS_SMALL_STACK = 200
PUSH_STACK_BYTES = THREAD_STACK_MIB * 2**20
IN_FILTER_THRESHOLD = "spark.sql.parquet.pushdown.inFilterThreshold"
# A merge writes files of at most `file_rows` rows too: one that keeps its files' key order (a broadcast
# batch) then leaves files as narrow as it found them, where a 10M-row silver's 10 files came out as 2.
MAX_RECORDS_PER_FILE = "spark.sql.files.maxRecordsPerFile"
# The project's optimizer rule that writes a copy-on-write merge's unmatched rows straight from its files
# (jvm/src MergeCopyRows); true only around a MERGE without a WHEN NOT MATCHED BY SOURCE clause.
COPY_ROWS = "spark.ingest.mergeCopyRows.enabled"
# ... and with it one file of the table to a task: the rule writes a file's unchanged rows apart from its
# changed ones, and a task that read several files would write their rows, fewer than `file_rows` now, into
# files that span them, out of key order. Spark packs files into a task until their bytes and this cost
# each reach its split size (128 MiB), so at this cost every file opens its own task (a larger file is still
# split at that size).
ONE_FILE_A_TASK = {"spark.sql.files.openCostInBytes": str(2**40)}
# ... and only into a table of at least this many bytes. The rule pays by the rows it copies, and one task
# a file costs every scan of the MERGE: 10 changes into a 100k-row silver of 20 files took 3.92 s with it
# against 3.02 s (medians, alternating), 1,000 into a 10M-row silver of 56 MB 14.1-16.1 s against 18.4 s.
# The bound between them is chosen, not measured (docs/performance.md).
COPY_ROWS_MIN_BYTES = 32 * 2**20
# Silver is created in key order, in files of at most this many rows (see `ordered_merge`).
SILVER_FILE_ROWS = 1_000_000
# How `ordered_merge` sorts a table it creates, most often from a whole snapshot. The server's 4 shuffle
# partitions suit change batches (lake/connect.py), not a key-ordered write of every row of a table:
# starting from 64, which adaptive execution joins up to its advisory size (one task for a small table), a
# 100M-row silver took 171 s instead of 190 s. And Spark sorts each input partition before the shuffle to
# keep one row per key early (its window group limit), which a snapshot, one row per key already, only
# pays for: at 100M rows on the embedded server's 2 GiB heap that sort's pointer array failed to grow
# (Java heap space) until, in a bench run, the server's SparkContext stopped.
CREATE_SHUFFLE = {"spark.sql.adaptive.coalescePartitions.initialPartitionNum": "64",
                  "spark.sql.optimizer.windowGroupLimitThreshold": "-1"}
DELETION_VECTORS = "delta.enableDeletionVectors"
CHANGE_DATA_FEED = "delta.enableChangeDataFeed"


@dataclass(frozen=True)
class Layout:
    """How silver and history of a table are written: the table's opt-ins in the sources file.

    `change_feed`: the tables record Delta's change data feed (readers: Spark's `table_changes`,
    delta-rs's `load_cdf`), so that what reads them can take only what changed since it last did
    (dbt_project's incremental model). A writer-only table feature: every Delta reader still opens the
    tables. It costs a merge that updates rows the before and after images in `_change_data` files
    (0.6-0.9 CPU-s of a small merge's 1.7-2.8, docs/performance.md); a table listed under
    `without_change_feed` does not pay it.
    `deletion_vectors`: silver writes deletion vectors (see `ordered_merge`)."""

    change_feed: bool = True
    deletion_vectors: bool = False

    def wanted(self, columns: Sequence[str]) -> dict[str, str]:
        """The table properties this layout sets on a table of these columns (pure). The feed stays
        unset when a name holds a backtick: Delta 4.4's MERGE builds the feed's rows by parsing
        `packedCdc.<name>` unquoted and fails on such a name (INVALID_ATTRIBUTE_NAME_SYNTAX). False
        deletion vectors leave a table as it is."""
        feed = {} if any("`" in c for c in columns) else {CHANGE_DATA_FEED: str(self.change_feed).lower()}
        return {**feed, **({DELETION_VECTORS: "true"} if self.deletion_vectors else {})}

    def history(self) -> Layout:
        """History's layout: the same feed, never deletion vectors (history is written by its own merge)."""
        return Layout(change_feed=self.change_feed)


# Every ordered merge's commit names the columns it merges by (lake names, in key order): the maintenance
# job re-clusters silver by them (lake/maintenance.py `recluster`) without asking the source.
MERGE_KEYS = "merge_keys"


@dataclass(frozen=True)
class MergePlan:
    on: str
    newer: str
    tombstone_condition: str | None
    tombstone_set: dict[str, str] | None


def plan_ordered_merge(keys: Sequence[str], columns: Sequence[str], tombstone_before: int | None = None,
                       narrow: str | None = None) -> MergePlan:
    """Conditions for merging source `s` into target `t`.

    `columns` are all target columns (data, `_pos`, `_deleted`). With
    `tombstone_before` (a full snapshot merged in), a live target row that the
    snapshot does not hold and that was last changed before that position was
    deleted at the source before the snapshot read it: it becomes a tombstone.
    Rows changed at or after it are left to the change log, which holds their
    later history. `narrow`: a condition on the target alone that every row the
    source matches meets (see `narrowing`); not with `tombstone_before`, whose
    clause changes target rows the source does not match.

    The keys are the source table's primary key, which the databases keep NOT NULL, so they join by
    `=`: Spark hashes a one-column integer key as a single long, where `<=>` hashes a value and a null
    flag as two (1,000 updates into 10M rows: 8.9 against 10.0 s, docs/performance.md). A NULL would
    match no row and be inserted again at every change: `keys_checked` fails such a batch instead.
    """
    if not keys:
        raise ValueError("an ordered merge needs at least one key column")
    missing = [c for c in (*keys, POS, DELETED) if c not in columns]
    if missing:
        raise ValueError(f"merge columns lack {missing}")
    if narrow and tombstone_before is not None:
        raise ValueError("a snapshot merge (tombstone_before) cannot be narrowed: it changes unmatched rows")
    on = " AND ".join([*(f"t.{_col(k)} = s.{_col(k)}" for k in keys), *([narrow] if narrow else [])])
    tomb_cond = tomb_set = None
    if tombstone_before is not None:
        p = int(tombstone_before)
        tomb_cond = f"t.{POS} < {p} AND NOT t.{DELETED}"
        tomb_set = {DELETED: "true", POS: f"CAST({p} AS DECIMAL(38,0))"}
    return MergePlan(on, f"s.{POS} > t.{POS}", tomb_cond, tomb_set)


def key_literal(value: Any) -> str | None:
    """`value` as a Spark SQL literal that compares equal to the key it came from (pure), or None
    where we do not trust one to: floats, binary, times, and strings the SQL text could read
    differently (backslashes and quotes, which a parser setting changes; control characters; `${`,
    which Spark's variable substitution would replace)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else None
    if isinstance(value, str):
        if any(ch in value for ch in "\\'") or any(ord(ch) < 32 for ch in value) or "${" in value:
            return None
        return f"'{value}'"
    return None


def narrowing(keys: Sequence[str], values: Iterable[Sequence[Any]]) -> str | None:
    """A condition on the target alone that every target row the source's keys `values` match
    meets (pure): `t.k IN (...)` for each key column whose values all have a literal. None when no
    column has one.

    It adds nothing to which rows match, but Spark applies it to the target's rows before the join:
    with deletion vectors, where the merge joins the touched files against the source a second time,
    only the batch's keys reach that join instead of every row of those files. A NULL key drops its
    column (IN would not name it; the merge then fails on it, see `keys_checked`)."""
    rows = [tuple(v) for v in values]
    conditions = []
    for i, key in enumerate(keys):
        column = {row[i] for row in rows}
        literals = [key_literal(v) for v in column if v is not None]
        if column and None not in column and None not in literals:
            conditions.append(f"t.{_col(key)} IN ({', '.join(sorted(literals))})")
    return " AND ".join(conditions) or None


def key_pushdown(keys: int, files: float | None, stack_bytes: int | None = None) -> dict[str, str]:
    """Session settings that push a narrowed merge's key list into the Parquet reader (pure), for a batch
    of `keys` distinct keys into a table of `files` files, each counted by its share of the table's bytes
    (deltalog.file_spread: the small files merges add do not count); none where that does not pay, or
    where the server's task threads have `stack_bytes` of stack (None: not known), too little for so
    deep a predicate.

    Spark hands Parquet a list of more than `inFilterThreshold` (10) values as an `in` predicate, whose
    page index parquet-java compares with the list's minimum and maximum alone: keys spread over the
    table skip no page. A list within the threshold becomes an OR of equalities, tested value by value
    against each page's minimum and maximum, and the merge then reads only the pages its keys fall in.
    That pays where a file holds a few of the keys among its pages (5,000 rows each: connect.SESSION_CONF;
    measured with 20,000): 1,000 updates at random keys into 100M rows with deletion vectors (108 files,
    9 keys each) took 11.0-15.0 s against 16.4-18.7 s. Into 10M rows (11 files), 100 keys (9 a file):
    a median of 5.2 against 5.5 s; 250 keys (23 a file): 6.9 against 6.6 s, each page tested against
    the whole list. The first pass, which finds the touched files, is filtered too where the server has
    the project's optimizer rule (jvm/src MergeScanFilter: Delta's row ids kept the condition above its
    scan, which then read every key). Spark joins the equalities into an OR one level deep per
    key, which each task deserializes and parquet-java walks recursively (and formats, where its INFO
    log is on: connect.QUIET_LOGGERS): 2,000 overflowed a task thread's stack and stopped the server's
    SparkContext. So did 1,000 on a fresh server, its code not yet compiled, in 2 of 9 first merges
    with the JVM's 1 MiB stack; with 4 MiB none of 10 did, nor 2,000 in 3 (docs/performance.md)."""
    cap = PUSH_MAX_KEYS if stack_bytes is not None and stack_bytes >= PUSH_STACK_BYTES else PUSH_MAX_KEYS_SMALL_STACK
    if keys <= cap and files and keys <= PUSH_KEYS_PER_FILE * files:
        return {IN_FILTER_THRESHOLD: str(cap)}
    return {}


def apply_layout(spark, path: str, layout: Layout, columns: Sequence[str]) -> None:
    """Set the layout's properties on an existing table whose properties differ (a table opted in or out
    after it was made). Read from the newest commit's checksum file, so a table already laid out costs
    no query; a log without one asks the server."""
    have = properties_of(spark, path)
    set_properties(spark, path, layout.wanted(columns), {k: str(v).lower() for k, v in have.items()},
                   "table properties")


def properties_of(spark, path: str) -> dict[str, str]:
    """The table properties of the Delta table at `path`: from the newest commit's checksum file, so a
    table costs no query; a log without one asks the server."""
    from ingest.lake.deltalog import table_properties

    have = table_properties(path)
    if have is None:
        have = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {delta_path(path)}").collect()}
    return have


def set_properties(spark, path: str, want: dict[str, str], have: dict[str, str], what: str) -> dict[str, str]:
    """Set on the table at `path` those of `want` that `have` (its properties now) lacks or holds
    otherwise, in one commit; what it set."""
    changed = {k: v for k, v in want.items() if have.get(k) != v}
    if changed:
        settings = ", ".join(f"'{k}' = '{v}'" for k, v in changed.items())
        retry_conflicts(lambda: spark.sql(f"ALTER TABLE {delta_path(path)} SET TBLPROPERTIES ({settings})").collect(),
                        f"{path}: {what}")
    return changed


def latest_per_key(df, keys: Sequence[str]):
    """Keep each key's newest change: MERGE needs at most one source row per target row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy(*[F.col(_col(k)) for k in keys]).orderBy(F.col(POS).desc())
    return df.withColumn("_rank", F.row_number().over(window)).where("_rank = 1").drop("_rank")


def keys_checked(df, keys: Sequence[str], path: str):
    """`df` with a NULL in a key column failing the query that reads it, with a message that names the
    column and the table: the merge joins keys by `=` (see `plan_ordered_merge`)."""
    from pyspark.sql import functions as F

    def checked(key: str):
        message = (f"a change to the table at {path} has a NULL in its key column {key}: silver merges by the "
                   "source table's primary key, whose columns cannot be NULL; nothing of this batch was merged. Fix: "
                   "give the source table a primary key of NOT NULL columns, then materialize the batch again")
        return F.when(F.col(_col(key)).isNull(), F.raise_error(F.lit(message))).otherwise(F.col(_col(key)))

    return df.withColumns({key: checked(key) for key in keys})


def ordered_merge(spark, path: str, changes, keys: Sequence[str], metadata: dict[str, Any], txn: Txn,
                  tombstone_before: int | None = None, expected_rows: int | None = None,
                  layout: Layout = Layout(), file_rows: int = SILVER_FILE_ROWS) -> WriteOutcome:
    """Merge `changes` (data columns, `_pos`, `_deleted`) into the Delta table at `path`.

    Creates the table when it does not exist. Safe to repeat: the txn makes a
    second call a no-op, and the `_pos` guard would make it a no-op anyway.
    `layout`: the table (made or found) is laid out so (see `Layout`).
    `expected_rows`: how many rows `changes` holds, when known; a batch of at most NARROW_MAX_KEYS into a table with
    deletion vectors names its keys in the merge's condition (see `narrowing`):
    without that, the merge joins every row of the table against the batch a
    second time. Few keys a file are pushed into the Parquet reader
    (`key_pushdown`). A copy-on-write merge rewrites every file a key falls in
    whatever the condition, so it is not narrowed (nor asked about its table).

    A table this call creates is written in key order, in files of at most
    `file_rows` rows, so that each file holds a narrow range of keys. A later
    merge rewrites only the files its keys fall in, and batches whose keys
    cluster (new rows, recent orders) touch one or two files instead of all:
    1,000 updates at the newest keys of 10M rows took 1.6-2.1 s, against
    7.7-10.4 s when every file held keys from the whole range (the window's
    hash order, or one file after compaction). Random keys still touch every
    file. A batch Spark broadcasts (within `spark.sql.autoBroadcastJoinThreshold`)
    keeps the rewritten rows in their files' order, in files of at most
    `file_rows` rows (the project's optimizer rule, jvm/src MergeBroadcastJoin);
    a larger one writes its output in its join's hash order, and the maintenance
    job puts such a table back in key order (`recluster`). The commit names the
    keys (`MERGE_KEYS`) for it. A broadcast batch that merges without a
    tombstone clause into a table of COPY_ROWS_MIN_BYTES or more (a larger
    copy-on-write silver) writes the rows it leaves unchanged straight from their
    files, one task a file, and the rows it matched in a file of their own
    (`COPY_ROWS`, jvm/src MergeCopyRows): 1,000 updates at random keys into
    10M rows took 14.1-16.1 s against 18.4 s without it, in runs of one hour
    (docs/performance.md).
    """
    from pyspark.sql import functions as F

    changes, keys = lake_columns(changes), [lake_name(k) for k in keys]
    metadata = {**metadata, MERGE_KEYS: keys}
    if not is_delta_table(path):
        rows = keys_checked(latest_per_key(changes, keys), keys, path).orderBy(*[F.col(_col(k)) for k in keys])
        with session_conf(spark, CREATE_SHUFFLE):
            return append(rows, path, metadata, txn, properties=layout.wanted(rows.columns),
                          max_rows_per_file=file_rows)
    apply_layout(spark, path, layout, changes.columns)
    widen_for(spark, changes, path)
    before = table_version(path)
    narrow, pushed = None, {}
    if (tombstone_before is None and expected_rows is not None and expected_rows <= NARROW_MAX_KEYS
            and layout.deletion_vectors):
        found = changes.select(*[_col(k) for k in keys]).distinct().limit(NARROW_MAX_KEYS + 1).collect()
        narrow = narrowing(keys, found) if len(found) <= NARROW_MAX_KEYS else None
        if narrow:
            stack = server_thread_stack(spark) if len(found) > PUSH_MAX_KEYS_SMALL_STACK else None
            pushed = key_pushdown(len(found), table_file_spread(path), stack)
    plan = plan_ordered_merge(keys, changes.columns, tombstone_before, narrow)
    view = temp_view(keys_checked(latest_per_key(changes, keys), keys, path))
    try:
        copy_rows = plan.tombstone_condition is None and not layout.deletion_vectors
        if copy_rows:  # the table's size only where it decides (the newest checksum, read from storage)
            size = table_size(path)
            copy_rows = size is not None and size[0] >= COPY_ROWS_MIN_BYTES
        merging = {**pushed, MAX_RECORDS_PER_FILE: str(file_rows), COPY_ROWS: str(copy_rows).lower(),
                   **(ONE_FILE_A_TASK if copy_rows else {})}
        with session_conf(spark, merging), session_txn(spark, metadata, txn):
            spark.sql(merge_sql(path, view, plan)).collect()
    finally:
        spark.catalog.dropTempView(view)
    return WriteOutcome.after(path, before)


def delta_path(path: str) -> str:
    """A Delta table by path in Spark SQL: delta.`path` (a backtick inside is doubled)."""
    return "delta." + _col(path)


def merge_sql(path: str, view: str, plan: MergePlan) -> str:
    """MERGE INTO the table at `path` from the temp view `view` (pure): Delta's Python merge builder
    is not served over Spark Connect here, its SQL is. The update and insert take every source
    column (`*`): that is the plan's assignment, and only `*` lets schema evolution add a column the
    source gained (an explicit `t.new = s.new` fails on a column the target lacks)."""
    def assignments(values: dict[str, str]) -> str:
        return ", ".join(f"t.{c} = {v}" for c, v in values.items())

    sql = (f"MERGE INTO {delta_path(path)} AS t USING {_col(view)} AS s ON {plan.on} "
           f"WHEN MATCHED AND {plan.newer} THEN UPDATE SET * "
           f"WHEN NOT MATCHED THEN INSERT *")
    if plan.tombstone_condition:
        sql += (f" WHEN NOT MATCHED BY SOURCE AND {plan.tombstone_condition} "
                f"THEN UPDATE SET {assignments(plan.tombstone_set or {})}")
    return sql


def temp_view(df) -> str:
    """Register `df` under a new session-scoped name (dropped by the caller)."""
    import uuid

    name = f"ingest_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    return name


def live_rows(df):
    """The rows a consumer sees: tombstones dropped, bookkeeping columns kept out."""
    return df.where(f"NOT {DELETED}").drop(DELETED)


def row_counts(df) -> dict[str, int]:
    """Live rows and tombstones of a silver table, in one pass over it."""
    from pyspark.sql import functions as F

    counts = df.agg(F.count(F.when(~F.col(DELETED), 1)).alias("live"),
                    F.count(F.when(F.col(DELETED), 1)).alias("dead")).first()
    return {"rows_live": counts["live"], "tombstones": counts["dead"]}
