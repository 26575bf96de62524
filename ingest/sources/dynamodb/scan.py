"""Parallel Scan snapshots of DynamoDB tables, resumable by segment.

Before the scan starts, the stream position of every shard is recorded
(`positions.snapshot_checkpoint`), and every scanned item gets the `_pos`
below all records still to come from those positions. So the ordered merge
of the scan plus the stream read from there gives the exact table: a record
newer than the scan wins over the scanned item, and replaying one older than
the scan is harmless (each record carries the item's whole new image, and
every later change of the item is replayed after it).

Segments (`Segment` / `TotalSegments`) are read by a PySpark Python data
source, one Spark partition per segment, so they run in parallel on the
executors; each pages with `ExclusiveStartKey`. The lake commits segments
in waves (ingest/lake/snapshot.py, driven by ingest/adapters/dynamodb.py); a
snapshot that dies resumes with the segments not yet committed, under the
same positions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from ingest.sources.dynamodb.client import ClientSettings, call
from ingest.sources.dynamodb.deserialize import from_item
from ingest.sources.dynamodb.types import TableTypes


def scan_segment(settings: ClientSettings, table: str, types: TableTypes, segment: int, total: int,
                 consistent: bool, page_size: int | None, pos: int, arrow_schema,
                 row_filter: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """Arrow record batches of one Scan segment, a page at a time, each row tagged with `pos`; with a
    `row_filter` ({expression, names, values}) only the items it holds for, filtered by DynamoDB. The next
    page is asked for before this one is converted, so the service's time overlaps the conversion."""
    from ingest.sources.dynamodb.conditions import scan_arguments

    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    client = settings.dynamodb()
    names = [n for n, _ in types.columns]
    kwargs: dict[str, Any] = {"TableName": table, "Segment": segment, "TotalSegments": total,
                              "ConsistentRead": consistent}
    if page_size:
        kwargs["Limit"] = page_size
    if row_filter:
        kwargs.update(scan_arguments(row_filter))
    pos_value = Decimal(pos)
    where = f"Scan of {table} segment {segment}/{total}"
    with ThreadPoolExecutor(1, thread_name_prefix="scan") as pool:
        ahead = pool.submit(call, client.scan, where, **kwargs)
        while ahead is not None:
            page = ahead.result()
            ahead = None
            if "LastEvaluatedKey" in page:
                ahead = pool.submit(call, client.scan, where, **{**kwargs, "ExclusiveStartKey": page["LastEvaluatedKey"]})
            rows = [types.row(from_item(item)) for item in page.get("Items", [])]
            if rows:
                arrays = [pa.array([r[n] for r in rows], type=arrow_schema.field(i).type)
                          for i, n in enumerate(names)]
                arrays.append(pa.repeat(pa.scalar(pos_value, arrow_schema.field(len(names)).type), len(rows)))
                yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def read_segment(spec: dict[str, Any], options: dict[str, str], segment: int, arrow_schema) -> Iterator[Any]:
    """One Spark partition: one Scan segment (executor side)."""
    from ingest.sources.dynamodb.types import parse_type

    settings = ClientSettings(**spec["client"], access_key_id=options.get("access_key_id"),
                              secret_access_key=options.get("secret_access_key"),
                              session_token=options.get("session_token"))
    types = TableTypes(spec["table"], tuple(spec["keys"]), tuple((n, parse_type(t)) for n, t in spec["columns"]))
    yield from scan_segment(settings, spec["table"], types, segment, spec["total"], spec["consistent"],
                            spec["page_size"], int(spec["pos"]), arrow_schema, spec.get("where"))
