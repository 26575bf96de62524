"""What a row filter costs a MySQL change batch read in its run (issue 50).

A filtered table's batch asks the server to judge each change's images (ingest/sources/mysql/filters.py:
a temporary table of the table's columns, the images inserted, the predicate selecting from it). A
throwaway MariaDB, the benchmarks' orders table (11 mixed columns); a transaction of N updates (so 2N
images), then the batch read as the run reads it, with and without the filter, alternating, and the
filter's own time against the read's in the same run:

    .venv/bin/python bench/filter_cost.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_port  # noqa: E402
from bench.mysql_bench import DATABASE, load_table, setup_database  # noqa: E402

SIZES = (100, 10_000)
ROUNDS = 5
WHERE = "status IN ('paid', 'shipped')"


def main() -> None:
    from ingest.filters import RowFilter
    from ingest.localdev.mariadb import MariaDBServer
    from ingest.sources.mysql.binlog import master_position
    from ingest.sources.mysql.cdc import read_change_batch
    from ingest.sources.mysql.filters import filter_batch
    from ingest.sources.mysql.positions import BatchRange
    from ingest.sources.mysql.schema import describe_table

    server = MariaDBServer(Path(tempfile.mkdtemp()) / "mdb", free_port())
    server.start()
    try:
        params = setup_database(server)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("GRANT CREATE TEMPORARY TABLES ON *.* TO 'bench'@'127.0.0.1'")
        load_table(server, "orders", max(SIZES))
        with params.connect() as conn:
            schema = describe_table(conn, DATABASE, "orders")
        row_filter = {"orders": RowFilter("orders", WHERE)}
        for n in SIZES:
            with server.connect(database=DATABASE) as conn, conn.cursor() as cur:
                start = master_position(conn)
                cur.execute(f"UPDATE orders SET qty = qty + 1 WHERE id <= {n}")
                end = master_position(conn)
            key = BatchRange(start, end).key
            reads, judged = [], []
            for _ in range(ROUNDS):
                began = time.perf_counter()
                batch = read_change_batch(params, "bench", key, {"orders": schema.captured()},
                                          parallel_min_bytes=2**62)
                reads.append(time.perf_counter() - began)
                began = time.perf_counter()
                kept = filter_batch(params, batch, {"orders": schema}, row_filter)
                judged.append(time.perf_counter() - began)
            read, judge = statistics.median(reads), statistics.median(judged)
            print(f"filter_judge_{n}_updates: {judge:.3f} s ({2 * n / judge:,.0f} images/s), baseline "
                  f"batch_read_same_changes {read:.3f} s, ratio {judge / read:.2f} "
                  f"({len(kept.tables['orders'].records)} of {n} changes kept)", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
