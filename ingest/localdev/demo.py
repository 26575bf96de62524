"""The demo source: a small shop database in the throwaway MariaDB.

    python -m ingest.localdev.demo --port 3407   # creates shop.*, the ingest user; idempotent
    python -m ingest.localdev.demo --port 3407 --write-every 2   # then a small transaction every 2 s
"""

from __future__ import annotations

import argparse
import os
import sys

from ingest.localdev.mariadb import MariaDBServer

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS customers (
        id INT UNSIGNED PRIMARY KEY, name VARCHAR(100) NOT NULL, email VARCHAR(200),
        tier ENUM('free','pro','enterprise') NOT NULL DEFAULT 'free', tags SET('new','vip','churn-risk'),
        created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))""",
    """CREATE TABLE IF NOT EXISTS products (
        sku VARCHAR(32) PRIMARY KEY, title VARCHAR(200) NOT NULL, price DECIMAL(12,2) NOT NULL,
        attributes JSON, active BIT(1) NOT NULL DEFAULT b'1')""",
    """CREATE TABLE IF NOT EXISTS orders (
        id BIGINT UNSIGNED PRIMARY KEY, customer_id INT UNSIGNED NOT NULL, ordered_at DATETIME(6) NOT NULL,
        status ENUM('new','paid','shipped','cancelled') NOT NULL, total DECIMAL(14,2) NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS order_lines (
        order_id BIGINT UNSIGNED NOT NULL, line_no SMALLINT UNSIGNED NOT NULL, sku VARCHAR(32) NOT NULL,
        qty INT NOT NULL, unit_price DECIMAL(12,2) NOT NULL, PRIMARY KEY (order_id, line_no))""",
]


CUSTOMER_ORDERS = ("SELECT c.id, COUNT(o.id), COALESCE(SUM(CASE WHEN o.status <> 'cancelled' THEN o.total END), 0) "
                   "FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id")
"""What dbt_project's `customer_orders` mart holds (customer, orders, revenue), as the shop database
computes it from its live rows: what the tests check the mart against."""

def seed(server: MariaDBServer, database: str = "shop", customers: int = 2_000, orders: int = 20_000) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        cur.execute(f"USE `{database}`")
        for ddl in SCHEMA:
            cur.execute(ddl)
        cur.execute("SELECT COUNT(*) FROM customers")
        if cur.fetchone()[0]:
            return
        cur.execute(
            f"INSERT INTO customers (id, name, email, tier, tags) SELECT seq, CONCAT('Customer ', seq), "
            f"CONCAT('c', seq, '@example.com'), ELT(1 + seq % 3, 'free','pro','enterprise'), "
            f"ELT(1 + seq % 4, '', 'new', 'vip', 'new,churn-risk') FROM seq_1_to_{customers}")
        cur.execute(
            "INSERT INTO products SELECT CONCAT('SKU-', LPAD(seq, 4, '0')), CONCAT('Product ', seq), "
            "ROUND(1 + seq * 1.37, 2), JSON_OBJECT('color', ELT(1 + seq % 3, 'red','green','blue')), "
            "seq % 5 <> 0 FROM seq_1_to_200")
        cur.execute(
            f"INSERT INTO orders SELECT seq, 1 + seq % {customers}, "
            "TIMESTAMP('2026-01-01') + INTERVAL seq MINUTE, ELT(1 + seq % 4, 'new','paid','shipped','cancelled'), "
            f"0 FROM seq_1_to_{orders}")
        cur.execute(
            f"INSERT INTO order_lines SELECT o.seq, l.seq, CONCAT('SKU-', LPAD(1 + (o.seq * l.seq) % 200, 4, '0')), "
            f"1 + (o.seq + l.seq) % 5, ROUND(1 + ((o.seq * l.seq) % 200) * 1.37, 2) "
            f"FROM seq_1_to_{orders} o JOIN seq_1_to_3 l")
        cur.execute("UPDATE orders o JOIN (SELECT order_id, SUM(qty * unit_price) s FROM order_lines "
                    "GROUP BY order_id) l ON l.order_id = o.id SET o.total = l.s")


def write_forever(server: MariaDBServer, every: float, database: str = "shop") -> None:
    """Small shop transactions, one every `every` seconds, so the binlog sensor has work."""
    import random
    import time

    rng = random.Random()
    conn = server.connect(database=database)
    with conn, conn.cursor() as cur:
        while True:
            cur.execute("BEGIN")
            cur.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM orders")
            order = cur.fetchone()[0]
            cur.execute("INSERT INTO orders VALUES (%s, %s, UTC_TIMESTAMP(6), 'new', 0)",
                        (order, rng.randint(1, 2000)))
            for line in range(1, rng.randint(2, 4)):
                cur.execute("INSERT INTO order_lines VALUES (%s, %s, %s, %s, %s)",
                            (order, line, f"SKU-{rng.randint(1, 200):04d}", rng.randint(1, 5), rng.randint(100, 9999) / 100))
            cur.execute("UPDATE orders SET total = (SELECT SUM(qty * unit_price) FROM order_lines WHERE order_id = %s) "
                        "WHERE id = %s", (order, order))
            cur.execute("UPDATE orders SET status = 'paid' WHERE id = %s", (rng.randint(1, order),))
            if rng.random() < 0.2:
                cur.execute("DELETE FROM order_lines WHERE order_id = %s", (rng.randint(1, order),))
            cur.execute("COMMIT")
            time.sleep(every)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.localdev.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datadir", default=None)
    parser.add_argument("--port", type=int, default=3407)
    parser.add_argument("--password-env", default="DEMO_MYSQL_PASSWORD")
    parser.add_argument("--write-every", type=float, default=None, metavar="SECONDS",
                        help="after seeding, keep writing a small transaction every SECONDS (runs until stopped)")
    args = parser.parse_args(argv)
    from ingest.paths import local_dir

    server = MariaDBServer(args.datadir or local_dir() / "demo-mariadb", args.port)
    server.start()
    password = os.environ.get(args.password_env)
    if not password:
        print(f"{args.password_env} is not set: it is the demo ingest user's password", file=sys.stderr)
        return 2
    server.create_ingest_user("ingest", password)
    seed(server)
    print(f"demo MariaDB on 127.0.0.1:{args.port} (pid {server.pid()}), database shop seeded")
    if args.write_every:
        write_forever(server, args.write_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
