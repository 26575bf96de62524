"""Row images as JSON text, written and read back byte for byte (pure).

Two writers: `image_json`, bronze's `_before` (a change's row before it, keys sorted; what JSON cannot
hold, as text), and `item_json`, DynamoDB's `_item` (the whole item, numbers with their exact digits).
Column transforms (ingest/transforms.py) read an image, transform some of its values and write it back
with the same writer, so an image they do not touch stays as it was.
"""

from __future__ import annotations

import base64
import decimal
import json
from collections.abc import Callable, Mapping
from typing import Any


def _json_value(value: Any) -> Any:
    """What JSON cannot hold as it is: bytes as {"base64": ...}, anything else (DECIMAL, dates) as its text."""
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    return str(value)


def _image_encoder() -> Callable[[dict[str, Any]], str]:
    """json.dumps(image, sort_keys=True, default=_json_value), with its C encoder made once: json.dumps
    with options builds one at every call, a third of the JSON's cost in an update's decoding."""
    from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]

    if c_make_encoder is None:  # a Python without json's C accelerator
        return json.JSONEncoder(sort_keys=True, default=_json_value).encode
    # the arguments JSONEncoder.iterencode passes, with json.dumps's defaults (no circular check: flat images)
    encode = c_make_encoder(None, _json_value, encode_basestring_ascii, None, ": ", ", ", True, False, True)
    return lambda image: "".join(encode(image, 0))


_IMAGE_JSON = _image_encoder()


def image_json(image: dict[str, Any] | None) -> str | None:
    """A before image as JSON, keys sorted; json calls `_json_value` only for the values it cannot write
    (a walk over every value first was most of an update's cost in bronze)."""
    if image is None:
        return None
    return _IMAGE_JSON(image)


_quote = json.encoder.encode_basestring
"""A string as JSON, non-ASCII kept: json.dumps(s, ensure_ascii=False), in C and without its setup
(a quarter of a stream batch's decoding went to json.dumps)."""


def item_json(value: Any) -> str:
    """JSON of a Python item (or any value of one), numbers with their exact digits."""
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is decimal.Decimal:
        # JSON has no NaN or infinity, and DynamoDB numbers never are either
        return format(value, "f") if value == value.to_integral_value() else str(value)
    if kind is dict:
        return "{" + ",".join(f"{_quote(k)}:{item_json(value[k])}" for k in sorted(value)) + "}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (bytes, bytearray)):
        return _quote(base64.b64encode(bytes(value)).decode())
    if isinstance(value, frozenset):
        return "[" + ",".join(item_json(v) for v in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + ",".join(item_json(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_quote(k)}:{item_json(value[k])}" for k in sorted(value)) + "}"
    raise ValueError(f"cannot write {type(value).__name__} as JSON")
