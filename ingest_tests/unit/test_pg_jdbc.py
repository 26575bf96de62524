"""The PostgreSQL JDBC snapshot reader's SQL (pure): chunk predicates, the reader choice, the session."""

import pytest

from ingest.sources.postgres.jdbc import chunk_predicate, chunk_table, jdbc_columns, session_init
from ingest.sources.postgres.schema import PgColumn, PgType

NUMERIC_12_2 = (12 << 16 | 2) + 4


def columns(*specs):
    """PgColumns and their types from (name, typname, element, typmod)."""
    cols = [PgColumn(name, oid, typmod) for oid, (name, _, _, typmod) in enumerate(specs)]
    return cols, {oid: PgType(typname, element) for oid, (_, typname, element, _) in enumerate(specs)}


def test_chunk_predicate_casts_each_bound_to_its_key_type_and_doubles_quotes():
    sql = chunk_predicate(["integer", "text"], ("10", "a'b"), ("20", "z"))
    assert sql == "(k0, k1) >= ('10'::integer, 'a''b'::text) AND (k0, k1) < ('20'::integer, 'z'::text)"
    assert chunk_predicate(["integer"], None, None) == "TRUE"
    assert chunk_predicate(["timestamp without time zone"], None, ["2024-02-29 00:00:00"]) == \
        "(k0) < ('2024-02-29 00:00:00'::timestamp without time zone)"


def test_a_table_with_a_column_only_the_python_reader_converts_is_not_read_by_jdbc():
    plain, types = columns(("id", "int4", None, -1), ("tags", "_text", "text", -1), ("amount", "numeric", None,
                                                                                     NUMERIC_12_2))
    assert [c.alias for c in jdbc_columns(plain, types, "public.t")] == ["c0", "c1", "c2"]
    for odd in [("boxes", "_box", "box", -1), ("amounts", "_numeric", "numeric", NUMERIC_12_2)]:
        cols, types = columns(("id", "int4", None, -1), odd)
        assert jdbc_columns(cols, types, "public.t") is None, odd


def test_types_the_contract_keeps_as_text_are_read_through_their_output_function():
    cols, types = columns(("c", "bpchar", None, 8), ("addr", "inet", None, -1), ("n", "numeric", None, -1))
    selects = [c.select for c in jdbc_columns(cols, types, "public.t")]
    # a ::text cast would drop char(n)'s padding and add inet's netmask
    assert selects == [f'CASE WHEN _t."{n}" IS NOT NULL THEN concat(_t."{n}") END' for n in ("c", "addr", "n")]


def test_text_is_read_as_its_bytes_and_the_rest_as_the_driver_maps_it():
    from ingest.sources.contract import custom_schema

    cols, types = columns(("id", "int4", None, -1), ("name", "text", None, -1), ("tags", "_text", "text", -1),
                          ("addr", "inet", None, -1))
    read = jdbc_columns(cols, types, "public.t")
    assert [c.jdbc_type for c in read] == [None, "BINARY", None, "BINARY"]  # an array keeps its getter
    assert custom_schema(read) == {"customSchema": "`c1` BINARY, `c3` BINARY"}
    assert custom_schema(read[:1]) == {}


def test_refused_values_are_a_failing_cast_of_a_message_naming_the_column_and_value():
    cols, types = columns(("d", "date", None, -1), ("weird'name", "timestamptz", None, -1))
    date, stamp = jdbc_columns(cols, types, "public.t")
    assert "CAST('column d of public.t: date ' || _t.\"d\"::text || ' is outside what Delta''s date holds" \
           in date.select and date.spark == "date_from_unix_date(c0)"
    assert "'column weird''name of public.t: timestamptz '" in stamp.select and stamp.spark == "timestamp_micros(c1)"


def test_the_chunk_table_selects_converted_columns_and_raw_keys():
    cols, types = columns(("id", "int4", None, -1), ('we"ird', "text", None, -1))
    sql = chunk_table("public.t", jdbc_columns(cols, types, "public.t"), ["id"])
    assert sql == ('(SELECT _t."id"::integer AS c0, _t."we""ird"::text AS c1, _t."id" AS k0 '
                   'FROM "public"."t" AS _t) AS _chunk')


def test_the_session_adopts_the_exported_snapshot_and_refuses_anything_else():
    init = session_init("00000003-0000001B-1")
    assert "SET TRANSACTION SNAPSHOT '00000003-0000001B-1'" in init and "SET TimeZone = 'UTC'" in init
    with pytest.raises(ValueError, match="not an exported snapshot id"):
        session_init("x'; DROP TABLE t; --")


def test_a_waves_contiguous_ranges_join_into_as_many_as_read_at_once():
    from ingest.sources.postgres.snapshot import joined_ranges, key_ranges

    ranges = key_ranges([("10",), ("20",), ("30",), ("40",)], ("5",))  # [5,10) [10,20) [20,30) [30,40) [40,)
    assert joined_ranges(ranges, 2) == [(("5",), ("30",)), (("30",), None)]
    assert joined_ranges(ranges, 4) == [(("5",), ("20",)), *ranges[2:]]
    assert joined_ranges(ranges, 5) == ranges
    assert joined_ranges(ranges, 9) == ranges and joined_ranges(ranges, 0) == [(("5",), None)]
    assert joined_ranges(key_ranges([], None), 2) == [(None, None)]
