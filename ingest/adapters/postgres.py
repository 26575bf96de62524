"""The PostgreSQL source's adapter: what ingest/sources/postgres/ reads, committed by the lake.

The snapshot of a table:

1. The source's slot exists (created here if not) before anything is read, so the server keeps every
   change from then on; the snapshot's `log_start` is the WAL position after that, where change batches
   for this table must start.
2. A TEMPORARY slot is created with an exported snapshot: the database exactly at its consistent point,
   which is after `log_start`. Spark executors read primary-key chunks in transactions that adopt it,
   so every row of the run is tagged `_pos` = that point (index 0): a change the stream has at or after
   it is newer, one before it is already in the row.
3. Chunks are committed in waves with txn ids, as for MySQL. A run that dies resumes after its last
   wave with a new temporary slot: its chunks are read at their own, later point and tagged with it,
   which the ordered merge handles as it does MySQL's per-chunk positions.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ingest.filters import RowFilter
from ingest.transforms import TableTransforms
from ingest.sources.postgres.positions import Lsn

DATA_SOURCE_NAME = "ingest_postgres_chunks"
CHANGES_SOURCE_NAME = "ingest_postgres_changes"


@dataclass(frozen=True)
class PgParams:
    host: str
    port: int
    user: str
    password: str = field(repr=False)  # never in a message or log that prints the parameters
    database: str
    connect_timeout: int = 10

    def connect(self, **settings):
        """A connection with the contract's session settings from its start (types.session_options)."""
        import psycopg

        from ingest.sources.postgres.types import session_options

        return psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               dbname=self.database, connect_timeout=self.connect_timeout, autocommit=True,
                               options=session_options(), **settings)

    @classmethod
    def of(cls, source) -> PgParams:
        """A PostgreSQL source of the sources file, its password from the variable the file names."""
        from ingest.config import secret

        return cls(source.host, source.port, source.user,
                   secret(source.password_env, f"the password of {source.user}@{source.host}"), source.database,
                   source.connect_timeout)

    def libpq(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password,
                "dbname": self.database, "connect_timeout": self.connect_timeout}


# ---------------------------------------------------------------- executor side

def read_chunks(spec: dict[str, Any], options: dict[str, str], chunks: list[dict], arrow_schema) -> Iterator[Any]:
    """One Spark partition: Arrow record batches of its chunks, read at the spec's exported snapshot, each
    row with the run's `_pos` (executor side)."""
    from decimal import Decimal

    import pyarrow as pa

    from ingest.sources.postgres.schema import PgType
    from ingest.sources.postgres.snapshot import copy_chunk
    from ingest.sources.postgres.types import column_array

    params = PgParams(**spec["conn"], password=options["password"])
    contracts = [PgType(t["name"], t["element"], t["delimiter"]).contract(t["typmod"]) for t in spec["types"]]
    pos = Decimal(spec["pos"])
    with params.connect() as conn:
        for chunk in chunks:
            lo, hi = (None if k is None else tuple(k) for k in (chunk["lo"], chunk["hi"]))
            texts = copy_chunk(conn, spec["snapshot"], spec["table"], spec["columns"], spec["key"], lo, hi,
                               spec["key_types"], spec.get("where"))
            if not texts.num_rows:
                continue
            arrays = [column_array(ct, texts.column(i), arrow_schema.field(i).type) for i, ct in enumerate(contracts)]
            arrays.append(pa.repeat(pa.scalar(pos, arrow_schema.field(len(contracts)).type), texts.num_rows))
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def read_table_changes(spec: dict[str, Any], options: dict[str, str], part: dict, arrow_schema) -> Iterator[Any]:
    """One table's changes in a batch the driver only planned (executor side), or this reader's share of
    them: streamed from the slot and turned into bronze rows ARROW_ROWS at a time, a column at a time
    (changes.TextChanges); with a row filter, as records that the server judges first."""
    from ingest.lake.datasource import ARROW_ROWS
    from ingest.sources.postgres.cdc import table_change_columns, table_changes
    from ingest.sources.postgres.filters import described, filtered_records
    from ingest.sources.postgres.positions import LsnRange

    params = PgParams(**spec["conn"], password=options["password"])
    columns = [tuple(c) for c in spec["columns"]]
    at = (spec["source"], spec["slot"], spec["publication"], LsnRange.from_key(spec["batch"]), part["table"])
    share = tuple(part["share"]) if "share" in part else None
    if "where" not in spec:
        with params.connect() as conn:
            for chunk in table_change_columns(conn, *at, [n for n, _ in columns], ARROW_ROWS, share):
                yield text_changes_arrow(chunk, spec["batch"], arrow_schema)
        return
    from ingest.lake.bronze import records_arrow

    with params.connect() as conn, params.connect() as judge:  # judged on a connection of its own
        table, json_columns = described(judge, part["table"])
        row_filter = RowFilter(part["table"], spec["where"])

        def landed(records: list) -> Any:
            records = filtered_records(judge, table, json_columns, row_filter, records)
            return records_arrow(records, columns, spec["batch"], arrow_schema).to_batches()

        records = []
        for record in table_changes(conn, *at, share):
            records.append(record)
            if len(records) >= ARROW_ROWS:
                yield from landed(records)
                records = []
        if records:
            yield from landed(records)


def text_changes_arrow(chunk, batch_key: str, arrow_schema):
    """TextChanges as an Arrow record batch of bronze rows (`arrow_schema`: bronze's)."""
    import pyarrow as pa

    from ingest.lake.bronze import UNCHANGED_COLUMN, arrow_table, meta_columns
    from ingest.lake.columns import lake_name
    from ingest.sources.postgres.types import column_array

    values = [pa.nulls(len(chunk), field.type) if ctype is None else column_array(ctype, texts, field.type)
              for ctype, texts, field in zip(chunk.types, chunk.columns(), arrow_schema)]
    unchanged = ([None if u is None else [lake_name(n) for n in u] for u in chunk.unchanged]
                 if UNCHANGED_COLUMN in arrow_schema.names else None)
    meta = meta_columns(chunk.ops, chunk.positions, chunk.committed_at, chunk.txids, batch_key, chunk.befores,
                        unchanged=unchanged)
    return arrow_table(values + meta, arrow_schema).combine_chunks().to_batches()[0]


# ---------------------------------------------------------------- driver side

def chunk_schema(table, contracts, types) -> tuple[str, list[dict]]:
    """The chunk DataFrame's DDL (the table's columns in the lake's types, then `_pos`) and each column's
    type for the executors' contract."""
    from ingest.lake.tables import spark_ident

    ddl = ", ".join([*(f"{spark_ident(c.name)} {t.spark}" for c, t in zip(table.columns, contracts)),
                     "`_pos` decimal(38,0)"])
    return ddl, [{**asdict(types[c.type_oid]), "typmod": c.type_modifier} for c in table.columns]


def chunks_df(spark, params: PgParams, table, ddl: str, spec_types: list[dict], at, ranges: list[tuple],
              parallelism: int, row_filter: RowFilter | None = None):
    """A DataFrame over the key `ranges` of `table`, read on executors at the exported snapshot `at`
    (a SlotStart: the block holding it must stay open while Spark reads), in at most `parallelism`
    partitions."""
    from ingest.lake.datasource import register_reader

    register_reader(spark, DATA_SOURCE_NAME, read_chunks, "groups")
    n = max(1, min(parallelism, len(ranges)))
    spec = {"conn": {k: v for k, v in asdict(params).items() if k != "password"},
            "snapshot": at.snapshot, "table": table.name, "key": list(table.primary_key),
            "key_types": list(table.key_types()), "columns": [c.name for c in table.columns], "types": spec_types,
            "pos": str(at.consistent_point.row_pos()),
            "groups": [[{"lo": lo, "hi": hi} for lo, hi in ranges[i::n]] for i in range(n)],
            **({"where": row_filter.where} if row_filter else {})}
    return (spark.read.format(DATA_SOURCE_NAME).option("ddl", ddl).option("spec", json.dumps(spec))
            .option("password", params.password).load())


def source_chunks_df(spark, params: PgParams, table, contracts, types, at, ranges: list[tuple], parallelism: int,
                     row_filter: RowFilter | None = None):
    """The key `ranges` of `table` at the exported snapshot `at` (only the rows `row_filter` holds for), in
    the lake's types, with `_pos`: Spark's JDBC reader where every column has a JDBC form, the project's
    Python data source otherwise."""
    from ingest.sources.postgres.jdbc import jdbc_columns

    columns = jdbc_columns(table.columns, types, table.name)
    if columns is None:
        ddl, spec_types = chunk_schema(table, contracts, types)
        return chunks_df(spark, params, table, ddl, spec_types, at, ranges, parallelism, row_filter)
    return chunks_jdbc_df(spark, params, table, columns, at, ranges, parallelism, row_filter)


def chunks_jdbc_df(spark, params: PgParams, table, columns, at, ranges: list[tuple], parallelism: int,
                   row_filter: RowFilter | None = None):
    """The same DataFrame as chunks_df, read by Spark's JDBC reader where every column has a JDBC form
    (ingest/sources/postgres/jdbc.py): the contiguous key `ranges` joined into `parallelism` partitions,
    each one connection and one query at the exported snapshot (a wave of 10 chunks of 100k rows read
    0.1 s faster joined than as 10 queries)."""
    from ingest.lake.tables import spark_ident
    from ingest.sources.contract import custom_schema
    from ingest.sources.postgres.jdbc import DRIVER, chunk_predicate, chunk_table, jdbc_url, session_init
    from ingest.sources.postgres.snapshot import joined_ranges

    key_types = table.key_types()
    # fetchsize: rows the driver holds per cursor fetch (Spark's dialect reads by cursor when it is set)
    df = spark.read.jdbc(
        jdbc_url(params.host, params.port, params.database),
        chunk_table(table.name, columns, table.primary_key, row_filter.where if row_filter else None),
        predicates=[chunk_predicate(key_types, lo, hi) for lo, hi in joined_ranges(ranges, parallelism)],
        properties={"user": params.user, "password": params.password, "driver": DRIVER, "fetchsize": "10000",
                    "sessionInitStatement": session_init(at.snapshot),
                    "connectTimeout": str(params.connect_timeout), **custom_schema(columns)})
    pos = f"CAST('{at.consistent_point.row_pos()}' AS decimal(38,0)) AS `_pos`"
    return df.selectExpr(*[f"{c.spark} AS {spark_ident(c.name)}" for c in columns], pos)


def change_batch_writes(source: str, params: PgParams, slot: str, publication: str, batch, qualified: dict[str, str],
                        transforms=None, filters: dict[str, RowFilter] | None = None, readers: int = 1):
    """A change batch as bronze writes (lake.bronze.ChangeBatch): the tables a large batch only planned
    (TableChanges.sliced) get a DataFrame that `readers` executors read from the slot (and judge by the
    table's row filter in `filters`); `qualified`: each table's schema.table by its name in the batch."""
    from functools import partial

    from ingest.lake.bronze import bronze_writes

    frames = {t: partial(table_changes_df, params=params, source=source, slot=slot, publication=publication,
                         table=qualified[t], changes=changes, batch_key=batch.key,
                         row_filter=(filters or {}).get(t), readers=readers)
              for t, changes in batch.tables.items() if changes.sliced}
    return bronze_writes(source, batch, frames, transforms)


def table_changes_df(spark, *, params: PgParams, source: str, slot: str, publication: str, table: str, changes,
                     batch_key: str, row_filter: RowFilter | None = None, readers: int = 1):
    """One table's changes in a batch (TableChanges, sliced) as a DataFrame of bronze rows, a partition
    for each of `readers`, which share its transactions (pgoutput.changes); with a `row_filter`, what they
    land as under it."""
    from ingest.lake.bronze import bronze_ddl
    from ingest.lake.datasource import register_reader

    register_reader(spark, CHANGES_SOURCE_NAME, read_table_changes, "parts")
    spec = {"conn": {k: v for k, v in asdict(params).items() if k != "password"}, "source": source, "slot": slot,
            "publication": publication, "columns": [list(c) for c in changes.columns], "batch": batch_key,
            "parts": [{"table": table, "share": [k, readers]} for k in range(readers)],
            **({"where": row_filter.where} if row_filter else {})}
    return (spark.read.format(CHANGES_SOURCE_NAME).option("ddl", bronze_ddl(changes.columns, changes.unchanged))
            .option("spec", json.dumps(spec)).option("password", params.password).load())


@dataclass(frozen=True)
class PgSnapshotWrite:
    """An asset's output: snapshot `table` (schema.table) of a PostgreSQL source into the table the IO
    manager names."""


    source: str
    params: PgParams
    slot: str
    table: str
    chunk_size: int
    parallelism: int
    chunks_per_commit: int
    transforms: TableTransforms = TableTransforms("")
    row_filter: RowFilter | None = None

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        from ingest.lake.commits import waves
        from ingest.lake.deltalog import table_version
        from ingest.lake.connect import jdbc_driver
        from ingest.lake.snapshot import SnapshotCommit, Waves, commit_waves, resume_point, snapshot_table_rows
        from ingest.sources.postgres.jdbc import DRIVER, jdbc_columns
        from ingest.sources.postgres.schema import contracts_of, describe_table, types_of
        from ingest.sources.postgres.slot import current_lsn, ensure_slot, exported_snapshot
        from ingest.sources.postgres.filters import check_filter
        from ingest.sources.postgres.snapshot import boundaries, key_ranges

        started = time.monotonic()
        with self.params.connect() as conn:
            table = describe_table(conn, self.table, f"source {self.source}")
            if ensure_slot(conn, self.slot):
                log(f"created replication slot {self.slot!r}: the server keeps the source's changes from now on")
            log_start = current_lsn(conn)
            contracts = contracts_of(conn, table)
            types = types_of(conn, [c.type_oid for c in table.columns])
            if self.row_filter:
                check_filter(conn, self.table, self.row_filter)
        transforms = self.transforms.check([(c.name, t.spark) for c, t in zip(table.columns, contracts)],
                                           table.primary_key, f"tables.columns.{table.name}.transform")
        # waves written under other transforms or another filter never mix with these
        fingerprint = (table.fingerprint() + (f";transforms:{transforms.metadata()}" if transforms else "")
                       + (self.row_filter.shape() if self.row_filter else ""))
        resume = resume_point(path, fingerprint)
        if resume:
            snapshot_id, wave_no, done = resume["snapshot_id"], resume["wave"] + 1, resume["chunks_done"]
            log_start = Lsn.from_metadata(resume["log_start"])
            start = None if resume["key_hi"] is None else tuple(resume["key_hi"])
            log(f"resuming snapshot {snapshot_id} of {self.table} at wave {wave_no}, key {start!r}")
        else:
            snapshot_id, wave_no, done, start = uuid.uuid4().hex[:12], 0, 0, None
            log(f"starting snapshot {snapshot_id} of {self.table}; change batches needed from {log_start}")
        reader = "Python" if jdbc_columns(table.columns, types, self.table) is None else "JDBC"
        with exported_snapshot(self.params.libpq(), f"{self.slot}_s{uuid.uuid4().hex[:8]}", temporary=True) as at, \
                self.params.connect() as conn, jdbc_driver(DRIVER, "PostgreSQL"):
            log(f"snapshot {self.table}: reading at {at.consistent_point} (exported snapshot {at.snapshot}, "
                f"{reader} reader)")
            # (index, lo, hi): keys stay in their text form, which JSON keeps as it is
            chunks = [(done + i, lo, hi) for i, (lo, hi) in enumerate(key_ranges(
                boundaries(conn, at.snapshot, self.table, table.primary_key, self.chunk_size, start,
                           table.key_types()), start))]
            total = done + len(chunks)
            run = SnapshotCommit(self.source, self.table, snapshot_id, fingerprint, table.primary_key,
                                 log_start.to_metadata(), log_start.row_pos(), wave=wave_no)
            rows = commit_waves(path, Waves(
                run, waves(chunks, self.chunks_per_commit),
                lambda wave: source_chunks_df(spark, self.params, table, contracts, types, at,
                                              [(lo, hi) for _, lo, hi in wave], self.parallelism, self.row_filter),
                lambda wave: {"key_hi": wave[-1][2], "chunks_done": wave[-1][0] + 1, "chunks_total": total,
                              "read_at": at.consistent_point.to_metadata()},
                lambda wave, rows: f"{wave[-1][0] + 1}/{total} chunks, {rows} rows", transforms=transforms),
                log).rows
        seconds = time.monotonic() - started
        return {"rows": snapshot_table_rows(spark, path, snapshot_id), "rows_read": rows, "seconds": round(seconds, 2),
                "rows_per_second": round(rows / max(seconds, 1e-9), 1), "snapshot_id": snapshot_id,
                "chunks": total, "resumed_from_wave": wave_no - 1, "log_start": log_start.to_metadata(),
                "key_columns": list(table.primary_key), "delta_version": table_version(path),
                **({"transformed_columns": transforms.metadata()} if transforms else {}),
                **({"row_filter": self.row_filter.where} if self.row_filter else {})}


# ---------------------------------------------------------------- reconciliation

def silver_lsn(silver_path: str):
    """The LSN silver has merged up to, from its Delta log (None: no snapshot merged)."""
    from ingest.batches import merged_through
    from ingest.lake.deltalog import commits
    from ingest.sources.postgres.positions import LsnRange

    history = commits(silver_path)
    snapshot = next((c for c in history if c.metadata.get("from") == "snapshot"), None)
    if snapshot is None:
        return None
    merged = [LsnRange.from_key(c.metadata["batch"]) for c in history
              if c.metadata.get("kind") == "silver" and c.metadata.get("batch") and c.version > snapshot.version]
    return merged_through(Lsn.from_metadata(snapshot.metadata["log_start"]), merged)


def reconcile(spark, params: PgParams, slot: str, publication: str, table_name: str, silver_path: str, *,
              chunk_size: int, parallelism: int, transforms: TableTransforms | None = None,
              row_filter: RowFilter | None = None):
    """Compare silver's live rows with the table now: its rows are read at a temporary slot's exported
    snapshot, and keys that the source's slot shows changed between silver's position and that point are
    left to the next batch."""
    from ingest.lake.columns import lake_name
    from ingest.lake.connect import jdbc_driver
    from ingest.lake.merge import live_rows
    from ingest.lake.reconcile import Reconciliation, compare
    from ingest.lake.write import lake_columns
    from ingest.sources.postgres.cdc import RelationContracts
    from ingest.sources.postgres.changes import change_records
    from ingest.sources.postgres.jdbc import DRIVER
    from ingest.sources.postgres.pgoutput import changes
    from ingest.sources.postgres.schema import contracts_of, describe_table, types_of
    from ingest.sources.postgres.slot import exported_snapshot, peek
    from ingest.sources.postgres.snapshot import boundaries, key_ranges

    started = time.monotonic()
    position = silver_lsn(silver_path)
    if position is None:
        raise ValueError(f"{table_name}: silver at {silver_path} has no snapshot merged yet. "
                         "Fix: materialize the snapshot and a change batch first")
    with params.connect() as conn:
        table = describe_table(conn, table_name)
        contracts = contracts_of(conn, table)
        types = types_of(conn, [c.type_oid for c in table.columns])
    transforms = (transforms or TableTransforms(table.name)).check(
        [(c.name, t.spark) for c, t in zip(table.columns, contracts)], table.primary_key,
        f"tables.columns.{table.name}.transform")
    by_name = dict(zip((c.name for c in table.columns), contracts))
    key_convert = [by_name[k].convert or (lambda v: v) for k in table.primary_key]
    with exported_snapshot(params.libpq(), f"{slot}_r{uuid.uuid4().hex[:8]}", temporary=True) as at, \
            params.connect() as conn, jdbc_driver(DRIVER, "PostgreSQL"):
        bounds = boundaries(conn, at.snapshot, table.name, table.primary_key, chunk_size, None, table.key_types())
        source = source_chunks_df(spark, params, table, contracts, types, at, key_ranges(bounds, None), parallelism,
                                  row_filter)
        # the comparison's ranges are in the lake's values and Spark's order
        plan = sorted(tuple(convert(v) for convert, v in zip(key_convert, b)) for b in bounds)
        if any(map(transforms.hashes, table.primary_key)):  # hashes keep no order of the source's keys
            plan = []
        source = transforms.frame(source)

        def changed_since() -> set[tuple]:
            keys: set[tuple] = set()
            relations = RelationContracts(conn)
            for record in change_records(changes(peek(conn, slot, publication, at.consistent_point)),
                                         {table.name}, relations, primary_key=relations.primary_key):
                if record.pos >= position.row_pos():
                    key = [record.row.get(k) for k in table.primary_key]
                    keys.add(transforms.key(table.primary_key, key, [None] * len(key)))
            return keys

        result = compare(lake_columns(source.drop("_pos")), live_rows(spark.read.format("delta").load(silver_path)),
                         [lake_name(c.name) for c in table.columns], [lake_name(k) for k in table.primary_key],
                         plan, changed_since, Reconciliation(table.name, compared_at=position))
    result.seconds = time.monotonic() - started
    return result
