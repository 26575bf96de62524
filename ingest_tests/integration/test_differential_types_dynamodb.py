"""Differential, DynamoDB: random items with every attribute type (S, N at DynamoDB's 38 digits, B, BOOL,
NULL, SS, NS, BS, M, L; empty strings, binaries, lists and maps; unicode; nesting) land the same through
the snapshot's parallel scan and through the stream (put, overwrite, update, delete), and each silver
value equals what boto3's client reads from the table, mapped here by the contract's rules written out
independently: declared attributes in their column types, and the whole item as JSON in `_item` (numbers
exact, binaries base64, sets as sorted arrays) (issue 49)."""

import base64
import json
from decimal import Decimal

from dagster import DagsterInstance
from hypothesis import strategies as st

from ingest_tests.integration.dynamodb_harness import DynamoHarness, create_table, unique
from ingest_tests.integration.test_differential_types import ROWS, Column, _assert_equal, _draw, exact_decimals

_text = st.text(alphabet=" a\u00fc\"\\\n\U0001F600", max_size=6)
_binary = st.binary(max_size=6)
# numbers as DynamoDB holds them: up to 38 significant digits, exponents within -130..125
_number = st.decimals(allow_nan=False, allow_infinity=False, places=None, min_value=Decimal("-1e30"),
                      max_value=Decimal("1e30")).filter(
    lambda d: len(d.as_tuple().digits) <= 38 and (d == 0 or abs(d) >= Decimal("1e-129")))
_element = st.text(alphabet=" a\u00fc\"\\\n\U0001F600", min_size=1, max_size=6)  # a set holds no empty value
_scalar = st.one_of(st.builds(lambda s: {"S": s}, _text), st.builds(lambda n: {"N": str(n)}, _number),
                    st.builds(lambda b: {"B": b}, _binary), st.builds(lambda b: {"BOOL": b}, st.booleans()),
                    st.just({"NULL": True}))
_any = st.recursive(
    _scalar | st.builds(lambda s: {"SS": sorted(s)}, st.sets(_element, min_size=1, max_size=3))
    | st.builds(lambda s: {"NS": [str(n) for n in s]}, st.sets(_number, min_size=1, max_size=3))
    | st.builds(lambda s: {"BS": list(s)}, st.sets(st.binary(min_size=1, max_size=6), min_size=1, max_size=3)),
    lambda inner: st.builds(lambda v: {"L": v}, st.lists(inner, max_size=3))
    | st.builds(lambda v: {"M": v}, st.dictionaries(st.text(alphabet="k\u00e9 .", min_size=1, max_size=3), inner,
                                                    max_size=3)),
    max_leaves=5)


def _plain(av: dict):
    """An attribute value as JSON holds it: numbers as exact decimals, binaries in base64, sets sorted."""
    (tag, value), = av.items()
    return {"S": lambda: value, "N": lambda: Decimal(value), "B": lambda: base64.b64encode(value).decode(),
            "BOOL": lambda: value, "NULL": lambda: None,
            "SS": lambda: sorted(value), "NS": lambda: sorted(Decimal(v) for v in value),
            "BS": lambda: [base64.b64encode(b).decode() for b in sorted(value)],
            "M": lambda: {k: _plain(v) for k, v in value.items()}, "L": lambda: [_plain(v) for v in value]}[tag]()


def _scalar_of(tag: str, convert):
    return lambda av: convert(av[tag])


# declared attributes: (type, attribute values hypothesis draws, the client's value in the column)
DECLARED = {
    "s": ("string", st.builds(lambda s: {"S": s}, _text), _scalar_of("S", str)),
    "n": ("decimal(38,9)", exact_decimals(38, 9)[0].map(lambda d: {"N": str(d)}), _scalar_of("N", Decimal)),
    "big": ("bigint", st.integers(-2 ** 63, 2 ** 63 - 1).map(lambda i: {"N": str(i)}), _scalar_of("N", int)),
    "i": ("int", st.integers(-2 ** 31, 2 ** 31 - 1).map(lambda i: {"N": str(i)}), _scalar_of("N", int)),
    "d": ("double", st.floats(allow_nan=False, allow_infinity=False, min_value=-1e125, max_value=1e125)
          .filter(lambda f: f == 0 or abs(f) >= 1e-129).map(lambda f: {"N": repr(f)}), _scalar_of("N", float)),
    "ok": ("boolean", st.builds(lambda b: {"BOOL": b}, st.booleans()), _scalar_of("BOOL", bool)),
    "bin": ("binary", st.builds(lambda b: {"B": b}, _binary), _scalar_of("B", bytes)),
    "j": ("json", _any, _plain),
    "tags": ("array<string>", st.builds(lambda s: {"SS": sorted(s)}, st.sets(_element, min_size=1, max_size=3))
             | st.builds(lambda v: {"L": [{"S": s} for s in v]}, st.lists(_text, max_size=3)),
             lambda av: sorted(av["SS"]) if "SS" in av else [v["S"] for v in av["L"]]),
    "addr": ("struct<city:string,zip:bigint>",
             st.builds(lambda c, z: {"M": {"city": {"S": c}, "zip": {"N": str(z)}}}, _text, st.integers(0, 99999)),
             lambda av: {"city": av["M"]["city"]["S"], "zip": int(av["M"]["zip"]["N"])}),
}
# each declared attribute absent, NULL or a value of its type; two undeclared ones of any type
_ITEM = st.fixed_dictionaries({}, optional={
    **{name: values | st.just({"NULL": True}) for name, (_, values, _) in DECLARED.items()},
    "extra": _any, "extra2": _any})


def _items(n: int) -> list[dict]:
    # _draw's rows of one column, each an item without its key (None: an item of the key alone)
    return [r["item"] or {} for r in _draw({"item": Column("item", _ITEM)}, n)]


def _json(text: str):
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def _client_rows(client, table: str) -> list[dict]:
    """The table as boto3's client scans it, each item landed by the contract's rules."""
    items, kwargs = [], {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    rows = []
    for item in items:
        row = {"id": item["id"]["S"], "_item": {k: _plain(v) for k, v in item.items()}}
        row.update({name: None if name not in item or "NULL" in item[name] else convert(item[name])
                    for name, (_, _, convert) in DECLARED.items()})
        rows.append(row)
    return sorted(rows, key=lambda r: r["id"])


def _lake_rows(df) -> list[dict]:
    from ingest_tests.integration.test_snapshot_types import plain

    rows = []
    for r in df.select("id", "_item", *DECLARED).collect():
        row = {k: plain(v) for k, v in r.asDict().items()}
        row["_item"] = _json(row["_item"])
        row["j"] = None if row["j"] is None else _json(row["j"])
        rows.append(row)
    return sorted(rows, key=lambda r: r["id"])


def _put(client, table: str, key: str, item: dict) -> None:
    client.put_item(TableName=table, Item={"id": {"S": key}, **item})


def test_every_attribute_type_agrees_on_every_path_and_with_the_client(spark, dynamodb, tmp_path):
    import boto3
    import yaml

    from ingest.lake.merge import live_rows

    client = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    snap, stream = create_table(client, unique("diff_snap")), create_table(client, unique("diff_stream"))
    declared = {name: kind for name, (kind, _, _) in DECLARED.items()}
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"src": {
        "kind": "dynamodb", "region": "us-east-1", "endpoint_url": dynamodb.endpoint_url, "tables": [snap, stream],
        "attributes": {snap: declared, stream: declared}, "snapshot": {"segments": 4, "segments_per_commit": 2},
        "cdc": {"watch_seconds": 0}}}}))
    h = DynamoHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral(), dynamodb.endpoint_url)

    items = _items(ROWS)
    for i, item in enumerate(items):
        _put(client, snap, f"k{i:04d}", item)
    h.snapshot(snap)
    _assert_equal("snapshot", _client_rows(client, snap), _lake_rows(spark.read.format("delta").load(h.path(snap, "snapshot"))))

    h.snapshot(stream)  # empty: every item arrives through the stream
    for i, item in enumerate(items):
        _put(client, stream, f"k{i:04d}", item)
    for i, item in enumerate(_items(ROWS // 2)):  # overwrites
        _put(client, stream, f"k{2 * i:04d}", item)
    for i in range(1, ROWS, 5):  # an update of a few attributes, one removed
        client.update_item(TableName=stream, Key={"id": {"S": f"k{i:04d}"}}, UpdateExpression="SET i = :i REMOVE s",
                           ExpressionAttributeValues={":i": {"N": str(i)}})
    for i in range(3, ROWS, 7):
        client.delete_item(TableName=stream, Key={"id": {"S": f"k{i:04d}"}})
    h.sync_until_idle()
    silver = live_rows(spark.read.format("delta").load(h.path(stream, "silver")))
    _assert_equal("stream", _client_rows(client, stream), _lake_rows(silver))
