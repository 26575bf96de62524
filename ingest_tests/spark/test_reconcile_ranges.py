"""Reconciliation's range expression puts every key where the chunk plan's boundaries say, in Spark's order."""

import bisect
import random

from ingest.lake.reconcile import range_index


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
