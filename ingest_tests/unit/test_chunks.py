import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from ingest.sources.mysql.chunks import (
    Chunk, chunk_query, even_boundaries, key_from_json, key_to_json, next_boundary_query, plan_chunks, quote_ident,
    range_predicate,
)


def test_plan_covers_everything_with_open_ends():
    chunks = plan_chunks([(10,), (20,)])
    assert chunks == [Chunk(0, None, (10,)), Chunk(1, (10,), (20,)), Chunk(2, (20,), None)]


def test_plan_without_boundaries_is_one_chunk_and_resume_starts_at_key():
    assert plan_chunks([]) == [Chunk(0, None, None)]
    assert plan_chunks([(30,)], start=(20,), first_index=5) == [Chunk(5, (20,), (30,)), Chunk(6, (30,), None)]


def test_plan_refuses_unsorted_boundaries():
    with pytest.raises(ValueError, match="strictly increasing"):
        plan_chunks([(2,), (1,)])


def test_chunks_group_into_waves_in_order():
    from ingest.lake.commits import waves

    chunks = plan_chunks([(i,) for i in range(1, 5)])
    assert [[c.index for c in g] for g in waves(chunks, 2)] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError):
        waves(chunks, 0)


def _eval(columns, sql_params, row):
    """Evaluate a generated predicate in Python against a row dict (the SQL is simple enough)."""
    sql, params = sql_params
    expr = sql
    for c in columns:
        expr = expr.replace(quote_ident(c), f"row[{c!r}]")
    expr = expr.replace(" = ", " == ").replace(" AND ", " and ").replace(" OR ", " or ").replace("TRUE", "True")
    parts = expr.split("%s")
    out = parts[0]
    for p, rest in zip(params, parts[1:]):
        out += repr(p) + rest
    return eval(out, {"row": row})


keys3 = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3))


@given(st.lists(keys3, min_size=0, max_size=6, unique=True), st.lists(keys3, min_size=1, max_size=30))
def test_composite_chunks_partition_the_key_space(boundaries, rows):
    """Every key falls in exactly one chunk: nothing lost, nothing read twice."""
    columns = ["a", "b", "c"]
    chunks = plan_chunks(sorted(boundaries))
    for key in rows:
        row = dict(zip(columns, key))
        hits = [ch for ch in chunks if _eval(columns, range_predicate(columns, ch.lo, ch.hi), row)]
        assert len(hits) == 1
        ch = hits[0]
        assert (ch.lo is None or ch.lo <= key) and (ch.hi is None or key < ch.hi)


def test_identifiers_are_quoted_against_injection():
    assert quote_ident("a`b") == "`a``b`"
    sql, _ = chunk_query("db", "t`; DROP TABLE x; --", ["id"], ["id"], Chunk(0, None, None))
    assert sql == "SELECT `id` FROM `db`.`t``; DROP TABLE x; --` WHERE TRUE"
    with pytest.raises(ValueError):
        quote_ident("")


def test_next_boundary_query_seeks_chunk_size_keys_on_from_the_start():
    sql, params = next_boundary_query("db", "t", ["a", "b"], 100, start=(1, 2))
    assert sql.endswith("ORDER BY `a`, `b` LIMIT 1 OFFSET %s") and params == [1, 1, 2, 100]
    assert "`a` = %s AND `b` >= %s" in sql


def test_keys_survive_json_metadata():
    key = (1, "x", Decimal("1.50"), b"\x00\xff", dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, 6), 2.5)
    assert key_from_json(key_to_json(key)) == key
    assert key_to_json(None) is None and key_from_json(None) is None


def test_even_boundaries_cut_a_dense_integer_key_into_chunk_size_ranges():
    assert even_boundaries(1, 1000, 1000, 250) == [251, 501, 751]
    # a resumed snapshot starts at its next key; keys with gaps (span up to twice the rows) still count
    assert even_boundaries(1, 2000, 1000, 250, start=1200) == [1700]
    assert even_boundaries(5, 5, 1, 100) == []
    # an estimate a little over the real count (InnoDB's) adds no chunk of a few rows at the end
    assert even_boundaries(1, 5000, 5013, 1000) == [1001, 2001, 3001, 4001]
    assert even_boundaries(1, 5000, 4990, 1000) == [1001, 2001, 3001, 4001]


def test_even_boundaries_leave_sparse_keys_and_unknown_sizes_to_the_seeks():
    assert even_boundaries(1, 10**12, 10_000, 100) is None
    assert even_boundaries(1, 1000, 0, 100) is None
