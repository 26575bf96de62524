"""The type contract for PostgreSQL columns: the text form a value has in pgoutput (and in a
snapshot's `col::text`) to Delta, so that the snapshot and the stream give identical values.

The sessions that produce the text use TimeZone UTC, DateStyle ISO and IntervalStyle iso_8601
(SESSION_SETTINGS), so the text of a value does not depend on the server's defaults.

| PostgreSQL                       | Delta (Spark)     | value                                         |
|----------------------------------|-------------------|-----------------------------------------------|
| boolean                          | boolean           |                                               |
| smallint / integer / bigint      | smallint/int/bigint |                                             |
| real / double precision          | float / double    | NaN and ±Infinity kept                        |
| numeric(p,s), p <= 38            | decimal(p,s)      | exact; NaN or ±Infinity: an error naming them |
| numeric (no precision), p > 38   | string            | exact, the server's text                      |
| text, varchar, char, name, citext | string           | char(n) keeps its padding                     |
| bytea                            | binary            |                                               |
| date                             | date              | ±infinity, BC dates: an error naming them     |
| timestamp                        | timestamp_ntz     | wall clock                                    |
| timestamptz                      | timestamp         | instant                                       |
| time, timetz, interval           | string            | 'HH:MM:SS[.ffffff]', ISO 8601 duration        |
| uuid, json, jsonb, xml, inet, ... | string           | the server's text (jsonb normalized by it)    |
| enum types                       | string            | the label                                     |
| one-dimensional arrays of the above | array<element> | NULL elements kept                           |

A type not named here lands as string, its text form: lossless, and readable by any reader.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from ingest.sources.contract import ColumnType

SESSION_SETTINGS = {"TimeZone": "UTC", "DateStyle": "ISO, YMD", "IntervalStyle": "iso_8601",
                    "extra_float_digits": "3"}
SPARK_MAX_DECIMAL_PRECISION = 38


def session_options() -> str:
    """SESSION_SETTINGS as libpq's `options`, so that every connection has them from its start: the
    changes a session decodes from a slot are written by the types' output functions in that
    session's settings (a batch read in the server's default IntervalStyle gave '00:00:00' where the
    snapshot gave 'PT0S')."""
    return " ".join("-c " + f"{name}={value}".replace(" ", "\\ ") for name, value in SESSION_SETTINGS.items())


class ValueOutOfContract(ValueError):
    """A value the column's Delta type cannot hold (a NaN numeric, an infinite date)."""


def numeric_typmod(typmod: int) -> tuple[int, int] | None:
    """numeric(p,s) from its type modifier; None for an unconstrained numeric."""
    if typmod < 4:
        return None
    return ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF


def to_bool(text: str) -> bool:
    return text == "t"


def to_float(text: str) -> float:
    return float({"Infinity": "inf", "-Infinity": "-inf", "NaN": "nan"}.get(text, text))


def to_decimal(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueOutOfContract(f"numeric {text!r} has no decimal value") from None
    if not value.is_finite():
        raise ValueOutOfContract(f"numeric {text!r} has no decimal value")
    return value


def to_bytes(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueOutOfContract(f"bytea not in hex form (bytea_output must be 'hex'): {text[:20]!r}")
    return bytes.fromhex(text[2:])


def to_date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueOutOfContract(f"date {text!r} is outside what Delta's date holds (years 1-9999)") from None


_TZ_RE = re.compile(r"([+-]\d{2})(:?\d{2})?(:?\d{2})?$")


ZERO = dt.timedelta(0)


def _iso(text: str) -> str:
    """The server's ISO timestamp text in a form datetime.fromisoformat takes (offsets '+05' -> '+05:00')."""
    match = _TZ_RE.search(text)
    if match and " " in text and match.start() > text.index(" "):
        hours, minutes, seconds = match.group(1), (match.group(2) or "00").lstrip(":"), match.group(3)
        offset = f"{hours}:{minutes}" + (f":{seconds.lstrip(':')}" if seconds else "")
        text = text[:match.start()] + offset
    return text


def to_timestamp(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueOutOfContract(f"timestamp {text!r} is outside what Delta's timestamp holds") from None


def to_instant(text: str) -> dt.datetime:
    try:
        try:  # Python 3.11 takes the server's '+00' offsets as they are; 3.10 needs them as '+00:00'
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            value = dt.datetime.fromisoformat(_iso(text))
        return value if value.utcoffset() == ZERO else value.astimezone(dt.timezone.utc)
    except ValueError:
        raise ValueOutOfContract(f"timestamptz {text!r} is outside what Delta's timestamp holds") from None


def array_items(text: str, delimiter: str = ",") -> list[str | None]:
    """A one-dimensional array literal's elements as text ('{a,"b c",NULL}' -> ['a', 'b c', None]).
    `delimiter` is the element type's (pg_type.typdelim): ',' but for box, whose text holds commas
    unquoted and whose arrays separate elements with ';'."""
    if text.startswith("["):  # explicit bounds, '[0:1]={a,b}'
        text = text[text.index("=") + 1:]
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueOutOfContract(f"not an array literal: {text[:40]!r}")
    body, items, i = text[1:-1], [], 0
    if not body:
        return []
    if '"' not in body and "{" not in body:  # the common case: no quoted element, no nesting
        return [None if raw == "NULL" else raw for raw in body.split(delimiter)]
    while i <= len(body):
        if i < len(body) and body[i] == "{":
            raise ValueOutOfContract("a multi-dimensional array: only one-dimensional arrays land as arrays")
        if i < len(body) and body[i] == '"':
            out, i = [], i + 1
            while body[i] != '"':
                if body[i] == "\\":
                    i += 1
                out.append(body[i])
                i += 1
            items.append("".join(out))
            i += 1
        else:
            end = body.find(delimiter, i)
            end = len(body) if end < 0 else end
            raw = body[i:end]
            items.append(None if raw == "NULL" else raw)
            i = end
        i += 1  # the delimiter
    return items


SIMPLE_ARRAY = r'^\{[^"{}]*\}$'
"""An array literal array_items splits on commas alone: no quoted element (so no escape, comma, brace or
space inside one), no nesting, no explicit bounds."""


def array_lists(texts):
    """A column of one-dimensional array literals (an Arrow string array) as an Arrow list array of their
    elements' text, split by Arrow's kernels: array_items' result for every value, without a Python call
    per value. None when a value is not SIMPLE_ARRAY; array_items then takes the column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pc.all(pc.match_substring_regex(texts, SIMPLE_ARRAY)).as_py() is False:  # None: no value
        return None
    bodies = pc.utf8_slice_codeunits(texts, 1, -1)
    split = pc.split_pattern(bodies, ",")
    # '{}' has no element, where splitting its empty body gives one ''; an empty string element is
    # quoted ('{""}'), so no other element is empty
    empty = pc.fill_null(pc.equal(bodies, ""), False)
    items = pc.filter(pc.list_flatten(split), pc.invert(pc.take(empty, pc.list_parent_indices(split))))
    items = pc.if_else(pc.equal(items, "NULL"), pa.scalar(None, pa.string()), items)
    lengths = pc.if_else(empty, 0, pc.fill_null(pc.list_value_length(split), 0))
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())])
    return pa.ListArray.from_arrays(offsets, items, mask=pc.is_null(texts))


_BY_NAME: dict[str, ColumnType] = {
    "bool": ColumnType("boolean", to_bool),
    "int2": ColumnType("smallint", int),
    "int4": ColumnType("int", int),
    "int8": ColumnType("bigint", int),
    "float4": ColumnType("float", to_float),
    "float8": ColumnType("double", to_float),
    "bytea": ColumnType("binary", to_bytes),
    "date": ColumnType("date", to_date),
    "timestamp": ColumnType("timestamp_ntz", to_timestamp),
    "timestamptz": ColumnType("timestamp", to_instant),
}
TEXT = ColumnType("string", None)


def column_type(type_name: str, typmod: int = -1, element: str | None = None, delimiter: str = ",") -> ColumnType:
    """The contract for a column of type `type_name` (pg_type.typname; arrays: `element` is the
    element's typname and `delimiter` its typdelim)."""
    if element is not None:
        inner = column_type(element, typmod)
        convert = inner.convert

        def items(text: str) -> list[Any]:
            return [None if v is None else (convert(v) if convert else v) for v in array_items(text, delimiter)]

        # array_lists splits on commas: an array of another delimiter (box) is split value by value
        return ColumnType(f"array<{inner.spark}>", items, element=inner if delimiter == "," else None)
    if type_name == "numeric":
        shape = numeric_typmod(typmod)
        if shape is None or shape[0] > SPARK_MAX_DECIMAL_PRECISION:
            return TEXT
        return ColumnType(f"decimal({shape[0]},{shape[1]})", to_decimal)
    return _BY_NAME.get(type_name, TEXT)


def column_array(ctype, texts, arrow_type):
    """One column of a chunk (an Arrow string array) in its Delta type. Text columns pass as they are;
    integers, numeric(p,s), doubles, dates and timestamps are parsed by Arrow's cast and booleans by a
    comparison, which take the same forms as the contract's parsers (the golden-type test compares them)
    and are many times faster; a value the cast refuses, and every other type, goes through the
    contract's parser, which names a value out of contract (a NaN numeric, an infinite date, a BC
    timestamp). An array column is split by Arrow's kernels (array_lists) and its elements converted as
    a column of the element's type."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ingest.sources.contract import convert_column

    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    elif not isinstance(texts, pa.Array):
        texts = pa.array(texts, pa.string())
    if ctype.element is not None and (lists := array_lists(texts)) is not None:
        items = column_array(ctype.element, lists.values, arrow_type.value_type)
        return pa.ListArray.from_arrays(lists.offsets, items, type=arrow_type, mask=lists.is_null())
    if ctype.convert is None:
        return texts.cast(arrow_type)
    if ctype.convert is to_bool:
        return pc.equal(texts, "t")
    # a float4's text goes through Python's double as the driver's path does: parsed straight to float32
    # it could round differently
    if ctype.convert in (int, to_decimal, to_date, to_timestamp, to_instant) or (
            ctype.convert is to_float and arrow_type == pa.float64()):
        try:
            return texts.cast(arrow_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return pa.array(convert_column(ctype, texts.to_pylist()), type=arrow_type)
