"""Stream positions: generations across splits, checkpoints, lineage gaps, snapshot positions."""

import pytest

from ingest.sources.dynamodb.cdc import BatchOrderError, choose_start
from ingest.sources.dynamodb.positions import (
    FINISHED, OPEN, SEQ_DIGITS, Shard, ShardCheckpoint, StreamCheckpoint, StreamGap, advance, batch_key,
    batch_ordinal, record_pos, snapshot_checkpoint,
)

ARN = "arn:aws:dynamodb:r:1:table/t/stream/A"


def listing(*shards):
    return [Shard(sid, parent, start, end) for sid, parent, start, end in shards]


def test_a_later_generation_orders_after_any_sequence_number():
    assert record_pos(1, "1") > record_pos(0, "9" * SEQ_DIGITS)
    assert record_pos(0, "20") > record_pos(0, "3")  # numbers, never strings
    with pytest.raises(ValueError):
        record_pos(0, "1" + "0" * SEQ_DIGITS)


def test_children_get_their_parents_generation_plus_one_and_wait_for_it():
    cp = advance(StreamCheckpoint(ARN, ()), listing(("p", None, "100", "110"), ("c1", "p", "50", None),
                                                      ("c2", "p", "60", None), ("g", "c1", "10", None)), "t")
    gens = {s.shard_id: s.generation for s in cp.shards}
    assert gens == {"p": 0, "c1": 1, "c2": 1, "g": 2}
    assert [s.shard_id for s in cp.readable()] == ["p"]
    cp = cp.with_shard(ShardCheckpoint("p", None, 0, "110", FINISHED))
    assert [s.shard_id for s in cp.readable()] == ["c1", "c2"]


def test_generations_stick_when_ancestors_leave_the_listing():
    cp = advance(StreamCheckpoint(ARN, ()), listing(("p", None, "1", "9"), ("c", "p", "1", None)), "t")
    cp = cp.with_shard(ShardCheckpoint("p", None, 0, "9", FINISHED))
    later = advance(cp, listing(("c", "p", "1", "5"), ("d", "c", "1", None)), "t")  # p trimmed: finished, dropped
    assert {s.shard_id: s.generation for s in later.shards} == {"c": 1, "d": 2}


def test_an_unfinished_shard_that_left_the_listing_is_a_gap():
    cp = advance(StreamCheckpoint(ARN, ()), listing(("p", None, "1", None)), "t")
    with pytest.raises(StreamGap, match="shard p .*trimmed"):
        advance(cp, listing(("q", None, "1", None)), "orders")


def test_a_new_shard_whose_parent_was_never_seen_is_a_gap():
    cp = advance(StreamCheckpoint(ARN, ()), listing(("p", None, "1", None)), "t")
    with pytest.raises(StreamGap, match="descends from shard lost"):
        advance(cp, listing(("p", None, "1", None), ("x", "lost", "1", None)), "orders")


def test_a_first_snapshot_skips_closed_shards_and_tags_items_below_every_open_one():
    cp = snapshot_checkpoint(ARN, listing(("p", None, "100", "110"), ("c", "p", "50", None)), None)
    assert [(s.shard_id, s.status) for s in cp.shards] == [("p", FINISHED), ("c", OPEN)]
    assert cp.floor_pos() == record_pos(1, 49)
    assert all(cp.floor_pos() < record_pos(1, seq) for seq in (50, 51, 10**20))


def test_a_resnapshot_keeps_the_running_checkpoint_and_a_new_stream_starts_above_the_old():
    running = advance(StreamCheckpoint(ARN, ()), listing(("p", None, "1", None)), "t")
    running = running.with_shard(ShardCheckpoint("p", None, 0, "77", OPEN, "1"))
    same = snapshot_checkpoint(ARN, listing(("p", None, "1", None)), running)
    assert same.get("p").sequence_number == "77" and same.floor_pos() == record_pos(0, 77)
    other = snapshot_checkpoint("arn:new", listing(("n", None, "1", None)), running)
    assert other.get("n").generation == 1 and other.floor_pos() > record_pos(0, 10**30)


def test_checkpoints_round_trip_through_metadata():
    cp = advance(StreamCheckpoint(ARN, ()), listing(("p", None, "100", "110"), ("c", "p", "50", None)), "t")
    cp = cp.with_shard(ShardCheckpoint("p", None, 0, "105", OPEN, "100"))
    assert StreamCheckpoint.from_metadata(cp.to_metadata()) == cp


def test_batch_keys_and_where_each_batch_starts():
    assert batch_key(1) == "00000001" and batch_ordinal("00000042") == 42
    with pytest.raises(ValueError):
        batch_ordinal("42")
    snap = StreamCheckpoint(ARN, ())
    prev = StreamCheckpoint(ARN, (ShardCheckpoint("p", None, 0, "5", OPEN),))
    assert choose_start("s", "t", "00000001", None, snap) is snap
    assert choose_start("s", "t", "00000002", prev, snap) is prev
    new_stream = StreamCheckpoint("arn:new", ())
    assert choose_start("s", "t", "00000003", prev, new_stream) is new_stream
    with pytest.raises(BatchOrderError, match="batch 00000002 continues batch 00000001"):
        choose_start("s", "t", "00000002", None, snap)
    with pytest.raises(BatchOrderError, match="needs a finished snapshot"):
        choose_start("s", "t", "00000001", None, None)


def test_table_names_become_valid_distinct_asset_key_parts():
    import re

    from ingest.lake.tables import asset_part

    assert asset_part("orders") == "orders"
    parts = {asset_part(t) for t in ("order-lines", "order_lines", "order$lines", "order lines")}
    assert len(parts) == 4 and all(re.fullmatch(r"[A-Za-z0-9_]+", p) for p in parts)
