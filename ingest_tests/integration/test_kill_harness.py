"""The kill harness's short form: SIGKILL at random points of every phase, nothing lost or duplicated.

It replaces the earlier single-point kill tests (a snapshot killed after three
waves, a batch killed after its first bronze commit): the harness kills both
at random points and checks more (checksum, every row, resumption).
"""

import os
import random
from pathlib import Path

from ingest_tests.kill_harness import PHASES, KillHarness

ROOT = Path(__file__).resolve().parents[2]


def test_random_sigkills_in_every_phase_lose_and_duplicate_no_row(spark, mariadb, database, root, tmp_path):
    seed = int(os.environ.get("INGEST_KILL_SEED", random.randrange(10 ** 6)))
    with KillHarness(spark, root, mariadb.port, database, tmp_path, seed) as harness:
        # each phase once, again where the run finished before its kill point: every phase is killed
        report = harness.run(len(PHASES), retry_missed=3)
    print(report.summary())
    assert {t.phase for t in report.trials if t.killed} == set(PHASES), report.summary()
    # a snapshot killed after its first committed wave goes on from there instead of starting over
    assert all(t.resumed for t in report.trials if t.phase == "snapshot" and t.killed), report.summary()
    # a run whose Spark Connect server was killed failed by itself, saying so (no hang, no gRPC riddle)
    assert all(t.failed_naming_server for t in report.trials if t.phase == "server" and t.killed), report.summary()
    assert all(t.clean for t in report.trials), report.summary()


def test_runs_killed_or_canceled_under_the_daemon_are_recovered_by_the_sensor_alone(
        spark, mariadb, database, root, tmp_path, dagster_postgres):
    """dagster-daemon with the binlog sensor on; each trial kills the run the sensor launched at one point
    (before any write, mid-bronze, after bronze and before silver, mid-silver) or stops and cancels it.
    Nothing but the sensor runs the batch again; every trial ends with nothing lost, extra, stale or
    duplicated. The instance is the multi-machine one: the shipped dagster.yaml with
    dagster-postgres.yaml appended (runs, events and sensor state in PostgreSQL); the other tests that
    start Dagster processes use the SQLite default."""
    from ingest_tests.kill_harness import SENSOR_POINTS, SensorRecoveryHarness

    seed = int(os.environ.get("INGEST_KILL_SEED", random.randrange(10 ** 6)))
    instance_yaml = (ROOT / "deploy" / "dagster.yaml").read_text() + (ROOT / "deploy" / "dagster-postgres.yaml").read_text()
    with SensorRecoveryHarness(spark, root, mariadb.port, database, tmp_path, seed,
                               instance_yaml=instance_yaml) as harness:
        report = harness.run(len(SENSOR_POINTS))
        instance = harness.h.instance
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        # run monitoring ran against it: its daemon's heartbeat is in PostgreSQL
        assert "MONITORING" in instance.get_daemon_heartbeats()
    print(report.summary())
    assert {t.phase for t in report.trials if t.killed} == set(SENSOR_POINTS), report.summary()
    # the killed run's batch was completed by a later run the sensor launched, not skipped
    assert all(t.recovered_by for t in report.trials if t.killed), report.summary()
    # a worker killed with its code server: only the sensor could mark its run failed, and did
    for t in report.trials:
        if t.phase == "reboot" and t.killed:
            assert t.ended_as.startswith("FAILURE") and "worker process" in t.ended_as, t.ended_as
    assert all(t.clean for t in report.trials), report.summary()

