"""Reading a lake table with Delta readers other than Spark, and comparing with Spark's read."""

from __future__ import annotations

import json
from collections.abc import Sequence


def _sorted_rows(table, keys: Sequence[str]) -> list[dict]:
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: (json.dumps([r[k] for k in keys], default=str),
                                       json.dumps(r, default=str, sort_keys=True)))


def assert_any_reader_opens(spark, path: str, keys: Sequence[str]) -> int:
    """delta-rs (`to_pyarrow_table()` and its SQL `QueryBuilder`) and Polars read the same rows as
    Spark; the table asks for no reader feature but timestampNtz (a DATETIME column: reader version 3,
    which every Delta reader here supports). Returns the number of rows."""
    import deltalake

    table = deltalake.DeltaTable(path)
    protocol = table.protocol()
    assert set(protocol.reader_features or ()) <= {"timestampNtz"}, (path, protocol)
    assert protocol.min_reader_version == (3 if protocol.reader_features else 1), (path, protocol)
    return _same_rows_as_spark(spark, path, keys, {"deltalake to_pyarrow_table": arrow_table(table, path)})


def arrow_table(table, path: str):
    """delta-rs's `to_pyarrow_table()` of a local table as docs/design.md writes it: through an Arrow
    filesystem, not deltalake's Python one, which Arrow's I/O threads may call at interpreter exit."""
    import pyarrow.fs

    return table.to_pyarrow_table(filesystem=pyarrow.fs.SubTreeFileSystem(path, pyarrow.fs.LocalFileSystem()))


def assert_deletion_vector_readers_open(spark, path: str, keys: Sequence[str]) -> int:
    """A table with deletion vectors (an opt-in silver): delta-rs's SQL `QueryBuilder` and Polars apply
    them and read the same rows as Spark (delta-rs's `to_pyarrow_table()` refuses such a table)."""
    import deltalake

    protocol = deltalake.DeltaTable(path).protocol()
    assert "deletionVectors" in (protocol.reader_features or ()), (path, protocol)
    return _same_rows_as_spark(spark, path, keys, {})


def _same_rows_as_spark(spark, path: str, keys: Sequence[str], read: dict) -> int:
    """`read` (reader name: Arrow table) plus delta-rs's SQL and Polars hold Spark's rows of `path`."""
    import deltalake
    import polars as pl
    import pyarrow as pa

    expected = _sorted_rows(spark.read.format("delta").load(path).toArrow(), keys)
    readers = {
        **read,
        "deltalake QueryBuilder": pa.table(deltalake.QueryBuilder().register("t", deltalake.DeltaTable(path))
                                           .execute("SELECT * FROM t").read_all()),
        "polars read_delta": pl.read_delta(path).to_arrow(),
    }
    for reader, got in readers.items():
        assert _sorted_rows(got, keys) == expected, f"{reader} reads {path} differently from Spark"
    return len(expected)
