import pytest

from ingest.lake.commits import Txn, decode_user_metadata, encode_user_metadata
from ingest.lake.merge import plan_ordered_merge
from ingest.lake.tables import location_for_asset_key, table_location


def test_plan_applies_only_newer_changes_and_keeps_tombstones():
    plan = plan_ordered_merge(["a", "b"], ["a", "b", "v", "_pos", "_deleted"])
    assert plan.on == "t.`a` = s.`a` AND t.`b` = s.`b`"
    assert plan.newer == "s._pos > t._pos"
    assert plan.tombstone_condition is None


def test_merge_sql_updates_newer_rows_inserts_new_keys_and_tombstones_by_source():
    from ingest.lake.merge import merge_sql

    plain = merge_sql("/lake/s/t/silver", "v1", plan_ordered_merge(["id"], ["id", "v", "_pos", "_deleted"]))
    assert plain == ("MERGE INTO delta.`/lake/s/t/silver` AS t USING `v1` AS s ON t.`id` = s.`id` "
                     "WHEN MATCHED AND s._pos > t._pos THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    snap = merge_sql("/p", "v2", plan_ordered_merge(["id"], ["id", "_pos", "_deleted"], tombstone_before=7))
    assert snap.endswith("WHEN NOT MATCHED BY SOURCE AND t._pos < 7 AND NOT t._deleted "
                         "THEN UPDATE SET t._deleted = true, t._pos = CAST(7 AS DECIMAL(38,0))")


def test_plan_with_snapshot_tombstones_only_rows_older_than_the_log_start():
    plan = plan_ordered_merge(["id"], ["id", "_pos", "_deleted"], tombstone_before=10_000_123_000_000)
    assert plan.tombstone_condition == "t._pos < 10000123000000 AND NOT t._deleted"
    assert plan.tombstone_set == {"_deleted": "true", "_pos": "CAST(10000123000000 AS DECIMAL(38,0))"}


def test_plan_refuses_missing_columns_and_no_keys():
    with pytest.raises(ValueError, match="lack"):
        plan_ordered_merge(["id"], ["id", "_pos"])
    with pytest.raises(ValueError, match="at least one key"):
        plan_ordered_merge([], ["id", "_pos", "_deleted"])


def test_user_metadata_round_trip_and_foreign_commits_ignored():
    text = encode_user_metadata({"kind": "snapshot", "wave": 2}, Txn("app", 2))
    assert decode_user_metadata(text) == {"ingest": 1, "kind": "snapshot", "txn": ["app", 2], "wave": 2}
    assert decode_user_metadata('{"someone": "else"}') is None
    assert decode_user_metadata("not json") is None and decode_user_metadata(None) is None


def test_table_locations_never_nest():
    assert location_for_asset_key("/lake/", ["shop", "orders"]) == "/lake/shop/orders/silver"
    assert location_for_asset_key("/lake", ["shop", "orders", "snapshot"]) == "/lake/shop/orders/snapshot"
    assert location_for_asset_key("/lake", ["shop", "orders", "changes"]) == "/lake/shop/orders/bronze"
    with pytest.raises(ValueError):
        table_location("/lake", "shop", "orders", "gold")
    with pytest.raises(ValueError):
        location_for_asset_key("/lake", ["x"])


def test_narrowing_names_each_key_column_whose_values_all_have_a_literal():
    from decimal import Decimal

    from ingest.lake.merge import narrowing

    assert narrowing(["id"], [(3,), (1,), (2,)]) == "t.`id` IN (1, 2, 3)"
    assert narrowing(["a", "b"], [(1, "x"), (2, "y z")]) == "t.`a` IN (1, 2) AND t.`b` IN ('x', 'y z')"
    assert narrowing(["d"], [(Decimal("12.50"),), (Decimal("-1E+2"),)]) == "t.`d` IN (-100, 12.50)"
    # IN cannot name a NULL key (the merge then fails on it): that column goes
    assert narrowing(["a", "b"], [(1, None), (2, "y")]) == "t.`a` IN (1, 2)"
    # strings a parser setting reads differently, and types without a trusted literal: no condition
    assert narrowing(["s"], [("it's",)]) is None and narrowing(["s"], [("a\\b",)]) is None
    assert narrowing(["s"], [("tab\there",)]) is None and narrowing(["s"], [("${spark.app.name}",)]) is None
    assert narrowing(["s"], [("$5 {x}",)]) == "t.`s` IN ('$5 {x}')"
    assert narrowing(["f"], [(1.5,)]) is None and narrowing(["b"], [(b"\x00",)]) is None
    assert narrowing(["flag"], [(True,)]) is None and narrowing(["id"], []) is None


def test_narrowing_joins_the_key_match_and_refuses_a_snapshot_merge():
    plan = plan_ordered_merge(["id"], ["id", "_pos", "_deleted"], narrow="t.`id` IN (1, 2)")
    assert plan.on == "t.`id` = s.`id` AND t.`id` IN (1, 2)"
    with pytest.raises(ValueError, match="cannot be narrowed"):
        plan_ordered_merge(["id"], ["id", "_pos", "_deleted"], tombstone_before=7, narrow="t.`id` IN (1)")


def test_key_pushdown_only_for_few_keys_a_file_and_never_past_its_bound():
    from ingest.lake.merge import (IN_FILTER_THRESHOLD, PUSH_KEYS_PER_FILE, PUSH_MAX_KEYS,
                                   PUSH_STACK_BYTES, key_pushdown)

    big = PUSH_STACK_BYTES
    assert key_pushdown(1_000, 108, big) == {IN_FILTER_THRESHOLD: str(PUSH_MAX_KEYS)}  # 100M rows: 9 keys a file
    assert key_pushdown(PUSH_KEYS_PER_FILE * 11, 11, big) == {IN_FILTER_THRESHOLD: str(PUSH_MAX_KEYS)}
    assert key_pushdown(PUSH_KEYS_PER_FILE * 11 + 1, 11, big) == {}  # more keys a file: every page tested against them all
    assert key_pushdown(PUSH_MAX_KEYS + 1, 10_000, big) == {}  # a deeper OR than ever ran: 2,000 overflowed 1 MiB
    assert key_pushdown(5, 0, big) == {} and key_pushdown(5, None, big) == {}  # no checksum to count the files by
    assert key_pushdown(100, 10.5, big) != {} and key_pushdown(106, 10.5, big) == {}  # files counted by their bytes


def test_key_pushdown_keeps_to_a_shallow_predicate_where_the_servers_threads_have_a_small_stack():
    from ingest.lake.merge import IN_FILTER_THRESHOLD, PUSH_MAX_KEYS_SMALL_STACK, PUSH_STACK_BYTES, key_pushdown

    small = {IN_FILTER_THRESHOLD: str(PUSH_MAX_KEYS_SMALL_STACK)}
    for stack in (2**20, PUSH_STACK_BYTES - 1, None):  # the JVM's default, just short, not asked
        assert key_pushdown(PUSH_MAX_KEYS_SMALL_STACK, 10_000, stack) == small
        assert key_pushdown(PUSH_MAX_KEYS_SMALL_STACK + 1, 10_000, stack) == {}
    assert key_pushdown(PUSH_MAX_KEYS_SMALL_STACK + 1, 10_000, PUSH_STACK_BYTES) != {}
