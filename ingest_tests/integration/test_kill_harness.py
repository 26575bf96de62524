"""The kill harness's short form: SIGKILL at random points of every phase, nothing lost or duplicated.

It replaces the earlier single-point kill tests (a snapshot killed after three
waves, a batch killed after its first bronze commit): the harness kills both
at random points and checks more (checksum, every row, resumption).
"""

import os
import random

from ingest_tests.kill_harness import PHASES, KillHarness


def test_random_sigkills_in_every_phase_lose_and_duplicate_no_row(spark, mariadb, database, root, tmp_path):
    seed = int(os.environ.get("INGEST_KILL_SEED", random.randrange(10 ** 6)))
    with KillHarness(spark, root, mariadb.port, database, tmp_path, seed) as harness:
        report = harness.run(10)
    print(report.summary())
    assert {t.phase for t in report.trials if t.killed} == set(PHASES), report.summary()
    # a snapshot killed after its first committed wave goes on from there instead of starting over
    assert all(t.resumed for t in report.trials if t.phase == "snapshot" and t.killed), report.summary()
    assert all(t.clean for t in report.trials), report.summary()
