"""Lock-free, parallel, resumable snapshots (DESIGN principle 3).

Each chunk of primary keys is read in its own `START TRANSACTION WITH
CONSISTENT SNAPSHOT` and every row is tagged with that transaction's binlog
position (`_pos`, row index 0). Chunks are read by Spark's JDBC reader where
every column has a JDBC form (jdbc.py: the type contract as SQL, rows never in
Python), else by the PySpark Python data source here (`read_chunk`), whose
values go through the type contract's Python functions (types.py) as binlog
rows do. Either way Spark executors open the connections, so a cluster scales
the read; `parallelism` partitions read at once means at most that many source
connections. The golden all-types test holds both readers and the binlog to
the same values.

The lake commits chunks in waves of `chunks_per_commit` (ingest/lake/snapshot.py),
each commit carrying the snapshot id, the wave number (also the txn version) and
the key the next wave starts at; ingest/adapters/mysql.py plans and drives it. A
snapshot that dies resumes after its last committed wave; a finished one is
replaced by the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ingest.retry import retrying
from ingest.sources.mysql.chunks import (
    Chunk, chunk_query, even_boundaries, key_from_json, next_boundary_query, quote_ident,
)
from ingest.sources.mysql.errors import SourceUnreachable, executor_error_code, is_transient
from ingest.sources.mysql.positions import BinlogPosition
from ingest.sources.mysql.schema import ConnectionParams, TableSchema, describe_table
from ingest.sources.mysql.types import MySQLColumn, column_type, convert_column

T = TypeVar("T")

FETCH_ROWS = 10_000


def open_consistent_snapshot(conn) -> BinlogPosition:
    """Begin a consistent-snapshot transaction and return the binlog position it sees."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {k.lower(): v for k, v in cur.fetchall()}
    return BinlogPosition(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))


# ---------------------------------------------------------------- executor side

def read_chunk(params: ConnectionParams, spec: dict[str, Any], chunk: Chunk, arrow_schema) -> Iterator[Any]:
    """Yield Arrow record batches of one chunk, each row tagged with the chunk's `_pos`."""
    import pyarrow as pa
    from decimal import Decimal

    from MySQLdb.cursors import SSCursor

    columns = [MySQLColumn(**c) for c in spec["columns"]]
    ctypes = [column_type(c, spec["table"]) for c in columns]
    conn = params.connect_streaming()
    try:
        position = open_consistent_snapshot(conn)
        pos_value = Decimal(position.row_pos())
        sql, args = chunk_query(spec["database"], spec["table"], [c.name for c in columns], spec["key"], chunk,
                                spec.get("where"))
        # No `with` for the cursor: closing an unbuffered cursor whose connection
        # dropped raises an AttributeError that would hide the 2013 error the
        # wave retry looks for.
        cur = conn.cursor(SSCursor)
        cur.execute(sql, args)
        while True:
            rows = cur.fetchmany(FETCH_ROWS)
            if not rows:
                break
            cols = list(zip(*rows))
            arrays = [
                pa.array(convert_column(ct, list(values)), type=arrow_schema.field(i).type)
                for i, (ct, values) in enumerate(zip(ctypes, cols))
            ]
            arrays.append(pa.repeat(pa.scalar(pos_value, arrow_schema.field(len(columns)).type), len(rows)))
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
        cur.close()
        conn.commit()
    finally:
        conn.close()


def read_chunk_group(spec: dict[str, Any], options: dict[str, str], chunks: list[dict], arrow_schema) -> Iterator[Any]:
    """One Spark partition: its chunks in turn (executor side)."""
    params = ConnectionParams(**spec["conn"], password=options["password"])
    for c in chunks:
        yield from read_chunk(params, spec, Chunk(c["index"], key_from_json(c["lo"]), key_from_json(c["hi"])),
                              arrow_schema)


INTEGER_KEYS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})


def plan_boundaries(conn, schema: TableSchema, chunk_size: int, start) -> list[tuple]:
    """Chunk boundaries from `start` on (the first chunk's own start excluded): equal-width ranges of a
    dense integer key, else every `chunk_size`-th key."""
    kinds = {c.name: c.data_type.lower() for c in schema.columns}
    if len(schema.primary_key) == 1 and kinds.get(schema.primary_key[0]) in INTEGER_KEYS:
        key, table = quote_ident(schema.primary_key[0]), f"{quote_ident(schema.database)}.{quote_ident(schema.table)}"
        with conn.cursor() as cur:
            cur.execute(f"SELECT MIN({key}), MAX({key}) FROM {table}")
            lowest, highest = cur.fetchone()
            cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                        (schema.database, schema.table))
            estimate = (cur.fetchone() or (0,))[0] or 0
        if lowest is None:
            return []
        even = even_boundaries(int(lowest), int(highest), int(estimate), chunk_size,
                               None if start is None else start[0])
        if even is not None:
            return [(b,) for b in even]
    boundaries: list[tuple] = []
    with conn.cursor() as cur:
        while True:
            sql, args = next_boundary_query(schema.database, schema.table, list(schema.primary_key), chunk_size,
                                            boundaries[-1] if boundaries else start)
            cur.execute(sql, args)
            row = cur.fetchone()
            if row is None:
                return boundaries
            boundaries.append(tuple(row))


# ---------------------------------------------------------------- driver side

class ShapeChanged(Exception):
    """The table's columns or key changed (DDL) while it was being snapshotted."""

    def __init__(self, schema: TableSchema) -> None:
        super().__init__(schema.table)
        self.schema = schema



def check_shape(params: ConnectionParams, schema: TableSchema, fingerprint: str) -> None:
    """Raise ShapeChanged when the table no longer has the shape the snapshot started with."""
    with params.connect() as conn:
        now = describe_table(conn, schema.database, schema.table, exclude=frozenset(schema.excluded))
    if now.fingerprint() != fingerprint:
        raise ShapeChanged(now)



def retry_wave(write: Callable[[], T], source: str, table: str, wave: int, params: ConnectionParams,
               attempts: int = 4) -> T:
    """Read and commit a wave again when a chunk's connection drops or the server restarts.

    Safe: the wave commits with its txn id, so a wave that did commit before
    the error is skipped by Delta, and one that did not wrote nothing.
    """
    def give_up(exc: BaseException, tries: int) -> SourceUnreachable:
        return SourceUnreachable(
            f"source {source}: snapshot wave {wave} of {table} lost its connection to {params.host}:{params.port} "
            f"{tries} times (error {executor_error_code(str(exc)) or getattr(exc, 'args', ['?'])[0]}). Fix: check "
            "the server, then materialize the snapshot again: it resumes after the last committed wave",
            code=executor_error_code(str(exc)))

    return retrying(write, is_transient, give_up, attempts=attempts, base_delay=1.0)

