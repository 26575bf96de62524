"""Row filters' pure part: which changes land, and as what (ingest/filters.py), and the filter in the
snapshot's SQL and the sources file."""

import pytest

from ingest.changes import ChangeOp, ChangeRecord
from ingest.config import ConfigError, load_config
from ingest.filters import filter_changes, predicate

INSIDE = "EU"


def rec(op, pos, row, before=None):
    return ChangeRecord("t", op, pos, row, before)


def by_region(images):
    """The filter `region = 'EU'`, judged on each image; None where the image has no region (key only)."""
    return [None if "region" not in i else i["region"] == INSIDE for i in images]


def landed(records):
    return [(r.op, r.row, r.before) for r in filter_changes(records, by_region, ["id"])]


def test_inserts_and_deletes_land_only_inside():
    assert landed([rec(ChangeOp.INSERT, 1, {"id": 1, "region": "EU"}),
                   rec(ChangeOp.INSERT, 2, {"id": 2, "region": "US"}),
                   rec(ChangeOp.DELETE, 3, {"id": 3, "region": "US"}),
                   rec(ChangeOp.DELETE, 4, {"id": 4, "region": "EU"})]) == [
        (ChangeOp.INSERT, {"id": 1, "region": "EU"}, None), (ChangeOp.DELETE, {"id": 4, "region": "EU"}, None)]


def test_an_update_that_moves_out_is_a_delete_of_the_row_as_it_was_and_one_that_moves_in_an_insert():
    out_ = rec(ChangeOp.UPDATE, 1, {"id": 1, "region": "US"}, {"id": 1, "region": "EU"})
    in_ = rec(ChangeOp.UPDATE, 2, {"id": 2, "region": "EU"}, {"id": 2, "region": "US"})
    stays_in = rec(ChangeOp.UPDATE, 3, {"id": 3, "region": "EU", "n": 2}, {"id": 3, "region": "EU", "n": 1})
    stays_out = rec(ChangeOp.UPDATE, 4, {"id": 4, "region": "US", "n": 2}, {"id": 4, "region": "US", "n": 1})
    assert landed([out_, in_, stays_in, stays_out]) == [
        (ChangeOp.DELETE, {"id": 1, "region": "EU"}, None),
        (ChangeOp.INSERT, {"id": 2, "region": "EU"}, None),
        (ChangeOp.UPDATE, {"id": 3, "region": "EU", "n": 2}, {"id": 3, "region": "EU", "n": 1})]


def test_an_image_the_source_did_not_log_whole_lands_as_if_inside():
    """PostgreSQL without REPLICA IDENTITY FULL: no before image of an update, a key-only delete."""
    assert landed([rec(ChangeOp.UPDATE, 1, {"id": 1, "region": "US", "n": 5}),
                   rec(ChangeOp.UPDATE, 2, {"id": 2, "region": "EU"}),
                   rec(ChangeOp.DELETE, 3, {"id": 3})]) == [
        (ChangeOp.DELETE, {"id": 1}, None),  # its key alone: nothing of a row that may never have been inside
        (ChangeOp.UPDATE, {"id": 2, "region": "EU"}, None),
        (ChangeOp.DELETE, {"id": 3}, None)]


def test_truncates_land_and_positions_are_kept():
    records = [rec(ChangeOp.TRUNCATE, 7, {}), rec(ChangeOp.UPDATE, 8, {"id": 1, "region": "US"}, {"id": 1, "region": "EU"})]
    assert [(r.op, r.pos) for r in filter_changes(records, by_region, ["id"])] == [
        (ChangeOp.TRUNCATE, 7), (ChangeOp.DELETE, 8)]


def test_the_source_is_asked_once_per_batch():
    asked = []

    def inside(images):
        asked.append(len(images))
        return by_region(images)

    filter_changes([rec(ChangeOp.INSERT, i, {"id": i, "region": "EU"}) for i in range(5)], inside, ["id"])
    assert asked == [5]


def test_a_predicate_sits_on_lines_of_its_own_so_a_comment_ends_there():
    from ingest.sources.mysql.chunks import Chunk, chunk_query

    sql, params = chunk_query("d", "t", ["id", "n"], ["id"], Chunk(0, (1,), (9,)), "n > 1 -- only big\nOR n LIKE '5%'")
    assert sql == ("SELECT `id`, `n` FROM `d`.`t` WHERE ((`id` >= %s)) AND ((`id` < %s)) AND (\nn > 1 -- only big\n"
                   "OR n LIKE '5%%'\n)")
    assert params == [1, 9]
    assert predicate("a OR b") == "(\na OR b\n)"


def sources(tmp_path, kind_extra: dict, tables_extra: dict):
    import yaml

    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump({"sources": {"s": {
        "host": "h", "user": "u", "password_env": "P", "database": "d",
        "tables": {"include": ["t"], **tables_extra}, **kind_extra}}}))
    return path


def test_config_reads_a_filter_and_refuses_an_empty_one_or_two_statements(tmp_path):
    config = load_config(sources(tmp_path, {}, {"where": {"t": "  n > 1 "}}))
    assert config.sources["s"].tables.row_filter("t").where == "n > 1"
    assert config.sources["s"].tables.row_filter("u") is None
    with pytest.raises(ConfigError, match=r"t: the filter is empty"):
        load_config(sources(tmp_path, {}, {"where": {"t": " "}}))
    with pytest.raises(ConfigError, match=r"without ';'"):
        load_config(sources(tmp_path, {}, {"where": {"t": "n > 1; DROP TABLE t"}}))


def test_postgres_images_go_back_as_text_forms_and_an_update_is_judged_whole():
    import datetime as dt
    from decimal import Decimal

    from ingest.changes import UNCHANGED
    from ingest.sources.postgres.filters import complete, json_value

    assert [json_value(v) for v in (None, True, 5, Decimal("1.50"), 0.1, float("nan"), float("-inf"), b"\x00\xff",
                                    dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, 6, dt.timezone.utc),
                                    ["a", None], "PT1H")] == [
        None, True, "5", "1.50", "0.1", "NaN", "-Infinity", "\\x00ff", "2024-01-02",
        "2024-01-02T03:04:05.000006+00:00", ["a", None], "PT1H"]
    assert complete({"id": 1, "doc": UNCHANGED, "n": 2}, {"id": 1, "doc": "long", "n": 1}) == {
        "id": 1, "doc": "long", "n": 2}
