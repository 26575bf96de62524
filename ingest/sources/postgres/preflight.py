"""What would stop a PostgreSQL source, found before anything runs: the server's logical decoding
settings, the role's rights, the publication, and per table its existence, key and membership.
Every finding names the thing and the fix. `findings` is pure; `gather` asks the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ingest.sources.findings import FAIL, OK, Finding
from ingest.sources.postgres.schema import quoted


@dataclass(frozen=True)
class ServerFacts:
    wal_level: str
    max_replication_slots: int
    slots_used: int
    can_replicate: bool
    """The role has REPLICATION (or is a superuser): it may create and read slots."""
    publication: bool
    """The source's publication exists."""
    publishes_all: bool
    """It is FOR ALL TABLES."""


@dataclass(frozen=True)
class TableFacts:
    name: str
    """schema.table"""
    exists: bool
    primary_key: bool = False
    replica_identity: str = "d"
    published: bool = False
    can_select: bool = False


def findings(source: str, publication: str, server: ServerFacts, tables: Sequence[TableFacts]) -> list[Finding]:
    """Every problem, and an ok line for what is fine (pure)."""
    subject = f"source {source}"
    out: list[Finding] = []
    if server.wal_level != "logical":
        out.append(Finding(FAIL, subject, f"wal_level is {server.wal_level!r}: logical decoding needs 'logical'. "
                                          "Fix: ALTER SYSTEM SET wal_level = logical, then restart the server"))
    if server.slots_used >= server.max_replication_slots:
        out.append(Finding(FAIL, subject, f"all {server.max_replication_slots} replication slots are in use. Fix: "
                                          "raise max_replication_slots (restart), or drop a slot nobody reads"))
    if not server.can_replicate:
        out.append(Finding(FAIL, subject, "the role may not use replication slots. Fix: ALTER ROLE <user> "
                                          "REPLICATION (as a superuser)"))
    if not server.publication:
        out.append(Finding(FAIL, subject, f"publication {publication!r} does not exist. Fix: CREATE PUBLICATION "
                                          f"{publication} FOR TABLE <the source's tables>"))
    for t in tables:
        if not t.exists:
            out.append(Finding(FAIL, t.name, "no such table. Fix: create it, or take it out of tables.include"))
            continue
        if not t.primary_key:
            how = {"f": "REPLICA IDENTITY FULL", "n": "REPLICA IDENTITY NOTHING", "i": "a replica identity index"
                   }.get(t.replica_identity, "no replica identity")
            out.append(Finding(FAIL, t.name, f"no primary key ({how}): silver merges by key. Fix: add a primary "
                                             "key, or exclude the table"))
        if server.publication and not (t.published or server.publishes_all):
            out.append(Finding(FAIL, t.name, f"not in publication {publication!r}: its changes would never come. "
                                             f"Fix: ALTER PUBLICATION {publication} ADD TABLE {t.name}"))
        if not t.can_select:
            out.append(Finding(FAIL, t.name, "the role may not SELECT it (the snapshot reads it). Fix: GRANT "
                                             f"SELECT ON {t.name} TO <user>"))
    if not out:
        out.append(Finding(OK, subject, f"logical decoding ready: {len(tables)} table(s) in {publication!r}"))
    return out


def gather(conn, publication: str, tables: Sequence[str]) -> tuple[ServerFacts, list[TableFacts]]:
    """The facts `findings` judges, from the catalog (tables as schema.table)."""
    def one(sql: str, *args):
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()

    wal_level, = one("SELECT current_setting('wal_level')")
    max_slots, = one("SELECT current_setting('max_replication_slots')::int")
    used, = one("SELECT count(*) FROM pg_replication_slots")
    can_replicate, = one("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
    pub = one("SELECT puballtables FROM pg_publication WHERE pubname = %s", publication)
    server = ServerFacts(wal_level, max_slots, used, bool(can_replicate), pub is not None, bool(pub and pub[0]))
    facts = []
    for name in tables:
        oid = one("SELECT to_regclass(%s)::oid", quoted(name))[0]
        if oid is None:
            facts.append(TableFacts(name, False))
            continue
        identity, = one("SELECT relreplident FROM pg_class WHERE oid = %s", oid)
        has_key, = one("SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = %s AND indisprimary)", oid)
        published, = one("SELECT EXISTS (SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = "
                         "r.prpubid WHERE p.pubname = %s AND r.prrelid = %s)", publication, oid)
        can_select, = one("SELECT has_table_privilege(%s::oid, 'SELECT')", oid)
        facts.append(TableFacts(name, True, bool(has_key), identity, bool(published), bool(can_select)))
    return server, facts
