"""What a binlog query event did to a captured table, without its text (pure).

A binlog holds every statement the server ran, of every database: account statements with passwords
(`CREATE USER ... IDENTIFIED BY '...'`, `SET PASSWORD`, `GRANT ... IDENTIFIED BY`), other tenants'
DDL, literals of column defaults. A change batch keeps only what concerns the source's own captured
tables, and of that only what a statement did: its kind, the table, and the columns its clauses
name (never a literal). Everything else is dropped here, before anything is stored or logged.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from ingest.sources.mysql.events import IDENTIFIER, QUALIFIED_NAME, identifier, schema_and_table

_COMMENTS = re.compile(r"/\*.*?\*/|(?:--\s|#)[^\n]*", re.DOTALL)
_SECRETS = re.compile(r"\b(?:IDENTIFIED|PASSWORD)\b", re.IGNORECASE)
_ACCOUNTS = re.compile(r"^\s*(?:(?:CREATE|ALTER|DROP|RENAME)\s+(?:USER|ROLE)|GRANT|REVOKE|SET\s+(?:PASSWORD|ROLE|DEFAULT\s+ROLE))\b",
                       re.IGNORECASE)
_TABLE_DDL = re.compile(
    r"^\s*(ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE(?:\s+IF\s+EXISTS)?"
    r"|CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?"
    r"|DROP\s+(?:TEMPORARY\s+)?TABLES?(?:\s+IF\s+EXISTS)?"
    r"|RENAME\s+TABLES?"
    r"|TRUNCATE(?:\s+TABLE)?)\s+(.*)$", re.IGNORECASE | re.DOTALL)
_CLAUSE = re.compile(rf"^\s*(ADD|DROP|MODIFY|CHANGE|RENAME|ALTER)(?:\s+COLUMN)?(?:\s+IF\s+(?:NOT\s+)?EXISTS)?\s+{IDENTIFIER}",
                     re.IGNORECASE)
_NOT_COLUMNS = {"PRIMARY", "INDEX", "KEY", "UNIQUE", "CONSTRAINT", "FOREIGN", "CHECK", "PARTITION", "FULLTEXT",
                "SPATIAL", "TO", "AS", "PERIOD", "SYSTEM"}


def may_hold_secret(statement: str) -> bool:
    """An account or privilege statement, or any that says IDENTIFIED or PASSWORD."""
    return bool(_ACCOUNTS.match(statement) or _SECRETS.search(statement))


def _kind(keyword: str) -> str:
    words = keyword.upper().split()
    if words[0] == "TRUNCATE":
        return "TRUNCATE TABLE"
    return f"{words[0]} TABLE"


def _names(text: str, default_schema: str | None) -> list[tuple[str | None, str]]:
    """(schema, table) of each qualified name at the start of `text` and after each top-level comma or
    TO (the tables a DROP, TRUNCATE or RENAME names)."""
    out = []
    for part in re.split(r",|\bTO\b", text, flags=re.IGNORECASE):
        name = QUALIFIED_NAME.match(part.strip())
        if name:
            out.append(schema_and_table(name, default_schema))
    return out


def _top_level_clauses(text: str) -> list[str]:
    """`text` split at commas outside parentheses and quotes."""
    clauses, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            clauses.append(text[start:i])
            start = i + 1
    clauses.append(text[start:])
    return clauses


def _column_clauses(rest: str) -> list[str] | None:
    """`ADD COLUMN c`, `DROP COLUMN c`... for each clause of an ALTER TABLE's rest that names a column:
    the verb and the column, nothing else (a default's literal stays out). None when a clause cannot
    be read."""
    after_name = QUALIFIED_NAME.match(rest)
    if not after_name:
        return None
    out = []
    for clause in _top_level_clauses(rest[after_name.end():]):
        if not clause.strip():
            continue
        found = _CLAUSE.match(clause)
        if not found:
            if re.match(r"^\s*(ENGINE|CONVERT|DEFAULT|CHARACTER|COLLATE|COMMENT|AUTO_INCREMENT|ROW_FORMAT|FORCE|ALGORITHM"
                        r"|LOCK|ORDER|ENABLE|DISABLE|DISCARD|IMPORT)\b", clause, re.IGNORECASE):
                continue  # a table option: no column
            return None
        column = identifier(found, 2)
        if column.upper() in _NOT_COLUMNS:
            continue  # ADD PRIMARY KEY, DROP INDEX...: no column of the table's changes
        out.append(f"{found.group(1).upper()} COLUMN {column}")
    return out


def captured_ddl(statement: str, default_schema: str | None, database: str,
                 captured: Collection[str]) -> list[dict[str, object]]:
    """What `statement` did to the captured tables of `database`, one record per table: `table`,
    `statement` (its kind, e.g. "ALTER TABLE") and, for an ALTER TABLE, `columns` (the clauses that
    name a column). An account or privilege statement, or one of another database or of no captured
    table, gives nothing; one on a captured table whose clauses cannot be read, or that says
    IDENTIFIED or PASSWORD, gives `{"table", "statement": "unparsed DDL"}`."""
    text = _COMMENTS.sub(" ", statement)
    if _ACCOUNTS.match(text):
        return []
    found = _TABLE_DDL.match(text)
    if not found:
        return []
    kind, rest = _kind(found.group(1)), found.group(2)
    names = _names(rest, default_schema) if kind in ("DROP TABLE", "TRUNCATE TABLE", "RENAME TABLE") \
        else _names(QUALIFIED_NAME.match(rest).group(0) if QUALIFIED_NAME.match(rest) else "", default_schema)
    tables = sorted({t for schema, t in names if schema == database and t in captured})
    if not tables:
        return []
    if _SECRETS.search(text):  # not even its column names: the statement may carry a secret elsewhere
        return [{"table": t, "statement": "unparsed DDL"} for t in tables]
    if kind != "ALTER TABLE":
        return [{"table": t, "statement": kind} for t in tables]
    columns = _column_clauses(rest)
    if columns is None:
        return [{"table": t, "statement": "unparsed DDL"} for t in tables]
    return [{"table": t, "statement": kind, "columns": columns} for t in tables]
