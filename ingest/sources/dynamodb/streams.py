"""Reading a table's stream: shard listing, lineage order, checkpoints, a fixed-end batch.

The reader takes any StreamsApi (boto3's client, or the recorded one of the
tests) and a start checkpoint, and returns the records read and the
checkpoint after the last of them: the batch's end, fixed by what was read
and committed with the rows. Shards are read parents first; a child shard
only once its parent is read to its end.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ingest.changes import ChangeOp, ChangeRecord
from ingest.filters import land
from ingest.sources.dynamodb.client import StreamsApi, call, error_code
from ingest.sources.dynamodb.conditions import Condition
from ingest.sources.dynamodb.deserialize import from_item
from ingest.sources.dynamodb.errors import StreamSettingsError, TableNotFound, resnapshot_fix
from ingest.sources.dynamodb.positions import (
    FINISHED, Shard, ShardCheckpoint, StreamCheckpoint, StreamGap, advance, record_pos,
)
from ingest.sources.dynamodb.types import TableTypes

OPS = {"INSERT": ChangeOp.INSERT, "MODIFY": ChangeOp.UPDATE, "REMOVE": ChangeOp.DELETE}
IMAGE_VIEWS = ("NEW_IMAGE", "NEW_AND_OLD_IMAGES")
MAX_EMPTY_PAGES_CLOSED = 20
"""A closed shard may answer empty pages before its last records; give up for this batch after this many."""
MAX_ITERATOR_REFRESHES = 5
TTL_PRINCIPAL = "dynamodb.amazonaws.com"


@dataclass(frozen=True)
class StreamDescription:
    stream_arn: str
    status: str
    view_type: str
    shards: list[Shard]


def describe_stream(api: StreamsApi, stream_arn: str, table: str, source: str) -> StreamDescription:
    """DescribeStream, every page (ExclusiveStartShardId), with the settings checked."""
    shards: list[Shard] = []
    start: str | None = None
    while True:
        kwargs: dict[str, Any] = {"StreamArn": stream_arn}
        if start:
            kwargs["ExclusiveStartShardId"] = start
        try:
            desc = call(api.describe_stream, f"DescribeStream of table {table}", **kwargs)["StreamDescription"]
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                raise StreamGap(f"source {source}, table {table}: stream {stream_arn} no longer exists (the stream "
                                f"was disabled or the table deleted). {resnapshot_fix(source, table)}") from None
            raise
        shards += [Shard.from_api(s) for s in desc.get("Shards", [])]
        start = desc.get("LastEvaluatedShardId")
        if not start:
            break
    view = desc.get("StreamViewType", "")
    if view not in IMAGE_VIEWS:
        raise StreamSettingsError(
            f"source {source}, table {table}: the stream's view type is {view or 'unknown'}, which lacks new "
            "item images. Fix: enable the stream with StreamViewType NEW_AND_OLD_IMAGES (or NEW_IMAGE), then "
            "re-snapshot the table")
    return StreamDescription(stream_arn, desc.get("StreamStatus", ""), view, shards)


def change_record(table: str, types: TableTypes, shard: ShardCheckpoint, record: Mapping[str, Any],
                  condition: Condition | None = None) -> ChangeRecord | None:
    """One stream record in the lake's change shape (pure); with a row filter's `condition`, what it lands
    as (ingest/filters.py), judged on its typed images, or None."""
    dyn = record["dynamodb"]
    op = OPS.get(record.get("eventName", ""))
    if op is None:
        raise ValueError(f"table {table}: stream record {record.get('eventID')} has unknown eventName "
                         f"{record.get('eventName')!r}")
    if op == ChangeOp.DELETE:
        image = dyn.get("OldImage") or dyn["Keys"]
    else:
        image = dyn.get("NewImage")
        if image is None:
            raise StreamSettingsError(f"table {table}: stream record {record.get('eventID')} has no NewImage. Fix: "
                                      "use a stream with StreamViewType NEW_AND_OLD_IMAGES, then re-snapshot")
    before = dyn.get("OldImage") if op == ChangeOp.UPDATE else None
    identity = record.get("userIdentity") or {}
    ttl = identity.get("type") == "Service" and identity.get("principalId") == TTL_PRINCIPAL
    change = ChangeRecord(
        table=table, op=op, pos=record_pos(shard.generation, dyn["SequenceNumber"]),
        row=types.row(from_item(image)),
        before=types.row(from_item(before)) if before else None,
        committed_at=_timestamp(dyn.get("ApproximateCreationDateTime")),
        txid=record.get("eventID"), origin="ttl" if ttl else None,
    )
    if condition is None:
        return change
    old, new = dyn.get("OldImage"), dyn.get("NewImage")  # NEW_IMAGE streams log no old image: not known
    return land(change, None if old is None else condition.holds(old),
                None if op == ChangeOp.DELETE else condition.holds(new), types.key_columns)


def _timestamp(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc)
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass
class StreamBatch:
    start: StreamCheckpoint
    end: StreamCheckpoint
    records: list[ChangeRecord] = field(default_factory=list)
    read: int = 0
    """Records read, kept or not (a row filter keeps some)."""
    pages: int = 0
    iterator_refreshes: int = 0
    shards_finished: list[str] = field(default_factory=list)


class _ShardReader:
    def __init__(self, api: StreamsApi, source: str, table: str, stream_arn: str):
        self.api, self.source, self.table, self.arn = api, source, table, stream_arn

    def _gap(self, shard: ShardCheckpoint, exc: Exception) -> StreamGap:
        where = "its start" if shard.sequence_number is None else f"sequence number {shard.sequence_number}"
        return StreamGap(
            f"source {self.source}, table {self.table}: shard {shard.shard_id} was trimmed past {where} "
            f"({error_code(exc)}): the stream keeps records for 24 hours and these were not read in time. "
            f"{resnapshot_fix(self.source, self.table)}")

    def iterator(self, shard: ShardCheckpoint) -> str | None:
        kwargs: dict[str, Any] = {"StreamArn": self.arn, "ShardId": shard.shard_id,
                                  "ShardIteratorType": shard.iterator_type}
        if shard.sequence_number is not None:
            kwargs["SequenceNumber"] = shard.sequence_number
        try:
            return call(self.api.get_shard_iterator, f"GetShardIterator of {self.table}/{shard.shard_id}",
                        **kwargs).get("ShardIterator")
        except Exception as exc:
            if error_code(exc) in ("TrimmedDataAccessException", "ResourceNotFoundException"):
                raise self._gap(shard, exc) from None
            raise

    def read(self, shard: ShardCheckpoint, types: TableTypes, budget: int, page_limit: int,
             end_seq: str | None, condition: Condition | None = None) -> ShardRead:
        """Records after the shard's checkpoint, at most `budget` read (those a row filter's `condition`
        leaves out are read, not kept); expired iterators are refreshed from the checkpoint as advanced by
        the pages already taken.

        The next page is asked for before this one is decoded (its iterator comes with the page),
        so the service's time for it overlaps the decoding; the calls are the same, in the same order."""
        from concurrent.futures import ThreadPoolExecutor

        got = ShardRead(shard)
        where = f"GetRecords of {self.table}/{shard.shard_id}"

        def ask(iterator: str | None, left: int):
            if iterator is None or left <= 0:
                return None
            return pool.submit(call, self.api.get_records, where, ShardIterator=iterator, Limit=min(page_limit, left))

        with ThreadPoolExecutor(1, thread_name_prefix="getrecords") as pool:
            it = self.iterator(shard)
            ahead = ask(it, budget)
            empty = 0
            while ahead is not None:
                try:
                    page = ahead.result()
                except Exception as exc:
                    code = error_code(exc)
                    if code == "ExpiredIteratorException" and got.refreshes < MAX_ITERATOR_REFRESHES:
                        got.refreshes += 1
                        it = self.iterator(got.checkpoint)
                        ahead = ask(it, budget - got.read)
                        continue
                    if code == "TrimmedDataAccessException":
                        raise self._gap(got.checkpoint, exc) from None
                    raise
                got.pages += 1
                records = page.get("Records", [])
                it = page.get("NextShardIterator")
                last = records[-1]["dynamodb"]["SequenceNumber"] if records else got.checkpoint.sequence_number
                if end_seq is not None and last == end_seq:
                    it = None
                # an open shard answering an empty page has nothing more for now
                idle = it is not None and not records and (end_seq is None or empty + 1 >= MAX_EMPTY_PAGES_CLOSED)
                empty += it is not None and not records
                ahead = None if idle else ask(it, budget - got.read - len(records))
                got.read += len(records)
                landed = (change_record(self.table, types, got.checkpoint, rec, condition) for rec in records)
                got.records += [r for r in landed if r is not None]
                if records:  # once a page: a checkpoint per record was a tenth of the decoding
                    got.checkpoint = replace(got.checkpoint, sequence_number=last)
        if it is None:  # DynamoDB closed the shard and it is read to its end
            got.checkpoint, got.finished = replace(got.checkpoint, status=FINISHED), True
        return got


@dataclass
class ShardRead:
    checkpoint: ShardCheckpoint
    records: list[ChangeRecord] = field(default_factory=list)
    read: int = 0
    """Records read, kept or not."""
    pages: int = 0
    refreshes: int = 0
    finished: bool = False


def read_stream_batch(api: StreamsApi, source: str, table: str, types: TableTypes, start: StreamCheckpoint,
                      max_records: int, page_limit: int = 1000, condition: Condition | None = None) -> StreamBatch:
    """Read at most `max_records` records after `start`; the batch ends after the last one read. With a
    row filter's `condition`, the batch keeps what each record lands as (ingest/filters.py).

    Shards are read in lineage order, parents first; when a shard is read to
    its end the listing is refreshed, since its children may be newer than it.
    Repeating from the same start reads the same records, plus any that
    arrived since on shards it had caught up with: the end is the checkpoint
    committed with the rows, fixed by what was read.
    """
    if not 1 <= page_limit <= 1000:
        raise ValueError(f"page_limit must be 1..1000 (GetRecords' Limit), not {page_limit}")
    reader = _ShardReader(api, source, table, start.stream_arn)
    checkpoint = start
    batch = StreamBatch(start=start, end=start)
    visited: set[str] = set()
    while batch.read < max_records:
        desc = describe_stream(api, start.stream_arn, table, source)
        checkpoint = advance(checkpoint, desc.shards, table)
        end_seq = {s.shard_id: s.end_seq for s in desc.shards}
        todo = [s for s in checkpoint.readable() if s.shard_id not in visited]
        if not todo:
            break
        finished_any = False
        for shard in todo:
            got = reader.read(shard, types, max_records - batch.read, page_limit, end_seq.get(shard.shard_id),
                              condition)
            batch.records += got.records
            batch.read += got.read
            batch.pages += got.pages
            batch.iterator_refreshes += got.refreshes
            checkpoint = checkpoint.with_shard(got.checkpoint)
            visited.add(shard.shard_id)
            if got.finished:
                batch.shards_finished.append(shard.shard_id)
                finished_any = True
            if batch.read >= max_records:
                break
        if not finished_any:
            break
    batch.end = checkpoint
    return batch


def has_new_records(api: StreamsApi, source: str, table: str, checkpoint: StreamCheckpoint) -> bool:
    """What the sensor asks: anything to read after the checkpoint (one record is enough)?"""
    desc = describe_stream(api, checkpoint.stream_arn, table, source)
    current = advance(checkpoint, desc.shards, table)
    if {s.shard_id for s in current.shards} - {s.shard_id for s in checkpoint.shards}:
        return True
    reader = _ShardReader(api, source, table, checkpoint.stream_arn)
    for shard in current.readable():
        it = reader.iterator(shard)
        if it is None:
            return True  # closed and read to its end: its children are next
        page = call(api.get_records, f"GetRecords of {table}/{shard.shard_id}", ShardIterator=it, Limit=1)
        if page.get("Records") or not page.get("NextShardIterator"):
            return True
    return False


def stream_of(dynamodb, source: str, table: str) -> tuple[str, dict[str, Any]]:
    """The table's latest stream ARN and its description, settings checked."""
    try:
        desc = call(dynamodb.describe_table, f"DescribeTable {table}", TableName=table)["Table"]
    except Exception as exc:
        if error_code(exc) == "ResourceNotFoundException":
            raise TableNotFound(f"source {source}: DynamoDB table {table} does not exist. Fix: create it, or remove "
                                "it from the source's tables in the sources file") from None
        raise
    spec = desc.get("StreamSpecification") or {}
    if not desc.get("LatestStreamArn") or not spec.get("StreamEnabled"):
        raise StreamSettingsError(
            f"source {source}, table {table}: the table has no enabled stream. Fix: `aws dynamodb update-table "
            f"--table-name {table} --stream-specification StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES`")
    if spec.get("StreamViewType") not in IMAGE_VIEWS:
        raise StreamSettingsError(
            f"source {source}, table {table}: the stream's view type is {spec.get('StreamViewType')}, which lacks "
            "new item images. Fix: disable the stream and enable it with StreamViewType NEW_AND_OLD_IMAGES, then "
            "re-snapshot the table")
    return desc["LatestStreamArn"], desc
