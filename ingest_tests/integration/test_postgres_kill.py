"""The kill harness's short form on a `kind: postgres` source (its own file, so that the two xdist workers
run it beside the MySQL kill tests)."""

import os
import random

from ingest_tests.kill_harness import PHASES

PG_PHASES = tuple(p for p in PHASES if p != "server")


def test_random_sigkills_on_a_postgres_source_lose_and_duplicate_no_row(spark, pg, tmp_path, monkeypatch):
    """The same phases on a `kind: postgres` source: the snapshot killed mid-way resumes at a new exported
    snapshot, a batch killed anywhere is read again from the slot (confirmed only after the batch log)."""
    from ingest_tests.kill_harness import PostgresKillHarness

    seed = int(os.environ.get("INGEST_KILL_SEED", random.randrange(10 ** 6)))
    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    database = pg.create_database("killh")
    with pg.connect(database) as root, PostgresKillHarness(spark, root, pg.port, database, tmp_path, seed) as harness:
        # not the server phase: a lost Spark server is the IO manager's to report, the same for every
        # source, and the MySQL harness covers it (each server trial costs two JVM starts)
        report = harness.run(len(PHASES) - 1, retry_missed=3, phases=PG_PHASES)
    print(report.summary())
    assert {t.phase for t in report.trials if t.killed} == set(PG_PHASES), report.summary()
    assert all(t.resumed for t in report.trials if t.phase == "snapshot" and t.killed), report.summary()
    assert all(t.clean for t in report.trials), report.summary()
