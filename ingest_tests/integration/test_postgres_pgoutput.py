"""pgoutput from a real PostgreSQL 15, read through a slot by SQL and decoded (the PostgreSQL source's base)."""

import secrets

import pytest

from ingest.sources.postgres.pgoutput import UNCHANGED, Delete, Insert, Truncate, Update, transactions
from ingest.sources.postgres.slot import advance, current_lsn, peek
from ingest_tests.conftest import free_port


@pytest.fixture(scope="module")
def pg():
    from ingest.localdev.postgres import PostgresServer

    server = PostgresServer(free_port()).start()
    try:
        yield server
    finally:
        server.stop()


def connect(server):
    import psycopg

    return psycopg.connect(host=server.host, port=server.port, user=server.user, password=server.password,
                           dbname="postgres", autocommit=True)


def test_a_slot_gives_whole_transactions_in_commit_order_and_keeps_them_until_advanced(pg):
    with connect(pg) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text, doc text)")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        big = secrets.token_hex(20_000)  # too random to compress inline: TOASTed, so an UPDATE that leaves
        # it alone does not send it
        conn.execute("INSERT INTO t VALUES (1, 'a', %s), (2, 'b', 'small')", (big,))
        with conn.transaction():  # one transaction, two statements
            conn.execute("UPDATE t SET note = 'a2' WHERE id = 1")
            conn.execute("UPDATE t SET id = 3 WHERE id = 2")
        conn.execute("DELETE FROM t WHERE id = 3")
        middle = current_lsn(conn)
        conn.execute("ALTER TABLE t ADD COLUMN added int")
        conn.execute("INSERT INTO t VALUES (4, 'd', NULL, 44)")
        conn.execute("TRUNCATE t")

        first = list(transactions(peek(conn, "s", "pub", middle)))
        assert [len(t.changes) for t in first] == [2, 2, 1]  # nothing that commits after `middle`
        commits = [t.commit.commit_lsn for t in first]
        assert commits == sorted(commits) and all(c < middle for c in commits)
        (rel, ins1), (_, ins2) = first[0].changes
        assert (rel.name, [c.name for c in rel.columns], [c.key for c in rel.columns]) == (
            "t", ["id", "note", "doc"], [True, False, False])
        assert ins1 == Insert(rel.oid, ("1", "a", big)) and ins2 == Insert(rel.oid, ("2", "b", "small"))
        (_, upd), (_, moved) = first[1].changes
        assert upd == Update(rel.oid, ("1", "a2", UNCHANGED))  # silver must keep the old doc
        assert moved == Update(rel.oid, ("3", "b", "small"), ("2", None, None))  # the old key, then the row
        assert first[2].changes[0][1] == Delete(rel.oid, ("3", None, None))

        again = list(transactions(peek(conn, "s", "pub", middle)))  # a peek consumes nothing
        assert [t.commit for t in again] == [t.commit for t in first]

        advance(conn, "s", first[-1].commit.end_lsn)
        rest = list(transactions(peek(conn, "s", "pub")))
        assert [type(c).__name__ for t in rest for _, c in t.changes] == ["Insert", "Truncate"]
        (rel2, ins4), (_, trunc) = rest[0].changes + rest[1].changes
        assert [c.name for c in rel2.columns] == ["id", "note", "doc", "added"]  # the new column list came
        assert ins4.new == ("4", "d", None, "44") and trunc == Truncate((rel.oid,), False, False)
        conn.execute("SELECT pg_drop_replication_slot('s')")
