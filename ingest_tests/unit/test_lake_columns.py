"""Column names and wider types as the lake stores them (lake/columns.py)."""

import pytest

from ingest.lake.columns import TypeChangeError, common_type, is_wider, lake_name, widenings


def test_names_delta_can_hold_are_kept():
    for name in ("id", "Café", "k`ey", "order-line", "x_1"):
        assert lake_name(name) == name


def test_names_delta_cannot_hold_are_normalized_apart_and_idempotently():
    spaced, underscored = lake_name("v al"), lake_name("v_al")
    assert spaced.startswith("v_al_") and len(spaced) == len("v_al_") + 6
    assert underscored == "v_al" and spaced != underscored
    assert lake_name("a b") != lake_name("a,b")  # same cleaned text, different source names
    for name in ("v al", "a.b", "x;y", "f(x)=1", "t\tab", "{k}"):
        normalized = lake_name(name)
        assert not set(normalized) & set(" ,;{}()\n\t=.")
        assert lake_name(normalized) == normalized


@pytest.mark.parametrize("old, new", [
    ("tinyint", "smallint"), ("smallint", "int"), ("int", "bigint"), ("float", "double"), ("int", "double"),
    ("date", "timestamp"), ("decimal(10,2)", "decimal(12,2)"), ("decimal(10,2)", "decimal(11,3)"),
    ("int", "decimal(10,0)"), ("bigint", "decimal(20,0)"),
])
def test_wider_types(old, new):
    assert is_wider(old, new) and not is_wider(new, old)


@pytest.mark.parametrize("old, new", [
    ("bigint", "double"), ("int", "decimal(9,0)"), ("decimal(10,2)", "decimal(10,3)"), ("int", "string"),
    ("double", "float"), ("int", "int"),
])
def test_not_wider(old, new):
    assert not is_wider(old, new)


def test_common_type_of_two_decimals_holds_both():
    assert common_type("decimal(12,2)", "decimal(10,4)") == "decimal(14,4)"
    assert common_type("decimal(38,0)", "decimal(38,10)") is None
    assert common_type("bigint", "int") == "bigint"


def test_widenings_name_the_columns_to_rewrite():
    table = {"id": "int", "A": "int", "b": "string", "n": "bigint"}
    incoming = {"id": "int", "a": "bigint", "b": "string", "n": "int", "new": "string"}
    assert widenings(table, incoming, "lake/t") == {"A": "bigint"}  # case-insensitive, narrower is fine


def test_a_type_change_that_is_not_a_widening_names_the_column_and_the_fix():
    with pytest.raises(TypeChangeError, match=r"lake/t: column 'b' is int in the lake and string .*exclude"):
        widenings({"b": "int"}, {"b": "string"}, "lake/t")
