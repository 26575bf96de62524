import pytest
from hypothesis import given, strategies as st

from ingest.sources.mysql.positions import (
    MAX_OFFSET, BinlogPosition, decode_pos, encode_pos, split_binlog_file,
)

files = st.integers(min_value=1, max_value=999_999).map(lambda n: f"mysql-bin.{n:06d}")
positions = st.builds(BinlogPosition, file=files, pos=st.integers(min_value=4, max_value=MAX_OFFSET))


def test_orders_by_sequence_number_not_text():
    # As text "mysql-bin.1000000" < "mysql-bin.999999"; as positions it is later.
    assert BinlogPosition("mysql-bin.999999", 9_000) < BinlogPosition("mysql-bin.1000000", 4)
    assert BinlogPosition("mysql-bin.000009", 500) < BinlogPosition("mysql-bin.000010", 4)
    assert BinlogPosition("mysql-bin.000010", 4) < BinlogPosition("mysql-bin.000010", 5)


def test_gtid_does_not_take_part_in_equality_or_order():
    assert BinlogPosition("b.000001", 10, "0-1-5") == BinlogPosition("b.000001", 10, "0-1-9")


@given(positions)
def test_metadata_round_trip(p):
    assert BinlogPosition.from_metadata(p.to_metadata()) == p


@given(positions, positions, st.integers(0, 999_999), st.integers(0, 999_999))
def test_pos_encoding_preserves_order(a, b, ra, rb):
    assert (a.row_pos(ra) < b.row_pos(rb)) == ((a.seq, a.pos, ra) < (b.seq, b.pos, rb))


@given(positions, st.integers(0, 999_999))
def test_pos_round_trip(p, row):
    assert decode_pos(p.row_pos(row)) == (p.seq, p.pos, row)
    assert BinlogPosition.from_pos(p.row_pos(row), p.basename) == p


def test_snapshot_row_is_older_than_any_event_at_its_position():
    snap = BinlogPosition("mysql-bin.000003", 1234)
    assert snap.row_pos() < snap.row_pos(1)  # first row of an event starting there
    assert BinlogPosition("mysql-bin.000003", 1233).row_pos(999_999) < snap.row_pos()


@pytest.mark.parametrize("bad", ["mysql-bin", "mysql-bin.", "", "mysql-bin.00x1"])
def test_bad_file_names_are_refused(bad):
    with pytest.raises(ValueError, match="binlog file name"):
        split_binlog_file(bad)


@pytest.mark.parametrize("args", [(10**6, 0, 0), (0, 10**10, 0), (0, 0, 10**6), (-1, 0, 0)])
def test_encode_refuses_out_of_range(args):
    with pytest.raises(ValueError, match="out of range"):
        encode_pos(*args)


def test_from_metadata_refuses_garbage():
    with pytest.raises(ValueError, match="not a binlog position"):
        BinlogPosition.from_metadata({"pos": 3})


def test_batch_key_round_trip_and_refusals():
    from ingest.sources.mysql.positions import BatchRange

    batch = BatchRange(BinlogPosition("mysql-bin.000003", 1234), BinlogPosition("mysql-bin.000004", 4))
    assert batch.key == "000003.0000001234-000004.0000000004"
    assert BatchRange.from_key(batch.key, "mysql-bin") == batch
    with pytest.raises(ValueError, match="not a change batch key"):
        BatchRange.from_key("3:1234-4:4", "mysql-bin")
    with pytest.raises(ValueError, match="before its start"):
        BatchRange(batch.end, batch.start)


def test_next_batch_plan():
    from ingest.sources.mysql.cdc import plan_next_batch
    from ingest.sources.mysql.errors import BinlogGap

    p = lambda seq, pos: BinlogPosition(f"b.{seq:06d}", pos)  # noqa: E731
    logs = [f"b.{n:06d}" for n in range(1, 6)]
    assert plan_next_batch(None, None, p(1, 9), logs, 1).batch is None  # no snapshot yet
    assert plan_next_batch(None, p(1, 4), p(1, 4), logs, 1).batch.key.endswith("000001.0000000004")  # first, empty
    assert "nothing new" in plan_next_batch(p(1, 9), None, p(1, 9), logs, 1).reason
    assert plan_next_batch(p(1, 9), None, p(1, 50), logs, 1).batch.end == p(1, 50)
    assert plan_next_batch(p(1, 9), None, p(5, 50), logs, 2).batch.end == p(3, 4)  # cut at a file start
    with pytest.raises(BinlogGap, match="RESET MASTER"):
        plan_next_batch(p(3, 9), None, p(1, 50), logs, 1)


def test_server_identity_check():
    from ingest.sources.mysql.cdc import check_server_identity
    from ingest.sources.mysql.errors import BinlogGap

    check_server_identity("s", None, 5)
    check_server_identity("s", 5, 5)
    with pytest.raises(BinlogGap, match="server_id 5 wrote the earlier batches, 6 answers now"):
        check_server_identity("s", 5, 6)
