"""DynamoDB's wire format and the type contract of DynamoDB tables."""

import base64
import json
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from ingest.images import item_json
from ingest.sources.dynamodb.deserialize import AttributeValueError, from_attribute_value, from_item
from ingest.sources.dynamodb.types import ITEM_COLUMN, TableTypes, ValueTypeError, parse_type

KEYS = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
DEFS = [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"}]

EVERY_TYPE = {
    "pk": {"S": "p1"}, "sk": {"N": "12345678901234567890.123456789"},
    "s": {"S": "héllo"}, "n": {"N": "-0.000000001"}, "b": {"B": base64.b64encode(b"\x00\xff").decode()},
    "t": {"BOOL": True}, "z": {"NULL": True}, "ss": {"SS": ["b", "a"]}, "ns": {"NS": ["10", "2.5"]},
    "bs": {"BS": [base64.b64encode(b"y").decode(), base64.b64encode(b"x").decode()]},
    "m": {"M": {"city": {"S": "Oslo"}, "zip": {"N": "150"}}}, "l": {"L": [{"S": "x"}, {"N": "1"}, {"NULL": True}]},
}
DECLARED = {"s": "string", "n": "decimal(20,9)", "b": "binary", "t": "boolean", "z": "string",
            "ss": "array<string>", "ns": "array<decimal(10,1)>", "bs": "array<binary>",
            "m": "struct<city:string,zip:bigint>", "l": "json"}


def test_every_attribute_type_becomes_its_declared_column():
    types = TableTypes.build("t", KEYS, DEFS, DECLARED)
    row = types.row(from_item(EVERY_TYPE))
    assert row["pk"] == "p1" and row["sk"] == Decimal("12345678901234567890.123456789")
    assert row["s"] == "héllo" and row["n"] == Decimal("-0.000000001") and row["b"] == b"\x00\xff"
    assert row["t"] is True and row["z"] is None
    assert row["ss"] == ["a", "b"] and row["ns"] == [Decimal("2.5"), Decimal("10.0")] and row["bs"] == [b"x", b"y"]
    assert row["m"] == {"city": "Oslo", "zip": 150}
    assert json.loads(row["l"]) == ["x", 1, None]
    whole = json.loads(row[ITEM_COLUMN])
    assert whole["ss"] == ["a", "b"] and whole["b"] == base64.b64encode(b"\x00\xff").decode()
    assert [n for n, _ in types.spark_columns()][:2] == ["pk", "sk"] and types.key_columns == ("pk", "sk")


def test_undeclared_attributes_stay_readable_in_the_item_column_with_exact_numbers():
    types = TableTypes.build("t", KEYS, DEFS, {})
    row = types.row(from_item({"pk": {"S": "p"}, "sk": {"N": "1"}, "big": {"N": "12345678901234567890123456789012345678"},
                               "tiny": {"N": "1E-130"}}))
    assert set(row) == {"pk", "sk", ITEM_COLUMN}
    assert '"big":12345678901234567890123456789012345678' in row[ITEM_COLUMN]
    assert json.loads(row[ITEM_COLUMN], parse_float=Decimal)["tiny"] == Decimal("1E-130")


@pytest.mark.parametrize("declared, value, says", [
    ({"n": "bigint"}, {"N": "1.5"}, "is not a bigint"),
    ({"n": "decimal(5,2)"}, {"N": "1.234"}, "more than 2 decimal places"),
    ({"n": "decimal(5,2)"}, {"N": "1234"}, "more than 3 integer digits"),
    ({"n": "string"}, {"N": "1"}, "a N value does not fit"),
    ({"n": "struct<a:string>"}, {"M": {"a": {"S": "x"}, "b": {"S": "y"}}}, "field(s) ['b'] are not in"),
])
def test_a_value_that_does_not_fit_names_the_item_key_and_the_attribute(declared, value, says):
    types = TableTypes.build("orders", KEYS, DEFS, declared)
    with pytest.raises(ValueTypeError) as exc:
        types.row(from_item({"pk": {"S": "p9"}, "sk": {"N": "3"}, "n": value}))
    assert "table orders" in str(exc.value) and "pk='p9'" in str(exc.value) and "attribute 'n'" in str(exc.value)
    assert says in str(exc.value) and "Fix:" in str(exc.value)


def test_a_default_number_key_with_too_many_decimals_is_refused_not_rounded():
    types = TableTypes.build("t", KEYS, DEFS, {})
    with pytest.raises(ValueTypeError, match="more than 9 decimal places"):
        types.row(from_item({"pk": {"S": "p"}, "sk": {"N": "0.0000000001"}}))


@pytest.mark.parametrize("text, spark", [
    ("decimal(12, 2)", "decimal(12,2)"), ("number", "decimal(38,9)"), ("array<string>", "array<string>"),
    ("struct<a:int, b:array<double>>", "struct<`a`:int,`b`:array<double>>"), ("json", "string"),
])
def test_declared_types_parse_and_render_back(text, spark):
    parsed = parse_type(text)
    assert parsed.spark == spark
    assert parse_type(parsed.declared) == parsed  # what executors receive reads back the same


@pytest.mark.parametrize("text", ["varchar", "decimal(40,2)", "array<string", "struct<a string>", "int x"])
def test_bad_declared_types_are_refused(text):
    with pytest.raises(ValueError):
        parse_type(text)


def test_unknown_wire_types_and_bad_numbers_raise():
    with pytest.raises(AttributeValueError, match="unknown DynamoDB type 'X'"):
        from_attribute_value({"X": 1})
    with pytest.raises(AttributeValueError, match="not a DynamoDB number"):
        from_attribute_value({"N": "abc"})
    with pytest.raises(AttributeValueError):  # 39 significant digits: more than DynamoDB keeps
        from_attribute_value({"N": "1" * 39})


def test_a_large_number_written_out_in_full_keeps_its_value():
    # DynamoDB (Local) gave 1.06669898350555e98 back as its 99 digits: 15 significant, the rest zeros
    text = "-106669898350555" + "0" * 84
    value = from_attribute_value({"N": text})
    assert value == Decimal(text) and item_json(value) == text
    assert from_attribute_value({"N": "1" * 38 + "0"}) == Decimal("1" * 38 + "0")


@given(st.decimals(allow_nan=False, allow_infinity=False, places=6, min_value=-10**20, max_value=10**20))
def test_item_json_keeps_every_digit(value):
    text = item_json({"v": value})
    assert json.loads(text, parse_float=Decimal, parse_int=Decimal)["v"] == value


_plain = st.recursive(st.none() | st.booleans() | st.text(),
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                      max_leaves=20)


@given(_plain)
def test_item_json_is_canonical_json_with_sorted_keys_and_text_kept(value):
    """The fast path (the C string quoting, dispatch on the exact type) writes what json.dumps would."""
    assert item_json(value) == json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
