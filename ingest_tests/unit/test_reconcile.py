"""Reconciliation's pure parts: how far silver is complete, and differences grouped by key range."""

from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest.sources.mysql.reconcile import group_by_range, merged_through


def pos(n: int) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", n)


def test_silver_is_complete_up_to_the_first_gap_in_its_merged_batches():
    start = pos(100)
    assert merged_through(start, []) == start
    batches = [BatchRange(pos(500), pos(900)), BatchRange(pos(50), pos(300)), BatchRange(pos(300), pos(500))]
    assert merged_through(start, batches) == pos(900)  # any merge order; one batch began before the log start
    assert merged_through(start, [BatchRange(pos(100), pos(300)), BatchRange(pos(400), pos(900))]) == pos(300)


def test_differences_are_grouped_by_the_chunk_ranges_they_fall_in():
    boundaries = [(1000,), (2000,), (3000,)]
    diffs = [((2500,), "missing"), ((5,), "different"), ((2000,), "extra"), ((2999,), "missing"), ((9999,), "extra")]
    ranges = group_by_range(diffs, boundaries)
    assert [(r.lo, r.hi, r.missing, r.extra, r.different) for r in ranges] == [
        (None, (1000,), 0, 0, 1), ((2000,), (3000,), 2, 1, 0), ((3000,), None, 0, 1, 0)]
    assert ranges[1].keys == ((2000,), (2500,), (2999,))
    assert ranges[0].describe() == "keys [start, (1000,)): 0 missing, 0 extra, 1 different (e.g. (5,))"
    assert group_by_range([], boundaries) == []
