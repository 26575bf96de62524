"""Reconciliation of a MySQL silver table with its source table (the check's and the bench's entry).

The source side is here: the snapshot's chunk reader reads the rows, its chunk
plan gives the key ranges, silver's Delta log says how far it has merged, and
the binlog says which keys changed since. The comparison is in
ingest/lake/reconcile.py.
"""

from __future__ import annotations

import time

from ingest.lake.reconcile import Reconciliation
from ingest.sources.mysql.chunks import Key
from ingest.batches import merged_through
from ingest.sources.mysql.positions import BatchRange, BinlogPosition


def silver_position(silver_path: str, basename: str) -> BinlogPosition | None:
    """The position silver has merged up to, from its Delta log (None: no snapshot merged)."""
    from ingest.lake.deltalog import commits

    history = commits(silver_path)
    snapshot = next((c for c in history if c.metadata.get("from") == "snapshot"), None)
    if snapshot is None:
        return None
    merged = [BatchRange.from_key(c.metadata["batch"], basename) for c in history
              if c.metadata.get("kind") == "silver" and c.metadata.get("batch") and c.version > snapshot.version]
    return merged_through(BinlogPosition.from_metadata(snapshot.metadata["log_start"]), merged)


def reconcile(spark, params, schema, silver_path: str, *, chunk_size: int, parallelism: int,
              transforms=None, row_filter=None) -> Reconciliation:
    """Compare silver's live rows with the source's rows now, leaving out keys changed since silver's position.
    With column `transforms`, the source's rows are compared as the lake holds them (transformed); a
    hashed key has no order in common with the source's, so the table is then one range."""
    from ingest.lake.columns import lake_name
    from ingest.lake.connect import jdbc_driver
    from ingest.lake.merge import live_rows
    from ingest.lake.reconcile import compare
    from ingest.lake.write import lake_columns
    from ingest.sources.mysql.binlog import keys_changed, master_position
    from ingest.sources.mysql.chunks import plan_chunks
    from ingest.sources.mysql.jdbc import DRIVER
    from ingest.adapters.mysql import read_chunks_df
    from ingest.sources.mysql.snapshot import plan_boundaries

    started = time.monotonic()
    with params.connect() as conn:
        head = master_position(conn)
        chunk_plan = plan_boundaries(conn, schema, chunk_size, None)
    position = silver_position(silver_path, head.basename)
    if position is None:
        raise ValueError(f"{schema.table}: silver at {silver_path} has no snapshot merged yet. "
                         "Fix: materialize the snapshot and a change batch first")

    def changed_since() -> set[Key]:
        with params.connect() as conn:
            now = master_position(conn)
        changed = keys_changed(params, schema, BatchRange(position, now)) if now > position else set()
        if transforms:
            changed = {transforms.key(schema.primary_key, k, [None] * len(k)) for k in changed}
        return changed

    silver = live_rows(spark.read.format("delta").load(silver_path))
    with jdbc_driver(DRIVER, "MariaDB"):
        source = read_chunks_df(spark, params, schema, plan_chunks(chunk_plan), parallelism, row_filter)
        if transforms:
            source = transforms.frame(source)
        if transforms and any(map(transforms.hashes, schema.primary_key)):
            chunk_plan = []
        source = lake_columns(source)
        result = compare(source, silver, [lake_name(c) for c in schema.column_names],
                         [lake_name(k) for k in schema.primary_key], chunk_plan, changed_since,
                         Reconciliation(schema.table, compared_at=position))
    result.seconds = time.monotonic() - started
    return result
