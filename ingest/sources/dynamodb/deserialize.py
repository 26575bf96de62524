"""DynamoDB's wire format (attribute values) into Python values, and items into JSON (pure).

| DynamoDB | Python                         | item JSON (`_item`)              |
|----------|--------------------------------|----------------------------------|
| S        | str                            | string                           |
| N        | Decimal (38-digit context)     | number, exact digits             |
| B        | bytes                          | base64 string                    |
| BOOL     | bool                           | true / false                     |
| NULL     | None                           | null                             |
| SS/NS/BS | frozenset of the above         | sorted array                     |
| M        | dict                           | object                           |
| L        | list                           | array                            |

Numbers go through a 38-digit decimal context, DynamoDB's own precision, so
that no digit is rounded on the way. A set is a frozenset here so that a set
and a list stay apart until a declared column type says which it should be.
"""

from __future__ import annotations

import base64
import decimal
from collections.abc import Mapping
from typing import Any

DYNAMODB_CONTEXT = decimal.Context(prec=38, Emin=-128, Emax=126, rounding=decimal.ROUND_HALF_EVEN,
                                   traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow,
                                          decimal.Underflow])
"""Inexact, not Rounded: DynamoDB writes a large number out in full (1.0666989835055e98 came back from
DynamoDB Local as 99 digits, 14 of them significant), and dropping its zeros loses nothing."""


class AttributeValueError(ValueError):
    """A value the wire format allows but this reader cannot represent."""


def number(text: str) -> decimal.Decimal:
    try:
        return DYNAMODB_CONTEXT.create_decimal(text)
    except (decimal.DecimalException, TypeError) as exc:
        raise AttributeValueError(f"{text!r} is not a DynamoDB number ({type(exc).__name__})") from None


def _binary(value: Any) -> bytes:
    # boto3 hands out bytes; recorded payloads and raw JSON carry base64 text
    return bytes(value) if isinstance(value, (bytes, bytearray)) else base64.b64decode(value)


def from_attribute_value(av: Mapping[str, Any]) -> Any:
    """One attribute value (`{"N": "1.5"}`) into Python; unknown type tags raise."""
    if not isinstance(av, Mapping) or len(av) != 1:
        raise AttributeValueError(f"{av!r} is not a DynamoDB attribute value")
    (tag, value), = av.items()
    if tag == "S":
        return value
    if tag == "N":
        return number(value)
    if tag == "B":
        return _binary(value)
    if tag == "BOOL":
        return bool(value)
    if tag == "NULL":
        return None
    if tag == "SS":
        return frozenset(value)
    if tag == "NS":
        return frozenset(number(v) for v in value)
    if tag == "BS":
        return frozenset(_binary(v) for v in value)
    if tag == "M":
        return {k: from_attribute_value(v) for k, v in value.items()}
    if tag == "L":
        return [from_attribute_value(v) for v in value]
    raise AttributeValueError(f"unknown DynamoDB type {tag!r}")


def from_item(item: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {name: from_attribute_value(av) for name, av in item.items()}


