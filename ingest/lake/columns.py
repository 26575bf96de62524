"""Column names and types as the lake stores them, so that any Delta reader opens every table (pure).

Tables are written at Delta's reader version 1: no column mapping, no type widening, no deletion
vectors. delta-rs (`deltalake`), Polars and DuckDB refuse or misread tables with those reader
features. Two things then need care:

- **Names.** Without column mapping a Delta column name cannot hold ` ,;{}()\\n\\t=`. A source
  column whose name has any of them, or a `.` (which every SQL engine reads as a nested field),
  is stored as `lake_name(name)`: each such character becomes `_`, then `_` and six hex digits
  of the name's SHA-1 keep `a b` and `a_b` apart. The source name stays in the column's
  metadata under `SOURCE_NAME`.
- **Types.** A source MODIFY to a wider type cannot widen a Delta column in place without the
  typeWidening reader feature, so the table is rewritten once with the wider type (one atomic
  overwrite: readers see the old table or the new one). `widenings` says which columns need it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

SOURCE_NAME = "ingest.source_name"
"""Column metadata key holding a normalized column's name in the source."""

_NOT_IN_DELTA = set(" ,;{}()\n\t=.")


def lake_name(name: str) -> str:
    """The column's name in the lake: the source name where Delta can hold it (idempotent)."""
    if not any(ch in _NOT_IN_DELTA for ch in name):
        return name
    clean = "".join("_" if ch in _NOT_IN_DELTA else ch for ch in name)
    return f"{clean}_{hashlib.sha1(name.encode()).hexdigest()[:6]}"


_INTEGRAL = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
"""Integral types and the decimal digits their values need."""
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


def _digits(spark_type: str) -> tuple[int, int] | None:
    """(integer digits, scale) of an exact number type, None for any other type."""
    if spark_type in _INTEGRAL:
        return _INTEGRAL[spark_type], 0
    m = _DECIMAL.fullmatch(spark_type)
    return (int(m[1]) - int(m[2]), int(m[2])) if m else None


def is_wider(old: str, new: str) -> bool:
    """Whether every value of Spark type `old` (simple string form) is a value of `new`."""
    if old == new:
        return False
    if old in _INTEGRAL and new in _INTEGRAL:
        return _INTEGRAL[new] > _INTEGRAL[old]
    if new == "double" and old in ("float", "tinyint", "smallint", "int"):
        return True
    if (old, new) in (("date", "timestamp"), ("date", "timestamp_ntz")):
        return True
    a, b = _digits(old), _digits(new)
    return a is not None and b is not None and new.startswith("decimal") and b[0] >= a[0] and b[1] >= a[1]


def common_type(old: str, new: str) -> str | None:
    """The narrowest type holding every value of both (None: there is none we widen to)."""
    if old == new or is_wider(new, old):
        return old
    if is_wider(old, new):
        return new
    a, b = _digits(old), _digits(new)
    if a is not None and b is not None and max(a[0], b[0]) + max(a[1], b[1]) <= 38:
        return f"decimal({max(a[0], b[0]) + max(a[1], b[1])},{max(a[1], b[1])})"
    return None


class TypeChangeError(ValueError):
    """A source column changed to a type its lake column cannot widen to."""


def widenings(table: Mapping[str, str], incoming: Mapping[str, str], where: str) -> dict[str, str]:
    """The table's columns that must become wider for `incoming` (name: Spark type) to be written,
    with their new types. Names compare case-insensitively, as Delta's do; a narrower incoming
    type is fine (Delta casts it up on write). A change to a type that holds neither all old nor
    all new values raises TypeChangeError."""
    current = {name.lower(): (name, spark_type) for name, spark_type in table.items()}
    out: dict[str, str] = {}
    for name, new in incoming.items():
        if name.lower() not in current:
            continue
        column, old = current[name.lower()]
        wider = common_type(old, new)
        if wider is None:
            raise TypeChangeError(
                f"{where}: column {column!r} is {old} in the lake and {new} in the source now, and no type "
                f"holds both. Fix: leave the column out (tables.columns.<table>.exclude in sources.yaml), or "
                f"move the table's lake folders aside and snapshot it again")
        if wider != old:
            out[column] = wider
    return out
