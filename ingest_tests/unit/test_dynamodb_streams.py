"""The Streams reader on recorded payloads: lineage, splits, expired iterators, trimming, retries."""

import pytest
from botocore.exceptions import ClientError

from ingest.changes import ChangeOp
from ingest.sources.dynamodb.client import call
from ingest.sources.dynamodb.errors import SourceUnavailable, StreamGap, StreamSettingsError
from ingest.sources.dynamodb.positions import (
    AFTER_SEQUENCE_NUMBER, FINISHED, OPEN, TRIM_HORIZON, StreamCheckpoint, advance,
)
from ingest.sources.dynamodb.streams import describe_stream, has_new_records, read_stream_batch
from ingest.sources.dynamodb.types import TableTypes
from ingest_tests.recorded_streams import RecordedStreams

ARN = "arn:aws:dynamodb:eu-west-1:111122223333:table/orders/stream/2026-11-20T08:00:00.000"
P = "shardId-00000001795000000000-a1b2c3d4"
C1 = "shardId-00000001795014400000-e5f6a7b8"
C2 = "shardId-00000001795014400001-c9d0e1f2"
TYPES = TableTypes.build("orders", [{"AttributeName": "id", "KeyType": "HASH"}],
                         [{"AttributeName": "id", "AttributeType": "S"}], {"n": "bigint"})


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr("ingest.sources.dynamodb.client.time.sleep", lambda s: None)


def fresh(api) -> StreamCheckpoint:
    """A first read of the whole stream: every listed shard from TRIM_HORIZON."""
    return advance(StreamCheckpoint(ARN, ()), describe_stream(api, ARN, "orders", "src").shards, "orders")


def final_state(records):
    """Replay changes in `_pos` order per key, as the ordered merge does."""
    state = {}
    for r in sorted(records, key=lambda r: r.pos):
        state[r.row["id"]] = None if r.op == ChangeOp.DELETE else r.row["n"]
    return {k: v for k, v in state.items() if v is not None}


def test_describe_stream_follows_every_page():
    api = RecordedStreams("split.json")
    shards = describe_stream(api, ARN, "orders", "src").shards
    assert [s.shard_id for s in shards] == [P, C1, C2]
    assert [c[1].get("ExclusiveStartShardId") for c in api.calls] == [None, C1]


def test_a_child_shard_is_read_only_after_its_parent_and_orders_after_it():
    api = RecordedStreams("split.json")
    start = fresh(api)
    assert {s.shard_id: s.generation for s in start.shards} == {P: 0, C1: 1, C2: 1}
    batch = read_stream_batch(api, "src", "orders", TYPES, start, max_records=100, page_limit=2)
    read_order = [c[1]["ShardIterator"].split("|")[0] for c in api.calls if c[0] == "GetRecords"]
    assert read_order.index(C1) > max(i for i, s in enumerate(read_order) if s == P)
    # children's sequence numbers are lower than the parent's, yet their _pos is higher
    by_seq = {r.txid: r.pos for r in batch.records}
    assert by_seq["ev-400000000000000000201"] > by_seq["ev-500000000000000000104"]
    assert final_state(batch.records) == {"a": 3, "c": 7}
    end = {s.shard_id: s for s in batch.end.shards}
    assert end[P].status == FINISHED and end[P].sequence_number == "500000000000000000104"
    assert end[C1].status == OPEN and end[C1].iterator_type == AFTER_SEQUENCE_NUMBER
    assert all(c[1]["Limit"] <= 2 for c in api.calls if c[0] == "GetRecords")


def test_a_batch_cut_inside_the_parent_leaves_the_children_for_the_next_batch():
    api = RecordedStreams("split.json")
    first = read_stream_batch(api, "src", "orders", TYPES, fresh(api), max_records=3)
    assert [r.txid for r in first.records] == [f"ev-50000000000000000010{i}" for i in (1, 2, 3)]
    assert {s.shard_id: s.iterator_type for s in first.end.shards} == {P: AFTER_SEQUENCE_NUMBER, C1: TRIM_HORIZON,
                                                                       C2: TRIM_HORIZON}
    # the end survives the trip through commit metadata, and the next batch continues exactly there
    resumed = StreamCheckpoint.from_metadata(first.end.to_metadata())
    second = read_stream_batch(RecordedStreams("split.json"), "src", "orders", TYPES, resumed, max_records=100)
    all_ids = [r.txid for r in first.records + second.records]
    assert len(all_ids) == len(set(all_ids)) == 8
    assert final_state(first.records + second.records) == {"a": 3, "c": 7}
    assert not has_new_records(RecordedStreams("split.json"), "src", "orders", second.end)
    assert has_new_records(RecordedStreams("split.json"), "src", "orders", first.end)


def test_expired_iterators_are_refreshed_from_the_checkpoint_without_loss_or_repeat():
    api = RecordedStreams("expired_iterator.json")
    batch = read_stream_batch(api, "src", "orders", TYPES, fresh(api), max_records=100, page_limit=2)
    ids = [r.txid for r in batch.records]
    assert len(ids) == len(set(ids)) == 8
    assert batch.iterator_refreshes == 2
    refreshed = [c[1] for c in api.calls if c[0] == "GetShardIterator" and c[1]["ShardId"] == P]
    assert refreshed[-1]["ShardIteratorType"] == AFTER_SEQUENCE_NUMBER
    assert refreshed[-1]["SequenceNumber"] == "500000000000000000102"


def test_a_trimmed_checkpoint_is_a_clear_error_naming_the_table_and_the_fix():
    api = RecordedStreams("trimmed.json")
    stale = StreamCheckpoint.from_metadata({"stream": ARN, "shards": [
        {"shard": C1, "parent": None, "generation": 0, "seq": "400000000000000000120", "status": "open"}]})
    with pytest.raises(StreamGap) as exc:
        read_stream_batch(api, "src", "orders", TYPES, stale, max_records=10)
    assert "table orders" in str(exc.value) and C1 in str(exc.value) and "re-snapshot" in str(exc.value)
    assert "TrimmedDataAccessException" in str(exc.value)


def test_a_shard_that_left_the_listing_unfinished_is_a_gap():
    api = RecordedStreams("trimmed.json")
    gone = StreamCheckpoint.from_metadata({"stream": ARN, "shards": [
        {"shard": P, "parent": None, "generation": 0, "seq": "500000000000000000101", "status": "open"}]})
    with pytest.raises(StreamGap, match=f"shard {P} .* was trimmed"):
        read_stream_batch(api, "src", "orders", TYPES, gone, max_records=10)


def test_throttling_is_retried_and_the_batch_completes():
    api = RecordedStreams("throttled.json")
    batch = read_stream_batch(api, "src", "orders", TYPES, fresh(api), max_records=100)
    assert len(batch.records) == 8
    assert sum(1 for c in api.calls if c[0] == "GetRecords" and c[1]["ShardIterator"].startswith(P)) >= 3


def test_a_non_transient_error_is_raised_at_once_and_persistent_throttling_gives_up():
    attempts = []

    def validation(**kw):
        attempts.append(kw)
        raise ClientError({"Error": {"Code": "ValidationException", "Message": "bad"}}, "GetRecords")

    with pytest.raises(ClientError):
        call(validation, "GetRecords", sleep=lambda s: None)
    assert len(attempts) == 1

    def throttled(**kw):
        attempts.append(kw)
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "GetRecords")

    with pytest.raises(SourceUnavailable, match="still failing after 4 attempts"):
        call(throttled, "GetRecords", attempts=4, sleep=lambda s: None)
    assert len(attempts) == 5


def test_ttl_deletes_are_flagged_and_images_become_rows():
    api = RecordedStreams("split.json")
    batch = read_stream_batch(api, "src", "orders", TYPES, fresh(api), max_records=100)
    ttl = [r for r in batch.records if r.origin == "ttl"]
    assert [(r.op, r.row["id"]) for r in ttl] == [(ChangeOp.DELETE, "x")]
    update = next(r for r in batch.records if r.txid == "ev-500000000000000000102")
    assert update.op == ChangeOp.UPDATE and update.row["n"] == 2 and update.before["n"] == 1
    assert update.committed_at.year == 2026


def test_a_stream_without_new_images_is_refused():
    api = RecordedStreams("split.json")
    for page in api.pages:
        page["StreamDescription"]["StreamViewType"] = "KEYS_ONLY"
    with pytest.raises(StreamSettingsError, match="KEYS_ONLY.*NEW_AND_OLD_IMAGES"):
        describe_stream(api, ARN, "orders", "src")



def test_json_protocol_errors_keep_the_service_code_and_a_bad_checksum_is_caught():
    import zlib

    from ingest.sources.dynamodb.client import is_transient
    from ingest.sources.dynamodb.wire import CRC_MISMATCH, crc32_matches, error_code_of

    assert error_code_of(400, b'{"__type":"com.amazonaws.dynamodb.v20120810#TrimmedDataAccessException",'
                              b'"message":"trimmed"}') == ("TrimmedDataAccessException", "trimmed")
    assert error_code_of(400, b'{"__type":"com.amazon.coral.availability#ThrottlingException",'
                              b'"Message":"slow down"}') == ("ThrottlingException", "slow down")
    assert error_code_of(502, b"<html>Bad Gateway</html>") == ("502", "<html>Bad Gateway</html>")
    body = b'{"Items": []}'
    assert crc32_matches({"x-amz-crc32": str(zlib.crc32(body))}, body) and crc32_matches({}, body)
    assert not crc32_matches({"x-amz-crc32": str(zlib.crc32(body) + 1)}, body)
    # a throttled page, a proxy's 502 and a damaged answer are retried; a trimmed shard is not
    for code, transient in (("ThrottlingException", True), ("502", True), (CRC_MISMATCH, True),
                            ("TrimmedDataAccessException", False)):
        assert is_transient(ClientError({"Error": {"Code": code}}, "GetRecords")) is transient


def test_json_protocol_pages_travel_on_the_clients_own_connections_without_nagles_delay():
    """Scan and GetRecords pages go over the boto3 client's HTTP session, whose sockets disable Nagle's
    algorithm: on a session of its own, each request waited for the server's delayed ACK (40 ms a page)."""
    import socket

    from ingest.sources.dynamodb.client import ClientSettings

    settings = ClientSettings("us-east-1", "http://127.0.0.1:9", "local", "local")  # no call is made
    for pages in (settings.dynamodb(), settings.streams()):
        session = pages._http
        assert session is pages._client._endpoint.http_session
        assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in session._socket_options
