"""Kill harness: SIGKILL a sync at random points, re-run it, and count lost and duplicated rows.

Each trial writes a random mix of inserts, updates, key changes and deletes
to a MariaDB table that is already being synced, starts the next step as a
real `dagster asset materialize` process (a re-snapshot, or a change batch
with its silver merge), and kills its whole process group (driver and JVM)
with SIGKILL at a random point of one phase:

  bronze     when the bronze append starts, plus up to 2.5 s
  snapshot   after 1 to 3 committed snapshot waves (of 16), plus up to 0.4 s
  silver     when the silver step starts, plus up to 3 s
  committed  right after a Delta commit (bronze or silver) is logged, before
             Dagster records the materialization
  server     the Spark Connect server (not the run) killed when the bronze append
             or the silver step starts, plus up to 2 s: the run uses the embedded
             local server of its own state folder, must fail by itself naming the
             server, and a new run starts a new server and completes the batch

Then it re-runs the same step to completion (in this process, as a retry
would), lets the sensor plan and run whatever is left, and compares silver's
live rows with the source: a checksum of all live rows (MariaDB and Spark
each compute it), and row by row: source rows missing from silver (lost),
keys silver holds twice or changes bronze holds twice (duplicated), rows
silver holds that the source deleted (extra) and rows with other values
(wrong).

Short form: `ingest_tests/integration/test_kill_harness.py` (8 trials, in
`bin/test`). Long form, with its own MariaDB and Spark:

    .venv/bin/python -m ingest_tests.kill_harness --trials 100 [--seed N] [--postgres]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from ingest_tests.probes import parent_pid as _parent, wait_for

ROOT = Path(__file__).resolve().parents[1]
DAGSTER = str(Path(sys.executable).parent / "dagster")
PHASES = ("bronze", "silver", "committed", "snapshot", "server")
TABLE = "kh"
COLUMNS = ("id", "v", "s", "d")
ROWS = 8_000
CHUNK = 500


@dataclass
class Trial:
    number: int
    phase: str
    point: str = ""
    killed: bool = False
    """False when the step finished before the kill point came."""
    resumed: bool = False
    """A snapshot trial's retry went on from the killed run's last committed wave."""
    commit_without_event: bool = False
    """A Delta commit of the step landed but Dagster recorded no materialization for it."""
    failed_naming_server: bool = False
    """A server trial's run failed by itself, with the message that names the lost server."""
    lost: int = 0
    duplicated: int = 0
    extra: int = 0
    wrong: int = 0
    checksum_equal: bool = False
    seconds: float = 0.0

    def line(self) -> str:
        return (f"  trial {self.number:3d} {self.phase:9s} {'killed' if self.killed else 'finished first':14s} "
                f"{self.point:44s} lost {self.lost} dup {self.duplicated} extra {self.extra} wrong {self.wrong} "
                f"{'ok' if self.checksum_equal else 'CHECKSUM DIFFERS'} ({self.seconds:.0f} s)"
                + (" run failed naming the server" if self.failed_naming_server else ""))

    @property
    def clean(self) -> bool:
        return self.checksum_equal and not (self.lost or self.duplicated or self.extra or self.wrong)


@dataclass
class Report:
    seed: int
    trials: list[Trial] = field(default_factory=list)
    phases: tuple[str, ...] = PHASES

    def summary(self) -> str:
        by_phase = Counter(t.phase for t in self.trials if t.killed)
        lines = [f"kill harness, seed {self.seed}: {len(self.trials)} trials, "
                 f"{sum(t.killed for t in self.trials)} killed mid-step "
                 f"({', '.join(f'{p} {by_phase[p]}' for p in self.phases)}), "
                 f"{sum(t.commit_without_event for t in self.trials)} with a Delta commit and no Dagster event, "
                 f"{sum(t.resumed for t in self.trials)} snapshots resumed from their last committed wave",
                 f"rows lost {sum(t.lost for t in self.trials)}, duplicated {sum(t.duplicated for t in self.trials)}, "
                 f"extra {sum(t.extra for t in self.trials)}, wrong {sum(t.wrong for t in self.trials)}, "
                 f"checksum mismatches {sum(not t.checksum_equal for t in self.trials)}"]
        return "\n".join([*lines, *(t.line() for t in self.trials)])


class KillHarness:
    """One synced table, its Dagster instance and lake under `workdir`, and the trials run on it."""

    logged_table = TABLE
    """The table as the snapshot's log lines name it."""

    def __init__(self, spark, root_conn, port: int, database: str, workdir: Path, seed: int, **source_settings):
        from ingest_tests.integration.cdc_harness import dagster_env

        self.spark, self.root, self.rng, self.seed = spark, root_conn, random.Random(seed), seed
        self.workdir = workdir
        self.sources = self.write_sources(port, database, **source_settings)
        self.env = dagster_env(workdir, self.sources)
        self.lake = workdir / "lake"
        self.next_id = ROWS + 1
        self._stack = ExitStack()

    def write_sources(self, port: int, database: str, **source_settings) -> Path:
        from ingest_tests.integration.cdc_harness import write_sources

        return write_sources(self.workdir, port, database, [TABLE],
                             snapshot={"chunk_size": CHUNK, "parallelism": 2, "chunks_per_commit": 1},
                             **source_settings)

    def create_table(self) -> None:
        with self.root.cursor() as cur:
            cur.execute(f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, v INT, s VARCHAR(40), d DECIMAL(12,2))")
            cur.execute(f"INSERT INTO {TABLE} SELECT seq, seq % 97, CONCAT('row ', seq), seq / 8 "
                        f"FROM seq_1_to_{ROWS}")

    def source_rows(self) -> list[tuple]:
        with self.root.cursor() as cur:
            cur.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE}")
            return [tuple(r) for r in cur.fetchall()]

    def execute(self, sql: str, args: tuple = ()) -> None:
        with self.root.cursor() as cur:
            cur.execute(sql, args)

    def __enter__(self) -> KillHarness:
        from ingest_tests.integration.cdc_harness import CdcHarness, instance_at

        instance = self._stack.enter_context(instance_at(self.env))
        self.h = CdcHarness(self.spark, self.sources, self.lake, instance)
        self.create_table()
        self.h.snapshot()
        self.h.sync()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
        self._stop_embedded_server()  # a server trial's, if one ran (stopped by its PID)

    # ------------------------------------------------------------ source

    def write_workload(self, ops: int = 300) -> None:
        """Random inserts, updates, primary-key changes and deletes, in a few transactions."""
        ids = [r[0] for r in self.source_rows()]
        for _ in range(ops):
            kind = self.rng.random()
            if kind < 0.3 or not ids:
                self.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s)",
                             (self.next_id, self.rng.randrange(1000), f"new {self.next_id}",
                              self.rng.randrange(10 ** 6) / 100))
                ids.append(self.next_id)
                self.next_id += 1
            elif kind < 0.75:
                self.execute(f"UPDATE {TABLE} SET v = %s, s = %s WHERE id = %s",
                             (self.rng.randrange(1000), f"upd {self.rng.random():.6f}", self.rng.choice(ids)))
            elif kind < 0.8:
                old = ids.pop(self.rng.randrange(len(ids)))
                self.execute(f"UPDATE {TABLE} SET id = %s WHERE id = %s", (self.next_id, old))
                ids.append(self.next_id)
                self.next_id += 1
            else:
                self.execute(f"DELETE FROM {TABLE} WHERE id = %s", (ids.pop(self.rng.randrange(len(ids))),))

    # ------------------------------------------------------------ trials

    def run(self, trials: int, log=print, retry_missed: int = 0, phases: tuple[str, ...] = PHASES) -> Report:
        """`trials` trials, the `phases` in turn; then, for a phase none of them killed (the run
        finished before its random kill point), up to `retry_missed` more trials of it."""
        report = Report(self.seed, phases=phases)
        for number, phase in enumerate((phases[n % len(phases)] for n in range(trials)), start=1):
            report.trials.append(self.trial(number, phase))
            log(report.trials[-1].line())
        for phase in phases:
            for _ in range(retry_missed):
                if any(t.killed for t in report.trials if t.phase == phase):
                    break
                report.trials.append(self.trial(len(report.trials) + 1, phase))
                log(report.trials[-1].line())
        return report

    def trial(self, number: int, phase: str) -> Trial:
        from dagster import AssetKey

        started = time.monotonic()
        trial = Trial(number, phase)
        self.write_workload()
        if phase == "snapshot":
            selection, partition = [AssetKey(["src", TABLE, "snapshot"])], None
        else:
            partition = self.h.add_batch()
            selection = [AssetKey(["src", TABLE, "changes"]), AssetKey(["src", TABLE])]
        before = self._commit_versions()
        marker, delay = self._kill_point(phase)
        trial.point = f"{marker.pattern[:28]} +{delay:.2f}s"
        if phase == "server":
            trial.killed, trial.failed_naming_server = self._kill_server(selection, partition, marker, delay, number)
            trial.commit_without_event = self._commit_without_event(before, selection, partition)
            # the retry is a new run on the same embedded server folder: it starts the server again
            retry_log = self.workdir / f"trial-{number:03d}-retry.log"
            if self._materialize(selection, partition, retry_log, self._embedded_env()).wait() != 0:
                raise AssertionError(f"the run after the server was killed failed: see {retry_log}")
            while self.h.sync():
                pass
            self._compare(trial)
            trial.seconds = time.monotonic() - started
            return trial
        trial.killed = self._run_and_kill(selection, partition, marker, delay, number)
        trial.commit_without_event = self._commit_without_event(before, selection, partition)
        retry = self.h.run(selection, partition)
        if phase == "snapshot":
            (materialization,) = retry.asset_materializations_for_node(f"src__{TABLE}__snapshot")
            trial.resumed = materialization.metadata["resumed_from_wave"].value >= 0
        while self.h.sync():  # whatever the sensor plans next, until silver is at the head
            pass
        self._compare(trial)
        trial.seconds = time.monotonic() - started
        return trial

    def _kill_point(self, phase: str) -> tuple[re.Pattern, float]:
        if phase == "snapshot":
            waves = self.rng.randrange(1, 4)
            return re.compile(rf"snapshot {self.logged_table}: {waves}/\d+ chunks"), self.rng.uniform(0, 0.4)
        if phase == "bronze":
            return re.compile(rf"bronze src/{TABLE} batch \S+: appending"), self.rng.uniform(0, 2.5)
        if phase == "silver":
            return re.compile(rf"silver src/{TABLE} batch \S+: merging"), self.rng.uniform(0, 3.0)
        if phase == "server":
            which = self.rng.choice([rf"bronze src/{TABLE} batch \S+: appending", rf"silver src/{TABLE} batch \S+: merging"])
            return re.compile(which), self.rng.uniform(0, 2.0)
        which = self.rng.choice([rf"bronze src/{TABLE} batch \S+: committed", rf"silver src/{TABLE}: merged batch"])
        return re.compile(which), 0.0

    def _materialize(self, selection, partition, log_path: Path, env: dict[str, str] | None = None):
        """`dagster asset materialize` of `selection` as its own process (group), output to `log_path`."""
        cmd = [DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions",
               "--select", ",".join(k.to_user_string() for k in selection)]
        if partition:
            cmd += ["--partition", partition]
        with open(log_path, "w") as out:
            return subprocess.Popen(cmd, cwd=ROOT, env=env or self.env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def _embedded_env(self) -> dict[str, str]:
        """The runs' environment with the embedded local Spark Connect server of the harness's own folder
        instead of the shared server (which other tests use: it must not be killed). It lives one trial, so
        its JVM compiles with C1 alone (connect.SHORT_LIVED_SERVER_OPTIONS)."""
        from ingest.lake.connect import SHORT_LIVED_SERVER_OPTIONS

        settings = self.workdir / "embedded-spark.conf"
        settings.write_text(f"spark.driver.extraJavaOptions {SHORT_LIVED_SERVER_OPTIONS}\n")
        env = {k: v for k, v in self.env.items() if k != "INGEST_SPARK_REMOTE"}
        env |= {"INGEST_SPARK_STATE_DIR": str(self.workdir / "embedded-spark"), "INGEST_SPARK_CONF": str(settings)}
        return env

    def _kill_server(self, selection, partition, marker: re.Pattern, delay: float, number: int) -> tuple[bool, bool]:
        """Run the step on the embedded server, SIGKILL the server at the kill point, and wait for the run to
        fail by itself: (killed while the run went on, the run's output names the lost server)."""
        from ingest.lake.connect import read_state

        log_path = self.workdir / f"trial-{number:03d}.log"
        proc = self._materialize(selection, partition, log_path, self._embedded_env())
        try:
            deadline = time.monotonic() + 600
            while not marker.search(log_path.read_text()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    return False, False
                time.sleep(0.02)
            time.sleep(delay)
            state = read_state(Path(self._embedded_env()["INGEST_SPARK_STATE_DIR"]))
            if proc.poll() is not None or state is None:
                return False, False
            os.killpg(state.pid, signal.SIGKILL)
            proc.wait(timeout=180)  # the run fails by itself, in seconds (no hang on the lost server)
            return True, proc.returncode != 0 and "stopped answering during this step" in log_path.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def _stop_embedded_server(self) -> None:
        from ingest.lake.connect import stop_local

        stop_local(Path(self._embedded_env()["INGEST_SPARK_STATE_DIR"]))

    def _run_and_kill(self, selection, partition, marker: re.Pattern, delay: float, number: int) -> bool:
        log_path = self.workdir / f"trial-{number:03d}.log"
        proc = self._materialize(selection, partition, log_path)
        try:
            deadline = time.monotonic() + 600
            while not marker.search(log_path.read_text()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
            time.sleep(delay)
            return proc.poll() is None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    # ------------------------------------------------------------ checks

    def _paths(self) -> dict[str, str]:
        from ingest.lake.tables import table_location

        return {layer: table_location(str(self.lake), "src", TABLE, layer) for layer in ("snapshot", "bronze", "silver")}

    def _commit_versions(self) -> dict[str, int | None]:
        from ingest.lake.deltalog import table_version

        return {layer: table_version(path) for layer, path in self._paths().items()}

    def _commit_without_event(self, before: dict, selection, partition) -> bool:
        """Did the killed step commit to Delta without Dagster recording the materialization?"""
        from dagster import AssetRecordsFilter

        after = self._commit_versions()
        for key in selection:
            layer = {"snapshot": "snapshot", "changes": "bronze"}.get(key.path[-1], "silver")  # src/kh is silver
            if after[layer] == before[layer]:
                continue
            records = self.h.instance.fetch_materializations(
                AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1).records
            newest = records[0].asset_materialization.metadata.get("delta_version") if records else None
            if newest is None or newest.value != after[layer]:
                return True
        return False

    def _compare(self, trial: Trial) -> None:
        from pyspark.sql import functions as F

        from ingest.lake.merge import live_rows

        import zlib

        source_rows = self.source_rows()
        source = {r[0]: r for r in source_rows}
        source_sum = (len(source_rows), sum(zlib.crc32("|".join(str(v) for v in r if v is not None).encode())
                                            for r in source_rows))
        paths = self._paths()
        silver = live_rows(self.spark.read.format("delta").load(paths["silver"]))
        row = silver.agg(F.count(F.lit(1)), F.coalesce(F.sum(F.crc32(F.concat_ws("|", *[
            F.col(c).cast("string") for c in COLUMNS]))), F.lit(0))).first()
        trial.checksum_equal = (int(row[0]), int(row[1])) == source_sum
        rows = [tuple(r) for r in silver.select(*COLUMNS).collect()]
        keys = Counter(r[0] for r in rows)
        bronze = self.spark.read.format("delta").load(paths["bronze"])
        bronze_dups = bronze.count() - bronze.select("_pos").distinct().count()
        trial.duplicated = sum(n - 1 for n in keys.values()) + bronze_dups
        trial.lost = len(source.keys() - keys.keys())
        trial.extra = len(keys.keys() - source.keys())
        trial.wrong = sum(1 for r in rows if r[0] in source and source[r[0]] != r)


class PostgresKillHarness(KillHarness):
    """The same trials on a `kind: postgres` source: its snapshot at an exported snapshot, its batches read
    from the slot and confirmed by the sensor only after the batch log."""

    logged_table = f"public.{TABLE}"

    def write_sources(self, port: int, database: str, **source_settings) -> Path:
        import yaml

        path = self.workdir / "sources.yaml"
        path.write_text(yaml.safe_dump({"sources": {"src": {
            "kind": "postgres", "host": "127.0.0.1", "port": port, "user": "postgres",
            "password_env": "INGEST_TEST_PG_PASSWORD", "database": database, "publication": "kh_pub",
            "slot": "kh_slot", "tables": {"include": [TABLE]},
            "snapshot": {"chunk_size": CHUNK, "parallelism": 2, "chunks_per_commit": 1}, **source_settings}}}))
        return path

    def create_table(self) -> None:
        self.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, v int, s varchar(40), d numeric(12,2))")
        self.execute(f"INSERT INTO {TABLE} SELECT g, g % 97, 'row ' || g, round(g / 8.0, 2) "
                     f"FROM generate_series(1, {ROWS}) g")
        self.execute(f"CREATE PUBLICATION kh_pub FOR TABLE {TABLE}")

    def source_rows(self) -> list[tuple]:
        return [tuple(r) for r in self.root.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE}").fetchall()]

    def execute(self, sql: str, args: tuple = ()) -> None:
        self.root.execute(sql, args or None)


# ---------------------------------------------------------------- recovery by the sensor alone

SENSOR_POINTS = ("before_write", "mid_bronze", "after_bronze", "mid_silver", "cancel", "reboot")


@dataclass
class SensorTrial(Trial):
    run_id: str = ""
    recovered_by: str = ""
    """The run that completed the killed run's batch (launched by the sensor)."""
    ended_as: str = ""
    """How the killed run ended: its status and the message of its failure."""

    def line(self) -> str:
        return super().line() + f" recovered by {self.recovered_by[:8] or 'NONE'}"


class SensorRecoveryHarness(KillHarness):
    """Trials where a batch run that the daemon's sensor launched is killed (SIGKILL of its run worker
    and the worker's JVM) or stuck (SIGSTOP) and canceled, as a user unblocking the sensor would, and
    nothing but `dagster-daemon` with the sensor recovers: no re-run by the harness. Each trial ends when
    the batch log covers the binlog head, then compares silver with the source row by row.

    Kill points: before_write (the run started, nothing written yet), mid_bronze (during the bronze
    append), after_bronze (right after bronze committed, before silver), mid_silver (during the silver
    step), cancel (stopped at a random point, then marked canceled), reboot (the run worker killed with
    the code server that watched it, mid-bronze or mid-silver: nothing marks the run failed, so the
    sensor must see that its worker is gone)."""

    def __init__(self, *args, instance_yaml: str | None = None):
        """`instance_yaml`: the instance's dagster.yaml (default: the shipped one)."""
        super().__init__(*args, cdc={"min_interval_seconds": 1, "retry_backoff_seconds": 2})
        (Path(self.env["DAGSTER_HOME"]) / "dagster.yaml").write_text(instance_yaml or (ROOT / "deploy" / "dagster.yaml").read_text())

    def __enter__(self) -> SensorRecoveryHarness:
        super().__enter__()
        log = open(self.workdir / "daemon.log", "w")
        self.daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        from ingest.localdev.processes import stop_group

        stop_group(self.daemon, signal.SIGTERM, timeout=30)
        super().__exit__(*exc)

    def run(self, trials: int, log=print) -> Report:
        report = Report(self.seed, phases=SENSOR_POINTS)
        for number in range(1, trials + 1):
            trial = self.sensor_trial(number, SENSOR_POINTS[(number - 1) % len(SENSOR_POINTS)])
            report.trials.append(trial)
            log(trial.line())
        return report

    def sensor_trial(self, number: int, point: str) -> SensorTrial:
        started = time.monotonic()
        trial = SensorTrial(number, point)
        seen = {r.dagster_run.run_id for r in self._runs()}
        self.write_workload()
        head = self._head()
        run_id = self._wait(lambda: next((r.dagster_run.run_id for r in self._runs()
                                          if r.dagster_run.run_id not in seen), None), 180, "the sensor's next run")
        trial.run_id = run_id
        marker, delay = self._sensor_kill_point(point)
        trial.point = f"{point} +{delay:.2f}s"
        # mid_silver: at the latest when silver's merge is committed, before the batch log's commit (a kill
        # after that leaves nothing to recover, and a merge can be quicker than the last runs' were)
        merged = re.compile(rf"silver src/{TABLE}: merged batch") if point == "mid_silver" else None
        trial.killed = self._kill_when(run_id, marker, delay, cancel=point == "cancel", reboot=point == "reboot",
                                       at_latest=merged)
        self._wait(lambda: self._converged(head), 600, "the sensor to bring the batch log to the binlog head")
        trial.recovered_by = next((r.dagster_run.run_id for r in self._runs()
                                   if r.dagster_run.run_id != run_id and r.dagster_run.status.value == "SUCCESS"
                                   and r.dagster_run.tags.get("dagster/partition")
                                   == self._run(run_id).tags.get("dagster/partition")), "")
        trial.ended_as = self._ending(run_id)
        self._compare(trial)
        trial.seconds = time.monotonic() - started
        return trial

    def _ending(self, run_id: str) -> str:
        from dagster import DagsterEventType

        records = self.h.instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_FAILURE).records
        message = records[-1].event_log_entry.dagster_event.message if records else ""
        return f"{self._run(run_id).status.value}: {message}"

    def _sensor_kill_point(self, point: str) -> tuple[re.Pattern | None, float]:
        if point == "before_write":
            return None, 0.0  # as soon as the run's process started
        if point == "mid_bronze":
            return re.compile(rf"bronze src/{TABLE} batch \S+: appending"), self.rng.uniform(0, 1.5)
        if point == "after_bronze":
            return re.compile(rf"bronze src/{TABLE} batch \S+: committed"), 0.0
        if point == "mid_silver":
            # within the merge: a warm one takes about a second, and a kill after its batch log commit
            # leaves nothing to recover
            span = self._silver_seconds()
            return re.compile(rf"silver src/{TABLE} batch \S+: merging"), self.rng.uniform(0, 0.8 * span if span else 1.0)
        # cancel and reboot: somewhere in the bronze append or the silver merge (a warm batch takes seconds)
        which = self.rng.choice([rf"bronze src/{TABLE} batch \S+: appending", rf"silver src/{TABLE} batch \S+: merging"])
        return re.compile(which), self.rng.uniform(0, 0.5)

    def _silver_seconds(self) -> float | None:
        """How long the silver step of the last successful runs took, from "merging" to "merged batch"
        in their event logs (the median), or None before any."""
        spans = []
        done = [r for r in self._runs() if r.dagster_run.status.value == "SUCCESS"]
        for record in done[:5]:  # newest first
            started = ended = None
            for entry in self.h.instance.all_logs(record.dagster_run.run_id):
                message = entry.user_message or ""
                if started is None and re.search(rf"silver src/{TABLE} batch \S+: merging", message):
                    started = entry.timestamp
                elif re.search(rf"silver src/{TABLE}: merged batch", message):
                    ended = entry.timestamp
            if started is not None and ended is not None:
                spans.append(ended - started)
        return statistics.median(spans) if spans else None

    def _kill_when(self, run_id: str, marker: re.Pattern | None, delay: float, cancel: bool,
                   reboot: bool = False, at_latest: re.Pattern | None = None) -> bool:
        """Wait for the marker in the run's event log, then `delay` seconds or until `at_latest` shows up
        there, then SIGKILL (or SIGSTOP and cancel) its worker; with `reboot`, the code server that started
        the worker too (and everything below it)."""
        pid = self._wait(lambda: self._worker_pid(run_id), 120, f"run {run_id}'s process")
        deadline = time.monotonic() + 300
        while marker is not None and not any(marker.search(m) for m in self._messages(run_id)):
            if self._run(run_id).is_finished or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        until = time.monotonic() + delay
        while time.monotonic() < until:
            if at_latest is not None and any(at_latest.search(m) for m in self._messages(run_id)):
                break
            time.sleep(0.02)
        if self._run(run_id).is_finished:
            return False
        family = _descendants(_parent(pid) if reboot else pid)
        if cancel:  # stuck: it stops answering; a user force-terminates it in the UI (marked canceled)
            for p in family:
                _signal(p, signal.SIGSTOP)
            self.h.instance.report_run_canceled(self._run(run_id), "canceled by the kill harness (a stuck run)")
        for p in family:  # the stuck process never comes back; a killed one is what the OOM killer leaves
            _signal(p, signal.SIGKILL)
        return True

    def _converged(self, head) -> bool:
        from ingest.defs.sensors import committed_end
        from ingest.lake.tables import source_batch_log_location

        if any(not r.dagster_run.is_finished for r in self._runs()):
            return False
        end = committed_end(source_batch_log_location(str(self.lake), "src"))
        return end is not None and end >= head

    # ---- the instance and the source

    def _runs(self):
        from dagster import RunsFilter

        return self.h.instance.get_run_records(RunsFilter(tags={"ingest/source": "src"}))

    def _run(self, run_id: str):
        return self.h.instance.get_run_by_id(run_id)

    def _messages(self, run_id: str) -> list[str]:
        return [r.user_message or "" for r in self.h.instance.all_logs(run_id)]

    def _worker_pid(self, run_id: str) -> int | None:
        for message in self._messages(run_id):
            # the run worker (in-process executor: its steps run in it)
            found = re.search(r"Executing steps in process \(pid: (\d+)\)", message)
            if found:
                return int(found.group(1))
        return None

    def _head(self):
        from ingest.sources.mysql.positions import BinlogPosition

        with self.root.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        return BinlogPosition(file, int(pos))

    _wait = staticmethod(wait_for)


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (the run worker and the Spark JVM it started), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(_parent(int(entry)), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest_tests.kill_harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--sensor", action="store_true",
                        help="kill or cancel runs the daemon's sensor launched; only the sensor recovers")
    parser.add_argument("--postgres", action="store_true", help="the trials on a kind: postgres source")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(10 ** 6)
    if args.postgres:
        return _postgres_main(args.trials, seed)

    from ingest.lake.connect import start_local, stop_local
    from ingest.lake.spark import spark_session
    from ingest.localdev.mariadb import MariaDBServer
    from ingest_tests.conftest import free_port

    password = "kill-harness-" + str(seed)
    os.environ["INGEST_TEST_MYSQL_PASSWORD"] = password
    with tempfile.TemporaryDirectory(prefix="kill-harness-") as tmp:
        work = Path(tmp)
        server = MariaDBServer(work / "mdb", free_port())
        server.start()
        try:
            server.create_ingest_user("ingest", password)
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE killh")
            state = start_local(work / "spark", {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"})
            os.environ["INGEST_SPARK_REMOTE"] = state.url  # the dagster runs it starts share the server
            spark = spark_session(state.url)
            (work / "run").mkdir()
            with server.connect(database="killh") as root, \
                    (SensorRecoveryHarness if args.sensor else KillHarness)(
                        spark, root, server.port, "killh", work / "run", seed) as harness:
                report = harness.run(args.trials)
            print(report.summary())
            return 0 if all(t.clean for t in report.trials) else 1
        finally:
            stop_local(work / "spark")
            server.stop()


def _postgres_main(trials: int, seed: int) -> int:
    from ingest.lake.connect import start_local, stop_local
    from ingest.lake.spark import spark_session
    from ingest.localdev.postgres import PostgresServer
    from ingest_tests.conftest import free_port

    with tempfile.TemporaryDirectory(prefix="kill-harness-") as tmp:
        work = Path(tmp)
        server = PostgresServer(free_port()).start()
        try:
            os.environ["INGEST_TEST_PG_PASSWORD"] = server.password
            state = start_local(work / "spark", {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"})
            os.environ["INGEST_SPARK_REMOTE"] = state.url
            spark = spark_session(state.url)
            (work / "run").mkdir()
            database = server.create_database("killh")
            with server.connect(database) as root, \
                    PostgresKillHarness(spark, root, server.port, database, work / "run", seed) as harness:
                report = harness.run(trials)
            print(report.summary())
            return 0 if all(t.clean for t in report.trials) else 1
        finally:
            stop_local(work / "spark")
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
