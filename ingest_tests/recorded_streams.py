"""A DynamoDB Streams client that replays recorded DescribeStream and GetRecords responses.

DynamoDB Local has one shard per stream here: no splits, no iterator expiry and no trim
horizon within a test, so those cases are driven through the real reader code with this
stand-in for boto3's `dynamodbstreams` client. A fixture (JSON, under
fixtures/dynamodb/) holds:

- `describe_stream`: the DescribeStream response pages, chained by
  LastEvaluatedShardId;
- `get_records`: per shard, the GetRecords responses in order; a shard whose
  last response has no NextShardIterator is closed;
- `trimmed_before`: per shard, the first sequence number still retained;
- `faults`: errors to raise, by operation, shard and call number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

FIXTURES = Path(__file__).parent / "fixtures" / "dynamodb"


class RecordedStreams:
    def __init__(self, fixture: str | dict):
        data = json.loads((FIXTURES / fixture).read_text()) if isinstance(fixture, str) else fixture
        self.pages = data["describe_stream"]
        self.records = {shard: [r for resp in resps for r in resp.get("Records", [])]
                        for shard, resps in data["get_records"].items()}
        self.closed = {shard for shard, resps in data["get_records"].items()
                       if resps and "NextShardIterator" not in resps[-1]}
        self.trimmed_before = data.get("trimmed_before", {})
        self.faults = list(data.get("faults", []))
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._counts: dict[tuple[str, str | None], int] = {}

    def _fault(self, operation: str, shard: str | None) -> None:
        key = (operation, shard)
        self._counts[key] = self._counts.get(key, 0) + 1
        for fault in self.faults:
            if fault["operation"] == operation and fault.get("shard") in (None, shard) \
                    and self._counts[key] in fault.get("calls", [fault.get("call")]):
                raise ClientError({"Error": {"Code": fault["code"], "Message": fault.get("message", fault["code"])},
                                   "ResponseMetadata": {"HTTPStatusCode": fault.get("status", 400)}}, operation)

    def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("DescribeStream", kwargs))
        self._fault("DescribeStream", None)
        start = kwargs.get("ExclusiveStartShardId")
        if start is None:
            return self.pages[0]
        for page in self.pages[1:]:
            if page["StreamDescription"]["Shards"] and self._after(start, page):
                return page
        raise AssertionError(f"no recorded DescribeStream page after {start}")

    def _after(self, start: str, page: dict) -> bool:
        previous = self.pages[self.pages.index(page) - 1]["StreamDescription"]
        return previous.get("LastEvaluatedShardId") == start

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("GetShardIterator", kwargs))
        shard = kwargs["ShardId"]
        self._fault("GetShardIterator", shard)
        records = self.records.get(shard, [])
        floor = self.trimmed_before.get(shard)
        if kwargs["ShardIteratorType"] == "TRIM_HORIZON":
            index = 0 if floor is None else next(
                (i for i, r in enumerate(records) if int(r["dynamodb"]["SequenceNumber"]) >= int(floor)), len(records))
        else:
            seq = int(kwargs["SequenceNumber"])
            if floor is not None and seq < int(floor) - 1:
                raise ClientError({"Error": {"Code": "TrimmedDataAccessException",
                                             "Message": "The operation attempted to read past the oldest stream "
                                                        "record in a shard."}}, "GetShardIterator")
            index = sum(1 for r in records if int(r["dynamodb"]["SequenceNumber"]) <= seq)
        return {"ShardIterator": f"{shard}|{index}"}

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("GetRecords", kwargs))
        shard, index = kwargs["ShardIterator"].rsplit("|", 1)
        self._fault("GetRecords", shard)
        limit = kwargs.get("Limit", 1000)
        if not 1 <= limit <= 1000:
            raise ClientError({"Error": {"Code": "ValidationException", "Message": f"Limit {limit}"}}, "GetRecords")
        records = self.records.get(shard, [])
        i = int(index)
        page = records[i:i + limit]
        out: dict[str, Any] = {"Records": page}
        if not (shard in self.closed and i + len(page) >= len(records)):
            out["NextShardIterator"] = f"{shard}|{i + len(page)}"
        return out
