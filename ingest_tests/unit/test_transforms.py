"""Column transforms, pure: what each one writes, that a hash depends only on the salt and the value as
the lake types it, and the errors for transforms that cannot apply."""

import datetime as dt
import hashlib
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from ingest.config import ConfigError, MissingSecret, parse_config
from ingest.images import image_json, item_json
from ingest.transforms import HASH, MASK, NULL, TRUNCATE, Rule, TableTransforms, TransformError

SALT = b"pepper"


def sha(text: bytes) -> str:
    return hashlib.sha256(SALT + text).hexdigest()


def table(*rules: Rule) -> TableTransforms:
    return TableTransforms("t", rules)


def test_each_transform_writes_what_it_promises():
    t = table(Rule("e", HASH, salt=SALT), Rule("p", MASK, keep_first=2, keep_last=2, char="#"),
              Rule("b", TRUNCATE, length=3), Rule("n", NULL))
    out = t.apply(pa.table({"e": ["a@x", None], "p": ["0123456789", "abcd"], "b": ["hello", "hé"],
                            "n": pa.array([1, 2], pa.int32()), "k": [1, 2]})).to_pydict()
    assert out == {"e": [sha(b"a@x"), None], "p": ["01######89", "####"], "b": ["hel", "hé"],
                   "n": [None, None], "k": [1, 2]}
    assert t.apply(pa.table({"n": pa.array([1], pa.int32())})).schema.field("n").type == pa.int32()  # null keeps it


@pytest.mark.parametrize("arrow_type, column_value, image_value, text", [
    (pa.decimal128(10, 2), Decimal("1.50"), "1.5", b"1.50"),
    (pa.timestamp("us", "UTC"), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
     "2024-01-02 04:04:05+01:00", b"2024-01-02 03:04:05.000000"),
    (pa.date32(), dt.date(2024, 1, 2), "2024-01-02", b"2024-01-02"),
    (pa.binary(), b"\x00\xff", {"base64": "AP8="}, b"\x00\xff"),
    (pa.int64(), 42, 42, b"42"),
    (pa.bool_(), True, True, b"true"),
])
def test_a_hash_is_the_same_in_its_column_and_in_a_before_image(arrow_type, column_value, image_value, text):
    t = table(Rule("c", HASH, salt=SALT))
    before = json.dumps({"c": image_value, "other": 1}, sort_keys=True)
    out = t.apply(pa.table({"c": pa.array([column_value], arrow_type), "_before": [before]})).to_pylist()[0]
    assert out["c"] == sha(text)
    assert json.loads(out["_before"]) == {"c": sha(text), "other": 1}


def test_images_without_a_transformed_name_are_kept_byte_for_byte_and_items_round_trip():
    t = table(Rule("secret", NULL))
    before = image_json({"a": Decimal("1.10"), "b": b"\x01", "c": "x"})
    item = item_json({"n": Decimal("12.50"), "s": "y", "l": [Decimal("1"), "z"], "m": {"k": True},
                      "secret": "raw"})
    out = t.apply(pa.table({"_before": [before], "_item": [item]})).to_pylist()[0]
    assert out["_before"] == before
    assert json.loads(out["_item"], parse_float=Decimal) == {"n": Decimal("12.50"), "s": "y", "l": [1, "z"],
                                                               "m": {"k": True}, "secret": None}
    assert out["_item"] == item.replace('"raw"', "null")  # the rest exactly as the source's writer wrote it


def test_a_before_image_holding_an_item_image_is_transformed_inside_it():
    t = table(Rule("email", HASH, salt=SALT))
    before = image_json({"id": "k", "_item": item_json({"id": "k", "email": "a@x"})})
    out = json.loads(t.apply(pa.table({"_before": [before]})).to_pylist()[0]["_before"])
    assert json.loads(out["_item"]) == {"id": "k", "email": sha(b"a@x")}


def test_checks_name_the_table_the_column_and_the_fix():
    columns = [("id", "bigint"), ("email", "string"), ("n", "int")]
    with pytest.raises(TransformError, match=r"table t: w\.nope: the table has no column 'nope'.*Fix"):
        table(Rule("nope", NULL)).check(columns, ["id"], "w")
    with pytest.raises(TransformError, match="mask applies to text columns, and n is int. Fix: hash or null"):
        table(Rule("n", MASK)).check(columns, ["id"], "w")
    with pytest.raises(TransformError, match="part of the primary key.*Fix: hash it"):
        table(Rule("id", NULL)).check(columns, ["id"], "w")
    assert table(Rule("id", HASH)).check(columns, ["id"], "w").hashes("id")
    assert table(Rule("attr", MASK)).check(columns, ["id"], "w", in_image=True)  # an item's attribute


def source(transform, **columns):
    return {"sources": {"s": {"host": "h", "user": "u", "password_env": "P", "database": "d", "tables": {
        "include": ["t"], "columns": {"t": {"transform": transform, **columns}}}}}}


@pytest.mark.parametrize("transform, columns, message", [
    ({"email": "bogus"}, {}, "'bogus' is not a transform"),
    ({"email": {"hash": {"salt_env": "S"}, "truncate": 3}}, {}, "exactly one of hash, mask, truncate or null"),
    ({"email": {"sha1": {}}}, {}, "transform.email.sha1: Extra inputs are not permitted"),
    ({"email": None}, {"exclude": ["email"]}, "transform.email: the column is also excluded"),
    ({"email": {"hash": {"salt_env": "not a name"}}}, {}, "salt_env"),
])
def test_bad_transforms_fail_at_load_naming_the_key(transform, columns, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(source(transform, **columns))


def test_a_missing_salt_names_its_variable_the_table_and_the_column(monkeypatch):
    monkeypatch.delenv("NO_SUCH_SALT", raising=False)
    config = parse_config(source({"email": {"hash": {"salt_env": "NO_SUCH_SALT"}}, "bio": "null"}))
    with pytest.raises(MissingSecret, match=r"NO_SUCH_SALT is not set: it holds the salt of "
                                            r"tables\.columns\.t\.transform\.email's hash \(table t\)"):
        config.sources["s"].transforms("t")
    monkeypatch.setenv("NO_SUCH_SALT", "Salt-Qz7-Value")
    transforms = config.sources["s"].transforms("t")
    assert transforms.rules[0].salt == b"Salt-Qz7-Value"
    assert "Salt-Qz7" not in repr(transforms) and "Salt-Qz7" not in str(transforms.metadata())


def test_a_postgres_source_refuses_excluded_columns_it_would_not_leave_out():
    raw = {"sources": {"p": {"kind": "postgres", "host": "h", "user": "u", "password_env": "P", "database": "d",
                             "publication": "pub", "tables": {"include": ["t"], "columns": {"t": {"exclude": ["c"]}}}}}}
    with pytest.raises(ConfigError, match=r"tables.columns.t.exclude: leaving columns out is not available for "
                                          r"postgres sources yet. Fix: .*transform: \{<column>: null\}"):
        parse_config(raw)


def test_a_binary_attribute_hashes_alike_in_its_column_and_in_the_item():
    t = table(Rule("blob", HASH, salt=SALT))
    item = item_json({"id": "k", "blob": b"\x00\xff"})  # DynamoDB's items hold binary as base64 text
    out = t.apply(pa.table({"blob": pa.array([b"\x00\xff"], pa.binary()), "_item": [item]})).to_pylist()[0]
    assert out["blob"] == sha(b"\x00\xff") == json.loads(out["_item"])["blob"]
