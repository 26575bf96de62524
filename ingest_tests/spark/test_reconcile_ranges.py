"""Reconciliation's range expression puts every key where the chunk plan's boundaries say, in Spark's order;
its per-range sums are exact."""

import bisect
import random

from ingest.lake.reconcile import Reconciliation, compare, range_index, range_sums, sampled_boundaries


def test_composite_keys_fall_in_the_range_a_binary_search_of_the_boundaries_gives(spark):
    rng = random.Random(7)
    letters = ["a", "B", "b", "A", "é", "z", ""]  # binary order, not a case-insensitive collation's
    keys = sorted({(rng.randint(-5, 5), rng.choice(letters) + rng.choice(letters)) for _ in range(300)})
    for n in (0, 1, 2, 7, 40):
        boundaries = sorted(rng.sample(keys, n))
        df = spark.createDataFrame(keys, "a int, s string")
        got = {(r["a"], r["s"]): r["_range"]
               for r in df.select("a", "s", range_index(["a", "s"], ["int", "string"], boundaries).alias("_range"))
               .collect()}
        assert got == {k: bisect.bisect_right(boundaries, k) for k in keys}, n


def test_range_sums_count_rows_and_add_their_hashes_mod_2_64_exactly_at_the_extremes_of_a_long(spark):
    rng = random.Random(11)
    edges = [-2 ** 63, 2 ** 63 - 1, -1, 0, 1, 2 ** 32 - 1, 2 ** 32, -2 ** 32]
    rows = [(rng.randrange(3), h) for h in edges * 50 + [rng.randrange(-2 ** 63, 2 ** 63) for _ in range(2000)]]
    sides = [spark.createDataFrame(rows, "_range int, _h long"), spark.createDataFrame(rows[:7], "_range int, _h long")]
    for got, side in zip(range_sums(*sides), (rows, rows[:7])):
        want = {}
        for r, h in side:
            n, total = want.get(r, (0, 0))
            want[r] = (n + 1, (total + h) % 2 ** 64)
        assert got == want


def test_ranges_sampled_from_silver_are_about_equal_and_name_the_key_that_differs(spark):
    """A source without a chunk plan (DynamoDB): the ranges come from a sample of silver's keys, here
    composite with a binary part, and a row that differs is named with its key as the change log gives it."""
    rows = [(f"k{i % 97:02d}", bytes([i % 251, i // 251]), i) for i in range(20_000)]
    silver = spark.createDataFrame(rows, "pk string, sk binary, v long")
    boundaries = sampled_boundaries(silver, ["pk", "sk"], rows_per_range=1_000)
    assert 15 <= len(boundaries) <= 19 and boundaries == sorted(boundaries)
    assert all(isinstance(b[1], bytes) for b in boundaries)
    keys = sorted((pk, sk) for pk, sk, _ in rows)
    sizes = [b - a for a, b in zip([0, *(bisect.bisect_left(keys, k) for k in boundaries)],
                                   [*(bisect.bisect_left(keys, k) for k in boundaries), len(keys)])]
    assert max(sizes) < 3 * 1_000, sizes  # about 20,000 / 20 rows each
    assert sampled_boundaries(silver, ["pk", "sk"], rows_per_range=20_000) == []  # one range: no boundaries

    edited = [(pk, sk, -1 if (pk, sk) in ((rows[5][0], rows[5][1]), (rows[9][0], rows[9][1])) else v)
              for pk, sk, v in rows]
    source = spark.createDataFrame(edited, "pk string, sk binary, v long")
    changed = {(rows[9][0], rows[9][1])}  # the change log's bytes
    result = compare(source, silver, ["pk", "sk", "v"], ["pk", "sk"], boundaries, lambda: changed,
                     Reconciliation("t"))
    assert result.recently_changed == 1
    (diff,) = result.ranges
    assert (diff.different, diff.keys) == (1, ((rows[5][0], rows[5][1]),))
