"""SCD2 history (`tables.history`) of a MariaDB table, through the sensor's batches: every version of a
row, with its interval, converges however its batches are run again or in what order it is rebuilt."""

import random
import shutil

import pytest
from dagster import AssetKey, instance_for_test

from ingest.config import ConfigError, load_config
from ingest.defs.sources import build_source_defs
from ingest.lake.tables import table_location
from ingest_tests.integration.cdc_harness import CdcHarness, write_sources

HISTORY = AssetKey(["src", "acct", "history"])


def history_rows(h):
    df = h.spark.read.format("delta").load(table_location(str(h.lake), "src", "acct", "history"))
    return sorted((r.id, int(r._valid_from), r.v, None if r._valid_to is None else int(r._valid_to),
                   r._valid_from_ts, r._valid_to_ts, r._current, r._deleted) for r in df.collect())


def test_history_keeps_every_version_and_converges_when_rebuilt_in_any_order(spark, mariadb, database, root,
                                                                             tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE acct (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO acct VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    sources = write_sources(tmp_path, mariadb.port, database, ["acct"], history=["acct"])
    # what each key went through, oldest first: (value, deleted)
    want = {1: [("a", False)], 2: [("b", False)], 3: [("c", False)]}
    steps = [
        ["UPDATE acct SET v = 'a1' WHERE id = 1", "INSERT INTO acct VALUES (4, 'd')"],
        ["UPDATE acct SET v = 'a2' WHERE id = 1", "DELETE FROM acct WHERE id = 2"],
        ["INSERT INTO acct VALUES (2, 'b again')", "UPDATE acct SET v = 'd1' WHERE id = 4"],
        ["TRUNCATE TABLE acct", "INSERT INTO acct VALUES (5, 'e')"],
    ]
    effects = [{1: [("a1", False)], 4: [("d", False)]}, {1: [("a2", False)], 2: [("b", True)]},
               {2: [("b again", False)], 4: [("d1", False)]}, {5: [("e", False)]}]
    with instance_for_test() as instance:
        h = CdcHarness(spark, sources, tmp_path / "lake", instance)
        h.snapshot()
        for statements, effect in zip(steps, effects):
            with root.cursor() as cur:
                for s in statements:
                    cur.execute(s)
            assert h.sync() is not None  # the sensor's run: bronze, silver, history, batch log
            for key, versions in effect.items():
                want.setdefault(key, []).extend(versions)
        built = history_rows(h)

        by_key = {}
        for row in built:
            by_key.setdefault(row[0], []).append(row)
        assert {k: [(r[2], r[7]) for r in rows] for k, rows in by_key.items()} == want
        bronze = h.spark.read.format("delta").load(table_location(str(h.lake), "src", "acct", "bronze"))
        (truncate, truncate_ts), = [(int(r._pos), r._ts) for r in bronze.where("_op = 'truncate'").collect()]
        for key, rows in by_key.items():
            for n, (_, start, _, end, start_ts, end_ts, current, deleted) in enumerate(rows):
                # the first versions of 1, 2 and 3 come from the snapshot, which gives no commit time
                assert (start_ts is None) == (n == 0 and key <= 3)
                if deleted:  # a delete's own interval is empty; it ends the version before it
                    assert (end, end_ts, current) == (start, start_ts, False)
                    continue
                ends = [(rows[n + 1][1], rows[n + 1][4])] if n + 1 < len(rows) else []
                ends += [(truncate, truncate_ts)] if start < truncate else []
                want_end = min(ends, key=lambda e: e[0]) if ends else (None, None)
                assert (end, end_ts, current) == (*want_end, not ends), (key, n)
        assert [(r[0], r[2]) for r in built if r[6]] == [(5, "e")]  # current: what the source holds now

        # batches run again, in any order: nothing changes
        for key in random.sample(h.batches, len(h.batches)):
            h.run([HISTORY], key)
        assert history_rows(h) == built

        # rebuilt from the lake alone (snapshot and bronze), batches in a shuffled order with repeats
        shutil.rmtree(table_location(str(h.lake), "src", "acct", "history"))
        order = random.sample(h.batches, len(h.batches)) + random.choices(h.batches, k=2)
        for key in order:
            h.run([HISTORY], key)
        assert history_rows(h) == built, order


def test_history_on_a_table_without_a_primary_key_is_refused_when_definitions_load(mariadb, database, root,
                                                                                   tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE log_lines (line TEXT)")
        cur.execute("CREATE TABLE keyed (id INT PRIMARY KEY)")
    def defs_with_history(*tables):
        sources = write_sources(tmp_path, mariadb.port, database, ["log_lines", "keyed"], history=list(tables))
        return build_source_defs(load_config(sources), str(tmp_path / "lake"))

    with pytest.raises(ConfigError, match=r"tables.history names `\w+.log_lines`, which has no primary key.*Fix"):
        defs_with_history("log_lines")
    with pytest.raises(ConfigError, match=r"\['nosuch'\] match no table"):
        defs_with_history("nosuch")
    (defs,) = defs_with_history("keyed")
    assert AssetKey(["src", "keyed", "history"]) in {k for a in defs.assets for k in a.keys}
