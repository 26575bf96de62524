"""Slices of a change batch: cut at transaction starts, contiguous, never splitting a transaction."""

import pytest

from ingest.sources.mysql.cdc import range_bytes
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest.sources.mysql.slices import Transaction, cut_slices


def p(seq: int, pos: int) -> BinlogPosition:
    return BinlogPosition(f"mysql-bin.{seq:06d}", pos)


def test_slices_are_cut_at_transaction_starts_once_the_target_is_held():
    txns = [Transaction(p(1, 100), 50), Transaction(p(1, 150), 60), Transaction(p(1, 210), 10),
            Transaction(p(2, 300), 500), Transaction(p(2, 800), 20)]
    got = cut_slices(p(1, 100), p(2, 820), txns, target_bytes=100)
    # 50+60 reach 100 before the third; the third alone (10) does not, so it takes the rotated file's first
    assert got == [BatchRange(p(1, 100), p(1, 210)), BatchRange(p(1, 210), p(2, 800)),
                   BatchRange(p(2, 800), p(2, 820))]


def test_slices_cover_the_batch_without_gaps_and_one_large_transaction_stays_whole():
    txns = [Transaction(p(3, 4 + 1000 * i), 1000) for i in range(10)] + [Transaction(p(3, 10_004), 5_000_000)]
    got = cut_slices(p(3, 4), p(3, 5_010_004), txns, target_bytes=2500)
    assert got[0].start == p(3, 4) and got[-1].end == p(3, 5_010_004)
    assert all(a.end == b.start for a, b in zip(got, got[1:]))
    starts = {t.start for t in txns}
    assert all(s.start in starts for s in got[1:])
    # the 5 MB transaction is in one slice, whole, with the small one before it
    assert got[-1] == BatchRange(p(3, 9004), p(3, 5_010_004)) and len(got) == 4


def test_a_batch_under_the_target_is_one_slice_and_an_empty_one_too():
    assert cut_slices(p(1, 4), p(1, 900), [Transaction(p(1, 4), 10)], 1000) == [BatchRange(p(1, 4), p(1, 900))]
    assert cut_slices(p(1, 4), p(1, 4), [], 1000) == [BatchRange(p(1, 4), p(1, 4))]


def test_a_transaction_outside_the_batch_is_refused():
    with pytest.raises(ValueError, match="outside the batch"):
        cut_slices(p(1, 4), p(1, 100), [Transaction(p(1, 100), 10)], 10)


def test_range_bytes_adds_up_the_files_between():
    logs = [("mysql-bin.000001", 1000), ("mysql-bin.000002", 5000), ("mysql-bin.000003", 700)]
    assert range_bytes(BatchRange(p(1, 400), p(1, 900)), logs) == 500
    assert range_bytes(BatchRange(p(1, 400), p(3, 300)), logs) == 600 + 5000 + 300
