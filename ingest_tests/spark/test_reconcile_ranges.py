"""Reconciliation's range expression puts every key where the chunk plan's boundaries say, in Spark's order;
its per-range sums are exact."""

import bisect
import random

from ingest.lake.reconcile import range_index, range_sums


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
