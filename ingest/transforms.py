"""Column transforms: what of a column's value reaches the lake (pure).

A table's columns can be transformed before anything is written (a snapshot, bronze with its
before images, hence silver and history, and the source side of reconciliation):

| transform  | value in the lake                                                        |
|------------|--------------------------------------------------------------------------|
| `hash`     | SHA-256 of the salt then the value's canonical text, 64 hex digits       |
| `mask`     | the first `keep_first` and last `keep_last` characters, the rest `char`   |
| `truncate` | the first N characters                                                    |
| `null`     | NULL (the column keeps its type)                                          |

Every path applies one function to Arrow data (`TableTransforms.apply`): the run's own batches
before they go to Spark, and Spark's executors through `mapInArrow` for what they read
(`TableTransforms.frame`). A hash depends only on the salt and the value as the lake types it
(`canonical`), so a snapshot, a change batch, a re-run and another source holding the same value
in the same type give the same digest, and a hashed key still joins and merges. JSON images of a
row (bronze's `_before`, DynamoDB's `_item`) get the same transforms on the same names.

`mask` and `truncate` take text columns only, and none of the three but `hash` a key column: two
keys masked alike would merge two rows into one.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

HASH, MASK, TRUNCATE, NULL = "hash", "mask", "truncate", "null"

IMAGE_COLUMNS = ("_before", "_item")
"""Columns holding a row image as a JSON object keyed by source column names."""


class TransformError(ValueError):
    """A transform that cannot apply to its table: the message names the table, the column and the fix."""


@dataclass(frozen=True)
class Rule:
    """One column's transform. `salt` is the secret of a hash (never shown: repr=False)."""

    column: str
    kind: str
    keep_first: int = 0
    keep_last: int = 0
    char: str = "*"
    length: int = 0
    salt: bytes = field(default=b"", repr=False)

    def describe(self) -> str:
        """The transform as metadata shows it (never the salt)."""
        if self.kind == MASK:
            return f"mask(keep_first={self.keep_first}, keep_last={self.keep_last})"
        if self.kind == TRUNCATE:
            return f"truncate({self.length})"
        return self.kind

    def value(self, value: Any, arrow_type=None) -> Any:
        """The transformed value of one (non-image) value whose lake type is `arrow_type`."""
        if value is None or self.kind == NULL:
            return None
        if self.kind == HASH:
            return hashlib.sha256(self.salt + canonical(value, arrow_type)).hexdigest()
        text = value if isinstance(value, str) else str(value)
        if self.kind == TRUNCATE:
            return text[:self.length]
        shown = self.keep_first + self.keep_last
        if len(text) <= shown:  # nothing would be hidden: hide it all
            return self.char * len(text)
        return text[:self.keep_first] + self.char * (len(text) - shown) + text[len(text) - self.keep_last:]


def canonical(value: Any, arrow_type=None) -> bytes:
    """The bytes a hash digests for `value`, given its lake type (an Arrow type, or None for a JSON
    value with no column): binary as it is; decimals at their column's scale; timestamps in UTC with
    microseconds; dates ISO; booleans `true`/`false`; whole numbers in decimal; text as UTF-8. A value
    read back from a JSON image (a decimal or a date as its text, binary as `{"base64": ...}`) gives
    what the same value in its column gives."""
    import pyarrow as pa

    if isinstance(value, dict) and set(value) == {"base64"}:
        return base64.b64decode(value["base64"])
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if arrow_type is not None:
        if pa.types.is_binary(arrow_type) and isinstance(value, str):  # DynamoDB's `_item` writes binary as base64
            return base64.b64decode(value)
        if pa.types.is_decimal(arrow_type):
            return format(Decimal(str(value)).quantize(Decimal(1).scaleb(-arrow_type.scale)), "f").encode()
        if pa.types.is_timestamp(arrow_type):
            at = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
            if at.tzinfo is not None:
                at = at.astimezone(dt.timezone.utc).replace(tzinfo=None)
            return at.isoformat(sep=" ", timespec="microseconds").encode()
        if pa.types.is_date(arrow_type):
            return str(value)[:10].encode()
        if pa.types.is_boolean(arrow_type):
            return b"true" if value in (True, "true", 1) else b"false"
        if pa.types.is_floating(arrow_type):
            return repr(float(value)).encode()
        if pa.types.is_integer(arrow_type):
            return str(int(value)).encode()
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, dt.datetime):  # a key the change log decoded, with no column type at hand
        return canonical(value, pa.timestamp("us", "UTC"))
    if isinstance(value, dt.date):
        return value.isoformat().encode()
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return str(value).encode()


def _image_codecs() -> dict[str, tuple[Callable[[str], Any], Callable[[Any], str]]]:
    """How each image column is read and written back, byte for byte as its writer wrote it."""
    from ingest.images import image_json, item_json

    return {"_before": (json.loads, image_json),
            # numbers as DynamoDB's items hold them: Decimal, every digit kept
            "_item": (lambda text: json.loads(text, parse_float=Decimal, parse_int=Decimal), item_json)}


@dataclass(frozen=True)
class TableTransforms:
    """The transforms of one table's columns, by source column name."""

    table: str
    rules: tuple[Rule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)

    def by_column(self) -> dict[str, Rule]:
        return {r.column: r for r in self.rules}

    def metadata(self) -> dict[str, str]:
        """What each column's transform is, for the UI (no salt)."""
        return {r.column: r.describe() for r in self.rules}

    def hashes(self, column: str) -> bool:
        rule = self.by_column().get(column)
        return rule is not None and rule.kind == HASH

    def lake_type(self, column: str, spark_type: str) -> str:
        """The column's Spark type in the lake: a hash is text."""
        return "string" if self.hashes(column) else spark_type

    def columns(self, columns: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """(name, Spark type) pairs as the lake holds them."""
        return [(n, self.lake_type(n, t)) for n, t in columns]

    def check(self, columns: Sequence[tuple[str, str]], keys: Iterable[str], where: str,
              in_image: bool = False) -> TableTransforms:
        """These transforms, after raising TransformError for one on a column the table lacks, a text
        transform on a column that is not text, or anything but `hash` on a key column. `in_image`: a
        name that is no column is an attribute of the row's JSON image (DynamoDB's `_item`), untyped."""
        types, keys = dict(columns), set(keys)
        for rule in self.rules:
            if rule.column not in types and in_image:
                continue
            if rule.column not in types:
                raise TransformError(
                    f"table {self.table}: {where}.{rule.column}: the table has no column {rule.column!r} "
                    f"(it has {', '.join(sorted(types))}). Fix: correct the name or remove the transform")
            if rule.kind in (MASK, TRUNCATE) and types[rule.column] != "string":
                raise TransformError(
                    f"table {self.table}: {where}.{rule.column}: {rule.kind} applies to text columns, and "
                    f"{rule.column} is {types[rule.column]}. Fix: hash or null it instead")
            if rule.column in keys and rule.kind != HASH:
                raise TransformError(
                    f"table {self.table}: {where}.{rule.column}: {rule.column} is part of the primary key, "
                    f"and {rule.kind} would make distinct keys equal. Fix: hash it instead (a hash is a key too)")
        return self

    def key(self, names: Sequence[str], values: Sequence[Any], arrow_types: Sequence[Any]) -> tuple:
        """A key's values as the lake holds them."""
        rules = self.by_column()
        return tuple(rules[n].value(v, t) if n in rules else v for n, v, t in zip(names, values, arrow_types))

    def apply(self, data):
        """An Arrow table or record batch with the transforms applied (its other columns untouched)."""
        import pyarrow as pa

        if not self.rules:
            return data
        rules = self._lookup()
        raw_types = {f.name: f.type for f in data.schema}
        arrays, fields = [], []
        for i, fld in enumerate(data.schema):
            column, rule = data.column(i), rules.get(fld.name)
            if rule is not None:
                values = column.to_pylist()
                if rule.kind == NULL:
                    column = pa.nulls(len(values), fld.type)
                else:
                    out_type = _text_type(data.schema) if rule.kind == HASH else fld.type
                    column = pa.array([rule.value(v, fld.type) for v in values], type=out_type)
                fld = fld.with_type(column.type)
            elif fld.name in IMAGE_COLUMNS:
                column = pa.array(self._images(fld.name, column.to_pylist(), raw_types), type=fld.type)
            arrays.append(column)
            fields.append(fld)
        schema = pa.schema(fields, metadata=data.schema.metadata)
        if isinstance(data, pa.RecordBatch):
            return pa.RecordBatch.from_arrays(arrays, schema=schema)
        return pa.Table.from_arrays(arrays, schema=schema)

    def _lookup(self) -> dict[str, Rule]:
        """Rules by source name and by lake name (a column renamed for Delta: lake/columns.py)."""
        from ingest.lake.columns import lake_name

        return {**{lake_name(r.column): r for r in self.rules}, **self.by_column()}

    def _images(self, name: str, texts: list[str | None], raw_types: Mapping[str, Any]) -> list[str | None]:
        read, write = _image_codecs()[name]
        rules = self.by_column()
        out = []
        for text in texts:
            if text is None:
                out.append(None)
                continue
            image = read(text)
            touched = [c for c in rules if c in image]
            nested = [c for c in IMAGE_COLUMNS if isinstance(image.get(c), str)]  # a before image's `_item`
            if not touched and not nested:
                out.append(text)
                continue
            for c in touched:
                image[c] = rules[c].value(image[c], raw_types.get(c))
            for c in nested:
                image[c] = self._images(c, [image[c]], raw_types)[0]
            out.append(write(image))
        return out

    def batches(self, batches: Iterable[Any]) -> Iterator[Any]:
        """`apply` over a stream of record batches (what mapInArrow hands a task)."""
        for batch in batches:
            yield self.apply(batch)

    def frame(self, df):
        """`df` with the transforms applied on Spark's executors (the same `apply`), or `df` itself
        when none of its columns is transformed or holds an image."""
        from pyspark.sql.types import StringType, StructField, StructType

        rules = self._lookup()
        if not rules or not any(f.name in rules or f.name in IMAGE_COLUMNS for f in df.schema.fields):
            return df
        schema = StructType([
            StructField(f.name, StringType(), f.nullable, f.metadata)
            if f.name in rules and rules[f.name].kind == HASH else f for f in df.schema.fields])
        return df.mapInArrow(self.batches, schema)


def _text_type(schema):
    """The Arrow text type a hash gets: the one the batch's text columns use (Spark may send large ones)."""
    import pyarrow as pa

    if any(pa.types.is_large_string(f.type) for f in schema):
        return pa.large_string()
    return pa.string()
