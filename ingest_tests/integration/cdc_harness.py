"""Drives the generated definitions in-process: snapshot, sensor ticks, batch runs, silver checks."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from dagster import AssetKey, DagsterInstance, SensorResult, build_sensor_context, materialize

from ingest.config import load_config
from ingest.defs.sources import build_source_defs
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.resources import SparkResource
from ingest.lake.merge import live_rows
from ingest.lake.tables import table_location
from ingest_tests.probes import SCHEDULES_STOPPED


HARNESS_CDC = {"watch_seconds": 0}
"""A harness ticks the sensor itself, standing in for the daemon: one look per tick, no watching."""


def write_sources(tmp_path: Path, port: int, database: str, tables: list[str], name: str = "src",
                  password_env: str = "INGEST_TEST_MYSQL_PASSWORD", columns: dict | None = None,
                  history: list[str] | None = None, deletion_vectors: list[str] | None = None,
                  where: dict[str, str] | None = None, table_settings: dict | None = None, **extra) -> Path:
    """A MySQL source over `tables`; its sensor looks once per tick unless `cdc` sets `watch_seconds`
    (a test that runs the daemon leaves the default). `table_settings`: more keys of `tables`."""
    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump({"sources": {name: {
        "host": "127.0.0.1", "port": port, "user": "ingest", "password_env": password_env,
        "database": database, "tables": {"include": tables, **({"columns": columns} if columns else {}),
                                         **({"history": history} if history else {}),
                                         **({"deletion_vectors": deletion_vectors} if deletion_vectors else {}),
                                         **({"where": where} if where else {}), **(table_settings or {})},
        "snapshot": {"chunk_size": 1000, "parallelism": 2, "chunks_per_commit": 4},
        **extra, "cdc": {**HARNESS_CDC, **extra.get("cdc", {})}}}, **SCHEDULES_STOPPED}))
    return path


def dagster_env(tmp_path: Path, sources: Path) -> dict[str, str]:
    """Environment for a `dagster` subprocess over the test sources, lake and instance."""
    import os

    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("")
    return {**os.environ, "DAGSTER_HOME": str(home), "INGEST_SOURCES": str(sources),
            "INGEST_LAKE_ROOT": str(tmp_path / "lake")}


@dataclass
class CdcHarness:
    spark: object
    sources: Path
    lake: Path
    instance: DagsterInstance
    name: str = "src"
    batches: list[str] = field(default_factory=list)

    def __post_init__(self):
        config = load_config(self.sources)
        (defs,) = build_source_defs(config, str(self.lake))
        self.assets, self.sensor, self.checks = defs.assets, defs.sensor, defs.checks
        self.tables = sorted({k.path[1] for a in self.assets for k in a.keys if len(k.path) == 3})
        spark_res = SparkResource()
        self.resources = {"spark": spark_res, "lake": DeltaLakeIOManager(lake_root=str(self.lake), spark=spark_res)}

    def run(self, keys: list[AssetKey], partition: str | None = None, expect_success: bool = True,
            tags: dict[str, str] | None = None):
        result = materialize(self.assets, selection=keys, partition_key=partition, instance=self.instance,
                             resources=self.resources, tags={"ingest/source": self.name, **(tags or {})},
                             raise_on_error=expect_success)
        assert result.success == expect_success
        return result

    def failure(self, result) -> str:
        return root_failure(result)

    def snapshot(self, tables: list[str] | None = None, expect_success: bool = True):
        return self.run([AssetKey([self.name, t, "snapshot"]) for t in tables or self.tables],
                        expect_success=expect_success)

    def tick(self):
        with build_sensor_context(instance=self.instance) as context:
            return self.sensor(context)

    def sync(self) -> str | None:
        """One sensor tick and the run it asks for; the batch key, or None when it skipped."""
        result = self.tick()
        if not isinstance(result, SensorResult) or not result.run_requests:
            return None
        key = None
        for request in result.run_requests:
            if request.partition_key is None:  # a snapshot the sensor asks for
                self.run(list(request.asset_selection))
                continue
            key = request.partition_key
            self.instance.add_dynamic_partitions(f"{self.name}_batches", [key])
            self.run(list(request.asset_selection), key)
            self.batches.append(key)
        return key

    def run_batch(self, key: str, tables: list[str] | None = None, expect_success: bool = True):
        """Run a batch as the sensor does (with the batch log), or bronze and only `tables`' silver."""
        keys = [AssetKey([self.name, t, "changes"]) for t in self.tables] + [AssetKey([self.name, t])
                                                                             for t in tables or self.tables]
        if tables is None:
            keys.append(AssetKey([self.name, "_batch_log"]))
        return self.run(keys, key, expect_success)

    def add_batch(self) -> str:
        """Tick the sensor and register its batch without running it."""
        result = self.tick()
        (key,) = [r.partition_key for r in result.run_requests if r.partition_key]
        self.instance.add_dynamic_partitions(f"{self.name}_batches", [key])
        self.batches.append(key)
        return key

    def check(self, table: str, name: str = "reconciliation", layer: str | None = None):
        """Run one asset check of `table`'s silver asset (or its `layer` asset) alone; its evaluation."""
        from dagster import AssetCheckKey, AssetSelection

        key = AssetCheckKey(AssetKey([self.name, table, *([layer] if layer else [])]), name)
        result = materialize([*self.assets, *self.checks], selection=AssetSelection.checks(key),
                             instance=self.instance, resources=self.resources, raise_on_error=True)
        (evaluation,) = result.get_asset_check_evaluations()
        return evaluation

    def newest_run_assets(self, materialized: bool = False) -> set[str]:
        """The assets the newest run named (Dagster wrote a planned event for each when it created the
        run), or those it `materialized`."""
        from dagster import DagsterEventType

        (newest,) = self.instance.get_run_records(limit=1)
        kind = DagsterEventType.ASSET_MATERIALIZATION if materialized else \
            DagsterEventType.ASSET_MATERIALIZATION_PLANNED
        records = self.instance.get_records_for_run(newest.dagster_run.run_id, of_type=kind).records
        return {r.event_log_entry.dagster_event.asset_key.to_user_string() for r in records}

    def silver_path(self, table: str) -> str:
        return table_location(str(self.lake), self.name, table, "silver")

    def live(self, table: str, columns: list[str]):
        df = live_rows(self.spark.read.format("delta").load(self.silver_path(table)))
        return sorted(tuple(r) for r in df.select(*columns).collect())


def register_batch_to_head(env: dict[str, str], root_conn, source: str, table: str) -> str:
    """Add the partition from `table`'s snapshot log start to the binlog head, in the instance at
    env's DAGSTER_HOME (as the sensor would for the first batch); returns its key."""
    from ingest.sources.mysql.positions import BatchRange, BinlogPosition

    with root_conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        head_file, head_pos = cur.fetchone()[:2]
    meta = latest_metadata_in(env, AssetKey([source, table, "snapshot"]))
    key = BatchRange(BinlogPosition.from_metadata(meta["log_start"].value),
                     BinlogPosition(head_file, int(head_pos))).key
    add_partitions(env, f"{source}_batches", [key])
    return key


@contextmanager
def instance_at(env: dict[str, str]):
    """The Dagster instance of env's DAGSTER_HOME (the one a `dagster` subprocess uses)."""
    import os

    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    instance = DagsterInstance.get()
    try:
        yield instance
    finally:
        instance.dispose()
        if previous is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = previous


def add_partitions(env: dict[str, str], partitions_name: str, keys: list[str]) -> None:
    with instance_at(env) as instance:
        instance.add_dynamic_partitions(partitions_name, keys)


def latest_metadata_in(env: dict[str, str], key: AssetKey) -> dict:
    from ingest.defs.assets import latest_metadata

    with instance_at(env) as instance:
        return latest_metadata(instance, key)


def root_failure(result) -> str:
    """The message of the innermost cause of a failed in-process run's first step failure."""
    err = result.get_step_failure_events()[0].step_failure_data.error
    while err.cause is not None:
        err = err.cause
    return err.message
