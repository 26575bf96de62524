"""Reconciliation's pure parts: how far silver is complete, and differences grouped by key range."""

import bisect

from ingest.lake.reconcile import (
    MAX_REPORTED_KEYS, estimated_count, evenly_spaced, group_by_range, hashable, ranges_that_differ, thin_boundaries,
)
from ingest.batches import merged_through
from ingest.sources.mysql.positions import BatchRange, BinlogPosition


def pos(n: int) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", n)


def test_silver_is_complete_up_to_the_first_gap_in_its_merged_batches():
    start = pos(100)
    assert merged_through(start, []) == start
    batches = [BatchRange(pos(500), pos(900)), BatchRange(pos(50), pos(300)), BatchRange(pos(300), pos(500))]
    assert merged_through(start, batches) == pos(900)  # any merge order; one batch began before the log start
    assert merged_through(start, [BatchRange(pos(100), pos(300)), BatchRange(pos(400), pos(900))]) == pos(300)


def test_differences_are_counted_per_range_with_the_smallest_keys_as_examples():
    boundaries = [(1000,), (2000,), (3000,)]
    diffs = [((2500,), "missing"), ((5,), "different"), ((2000,), "extra"), ((2999,), "missing"), ((9999,), "extra")]
    ranges = group_by_range([(bisect.bisect_right(boundaries, k), k, kind) for k, kind in diffs], boundaries)
    assert [(r.lo, r.hi, r.missing, r.extra, r.different) for r in ranges] == [
        (None, (1000,), 0, 0, 1), ((2000,), (3000,), 2, 1, 0), ((3000,), None, 0, 1, 0)]
    assert ranges[1].keys == ((2000,), (2500,), (2999,))
    assert ranges[0].describe() == "keys [start, (1000,)): 0 missing, 0 extra, 1 different (e.g. (5,))"
    assert group_by_range([], boundaries) == []

    many = [(0, (k,), "missing") for k in (9, 3, 7, 1, 8, 2, 6, 4, 5, 0)]
    (only,) = group_by_range(many, boundaries)
    assert only.missing == 10 and only.keys == tuple((k,) for k in range(MAX_REPORTED_KEYS))


def test_only_ranges_whose_rows_or_checksums_differ_are_compared_row_by_row():
    source = {0: (10, 111), 1: (10, 222), 2: (5, 333), 4: (1, 9)}
    silver = {0: (10, 111), 1: (10, 223), 2: (4, 333), 3: (1, 7)}
    assert ranges_that_differ(source, silver) == [1, 2, 3, 4]
    assert ranges_that_differ(source, dict(source)) == []


def test_a_long_chunk_plan_is_thinned_to_at_most_the_range_cap():
    plan = [(k,) for k in range(1, 5000)]
    thinned = thin_boundaries(plan, 1024)
    assert len(thinned) + 1 <= 1024 and thinned == sorted(thinned) and set(thinned) <= set(plan)
    assert thin_boundaries(plan[:100], 1024) == plan[:100]
    assert thin_boundaries([], 1024) == []


def test_sampled_keys_give_evenly_spaced_boundaries_without_repeats():
    ordered = [(k,) for k in range(100)]
    assert evenly_spaced(ordered, 4) == [(25,), (50,), (75,)]
    assert evenly_spaced(ordered, 1) == []
    assert evenly_spaced([(1,), (1,), (1,), (2,)], 4) == [(1,), (2,)]


def test_binary_key_values_from_spark_become_hashable_and_equal_to_the_change_logs_bytes():
    key = hashable([bytearray(b"\x00k"), "s", 3])
    assert key == (b"\x00k", "s", 3) and key in {(b"\x00k", "s", 3)}


def test_the_kth_smallest_of_uniform_64_bit_hashes_estimates_how_many_there_are():
    import random

    rng = random.Random(3)
    for n in (20_000, 200_000):
        hashes = sorted(rng.randrange(-2 ** 63, 2 ** 63) for _ in range(n))
        assert abs(estimated_count(4096, hashes[4095]) - n) < 0.05 * n
    assert estimated_count(10, 2 ** 63 - 1) == 9  # every hash taken: k - 1 at least
