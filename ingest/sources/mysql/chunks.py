"""Chunk planning for snapshots: primary-key ranges and the SQL that reads them.

A chunk is a half-open key range [lo, hi): lo None is "from the start", hi None
"to the end", so rows inserted past the last planned boundary still land in
the last chunk. Composite keys compare lexicographically; the predicates are
spelled as OR-expansions, which MariaDB's range optimizer turns into index
ranges (it does not do that for row constructors like (a,b) >= (?,?)).
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

Key = tuple[Any, ...]


def quote_ident(name: str) -> str:
    """Backtick-quote an identifier; a backtick inside is doubled, so no name can end the quoting."""
    if not isinstance(name, str) or name == "" or "\x00" in name:
        raise ValueError(f"not a usable SQL identifier: {name!r}")
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Chunk:
    index: int
    lo: Key | None
    hi: Key | None


def plan_chunks(boundaries: Sequence[Key], start: Key | None = None, first_index: int = 0) -> list[Chunk]:
    """Chunks split at `boundaries` (sorted keys), covering [start, end)."""
    edges: list[Key | None] = [start, *boundaries, None]
    for a, b in zip(boundaries, boundaries[1:]):
        if not a < b:
            raise ValueError(f"chunk boundaries must be strictly increasing: {a!r} then {b!r}")
    return [Chunk(first_index + i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def _compare(columns: Sequence[str], op: str, key: Key) -> tuple[str, list[Any]]:
    """Lexicographic `columns op key` for op in '>=' or '<', as SQL with %s parameters."""
    if len(columns) != len(key):
        raise ValueError(f"key {key!r} does not match key columns {list(columns)}")
    strict = ">" if op == ">=" else "<"
    terms, params = [], []
    for i, col in enumerate(columns):
        eqs = [f"{quote_ident(c)} = %s" for c in columns[:i]]
        last = op if i == len(columns) - 1 else strict
        terms.append("(" + " AND ".join([*eqs, f"{quote_ident(col)} {last} %s"]) + ")")
        params.extend([*key[:i], key[i]])
    return "(" + " OR ".join(terms) + ")", params


def range_predicate(columns: Sequence[str], lo: Key | None, hi: Key | None) -> tuple[str, list[Any]]:
    parts, params = [], []
    if lo is not None:
        sql, p = _compare(columns, ">=", lo)
        parts.append(sql)
        params += p
    if hi is not None:
        sql, p = _compare(columns, "<", hi)
        parts.append(sql)
        params += p
    return (" AND ".join(parts) or "TRUE"), params


def chunk_query(database: str, table: str, select_columns: Sequence[str], key_columns: Sequence[str],
                chunk: Chunk, row_filter: str | None = None) -> tuple[str, list[Any]]:
    """The chunk's rows; with `row_filter` (a predicate in the server's SQL) only those it holds for."""
    where, params = range_predicate(key_columns, chunk.lo, chunk.hi)
    cols = ", ".join(quote_ident(c) for c in select_columns)
    if row_filter:
        from ingest.filters import predicate

        where += " AND " + predicate(row_filter).replace("%", "%%")  # %%: the query takes parameters
    return f"SELECT {cols} FROM {quote_ident(database)}.{quote_ident(table)} WHERE {where}", params


def next_boundary_query(database: str, table: str, key_columns: Sequence[str], chunk_size: int,
                        start: Key | None = None) -> tuple[str, list[Any]]:
    """The key `chunk_size` keys on from `start` (inclusive): the end of the chunk that starts there.

    One index seek and a walk of `chunk_size` primary-key entries; the boundaries of a whole table
    cost one ordered pass over the key, where a ROW_NUMBER() window over it built a temporary table
    of every key first (1.4 s per million rows here).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1: {chunk_size}")
    cols = ", ".join(quote_ident(c) for c in key_columns)
    where, params = range_predicate(key_columns, start, None)
    sql = (f"SELECT {cols} FROM {quote_ident(database)}.{quote_ident(table)} WHERE {where} "
           f"ORDER BY {cols} LIMIT 1 OFFSET %s")
    return sql, [*params, chunk_size]


DENSE_KEYS = 2
"""An integer key whose span is at most this many times the table's rows is cut by arithmetic."""


def even_boundaries(lowest: int, highest: int, rows: int, chunk_size: int,
                    start: int | None = None) -> list[int] | None:
    """Boundaries of an integer key cut into equal-width ranges of about `chunk_size` rows, or None
    when the keys are too sparse for that (then each boundary is found by a seek).

    Spark's JDBC reader cuts a key the same way. It costs two index dives where the seeks walk the
    whole key (1.9 s for 10M rows here). `rows` is the server's estimate: a chunk can hold more or
    fewer rows than `chunk_size`, which changes its time, not the result.
    """
    span = highest - lowest + 1
    if rows < 1 or span < 1 or span > DENSE_KEYS * rows:
        return None
    # as many chunks as the estimate rounds to, of equal width: an estimate a little over the real
    # count must not add a tail chunk of a few rows (each chunk costs a connection and a snapshot)
    width = -(-span // max(1, round(rows / chunk_size)))
    first = lowest if start is None else max(lowest, start)
    return list(range(first + width, highest + 1, width))


# Keys travel in Delta commit metadata (JSON) so a resumed snapshot knows where
# to go on; these keep their Python types through the round trip.
def key_to_json(key: Key | None) -> list[Any] | None:
    if key is None:
        return None
    out: list[Any] = []
    for v in key:
        if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
            out.append(v)
        elif isinstance(v, float):
            out.append({"f": repr(v)})
        elif isinstance(v, Decimal):
            out.append({"dec": str(v)})
        elif isinstance(v, (bytes, bytearray)):
            out.append({"b64": base64.b64encode(bytes(v)).decode()})
        elif isinstance(v, dt.datetime):
            out.append({"dt": v.isoformat()})
        elif isinstance(v, dt.date):
            out.append({"d": v.isoformat()})
        elif isinstance(v, dt.timedelta):
            out.append({"td": v.total_seconds()})
        else:
            raise TypeError(f"cannot keep a key value of type {type(v).__name__} in metadata: {v!r}")
    return out


def key_from_json(data: list[Any] | None) -> Key | None:
    if data is None:
        return None
    out: list[Any] = []
    for v in data:
        if not isinstance(v, dict):
            out.append(v)
            continue
        (tag, raw), = v.items()
        out.append({
            "f": float, "dec": Decimal, "b64": base64.b64decode, "dt": dt.datetime.fromisoformat,
            "d": dt.date.fromisoformat, "td": lambda s: dt.timedelta(seconds=s),
        }[tag](raw))
    return tuple(out)
