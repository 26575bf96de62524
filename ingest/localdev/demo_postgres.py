"""The demo's PostgreSQL source: a small `bank` database in the throwaway PostgreSQL bin/demo starts.

    python -m ingest.localdev.demo_postgres --port 5407   # creates bank.*, the publication, the ingest role
    python -m ingest.localdev.demo_postgres --port 5407 --write-every 3   # then a transfer every 3 s
"""

from __future__ import annotations

import argparse
import os
import sys
import time

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS accounts (
        id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(14,2) NOT NULL,
        opened_at timestamptz NOT NULL, tags text[], notes text)""",
    """CREATE TABLE IF NOT EXISTS transfers (
        id bigint PRIMARY KEY, from_account bigint NOT NULL, to_account bigint NOT NULL,
        amount numeric(14,2) NOT NULL, at timestamptz NOT NULL DEFAULT now(), memo jsonb)""",
]
PUBLICATION = "demo_bank"


def connect(port: int, database: str, password: str, wait: float = 60.0):
    """The superuser's connection, waiting for a server that is still starting."""
    import psycopg

    deadline = time.monotonic() + wait
    while True:
        try:
            return psycopg.connect(host="127.0.0.1", port=port, user="postgres", password=password, dbname=database,
                                   autocommit=True, connect_timeout=3)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def seed(port: int, superuser_password: str, ingest_password: str, accounts: int = 5_000) -> None:
    with connect(port, "postgres", superuser_password) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'bank'").fetchone():
            conn.execute("CREATE DATABASE bank")
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'ingest'").fetchone():
            conn.execute("CREATE ROLE ingest LOGIN REPLICATION")
        conn.execute(f"ALTER ROLE ingest PASSWORD '{ingest_password.replace(chr(39), chr(39) * 2)}'")
    with connect(port, "bank", superuser_password) as conn:
        for ddl in SCHEMA:
            conn.execute(ddl)
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO ingest")
        if not conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (PUBLICATION,)).fetchone():
            conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE accounts, transfers")
        if conn.execute("SELECT count(*) FROM accounts").fetchone()[0]:
            return
        conn.execute("INSERT INTO accounts SELECT g, 'Owner ' || g, 1000 + g %% 97, "
                     "'2026-01-01 00:00+00'::timestamptz + g * interval '1 hour', "
                     "CASE WHEN g %% 3 = 0 THEN ARRAY['vip'] END, NULL FROM generate_series(1, %s) g", (accounts,))


def write_forever(port: int, superuser_password: str, every: float) -> None:
    """A transfer between two accounts every `every` seconds, now and then a long note (TOASTed, so later
    updates of the account do not send it)."""
    import random

    rng = random.Random()
    with connect(port, "bank", superuser_password) as conn:
        while True:
            n = conn.execute("SELECT count(*) FROM accounts").fetchone()[0]
            a, b, amount = rng.randint(1, n), rng.randint(1, n), round(rng.uniform(1, 200), 2)
            with conn.transaction():
                next_id = conn.execute("SELECT COALESCE(max(id), 0) + 1 FROM transfers").fetchone()[0]
                conn.execute("INSERT INTO transfers (id, from_account, to_account, amount, memo) "
                             "VALUES (%s, %s, %s, %s, %s::jsonb)", (next_id, a, b, amount, '{"channel": "demo"}'))
                conn.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a))
                conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, b))
            if rng.random() < 0.1:
                conn.execute("UPDATE accounts SET notes = %s WHERE id = %s",
                             (os.urandom(6000).hex(), rng.randint(1, n)))
            time.sleep(every)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.localdev.demo_postgres", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=5407)
    parser.add_argument("--password-env", default="DEMO_PG_PASSWORD", help="the ingest role's password")
    parser.add_argument("--superuser-password", default="postgres", help="of the throwaway server (loopback only)")
    parser.add_argument("--write-every", type=float, default=None, metavar="SECONDS")
    args = parser.parse_args(argv)
    password = os.environ.get(args.password_env)
    if not password:
        print(f"{args.password_env} is not set: it is the demo ingest role's password", file=sys.stderr)
        return 2
    seed(args.port, args.superuser_password, password)
    print(f"demo PostgreSQL on 127.0.0.1:{args.port}: database bank seeded, publication {PUBLICATION}")
    if args.write_every:
        write_forever(args.port, args.superuser_password, args.write_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
