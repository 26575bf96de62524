"""What the catalog says of a table's column types (I/O): the names the type contract is keyed by."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ingest.sources.contract import ColumnType
from ingest.sources.postgres.types import SESSION_SETTINGS, column_type


@dataclass(frozen=True)
class PgType:
    name: str
    """pg_type.typname of the type, or of a domain's base type."""
    element: str | None
    """An array's element typname (of its base type, for a domain)."""

    def contract(self, typmod: int = -1) -> ColumnType:
        return column_type(self.name, typmod, self.element)


_TYPES_SQL = """
WITH RECURSIVE base(oid, root) AS (
    SELECT t.oid, t.oid FROM pg_type t WHERE t.oid = ANY(%s)
    UNION ALL
    SELECT b.oid, t.typbasetype FROM base b JOIN pg_type t ON t.oid = b.root WHERE t.typtype = 'd'
)
SELECT b.oid, t.typname, e.typname
FROM base b JOIN pg_type t ON t.oid = b.root LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.typtype <> 'd'
"""


def types_of(conn, oids: Iterable[int]) -> dict[int, PgType]:
    """The contract's names for type OIDs (a domain resolves to its base type)."""
    with conn.cursor() as cur:
        cur.execute(_TYPES_SQL, (sorted(set(oids)),))
        return {oid: PgType(name, element) for oid, name, element in cur.fetchall()}


def set_session(conn) -> None:
    """The settings the contract's text forms assume (types.SESSION_SETTINGS)."""
    with conn.cursor() as cur:
        for name, value in SESSION_SETTINGS.items():
            cur.execute("SELECT set_config(%s, %s, false)", (name, value))
