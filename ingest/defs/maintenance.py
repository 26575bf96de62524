"""The lake maintenance job and its schedule (Dagster wiring for lake/maintenance.py)."""

# No `from __future__ import annotations`: Dagster reads these annotations at run time.

from collections.abc import Sequence

from dagster import (DefaultScheduleStatus, JobDefinition, MetadataValue, OpExecutionContext, Output,
                     ScheduleDefinition, job, op)

from ingest.config import MaintenanceSettings

JOB = "lake_maintenance"


def maintenance_defs(settings: MaintenanceSettings, paths: Sequence[str]
                     ) -> tuple[JobDefinition, list[ScheduleDefinition]]:
    """A job that compacts, vacuums and sets retention on every table in `paths`, and its schedule."""

    @op(name="maintain_lake_tables", required_resource_keys={"spark", "lake"})
    def maintain_tables(context: OpExecutionContext):
        from ingest.lake.maintenance import Retention, maintain

        spark = context.resources.spark.spark_session
        retention = Retention(settings.txn_retention_days, settings.vacuum_retain_hours)
        done = []
        for path in paths:
            with context.resources.lake.write_lock(path):  # S3 lakes: one writer per table at a time
                done.append(maintain(spark, path, retention, context.log.info))
        present = [d for d in done if d["exists"]]
        yield Output(None, metadata={
            "tables": len(present),
            "files_before": sum(d["files_before"] for d in present),
            "files_after": sum(d["files_after"] for d in present),
            "per_table": MetadataValue.json({d["path"]: {k: d[k] for k in ("files_before", "files_after")}
                                             for d in present}),
        })

    @job(name=JOB, description="OPTIMIZE and VACUUM every lake table, and set its retention properties.")
    def maintenance_job():
        maintain_tables()

    schedules = [] if settings.cron is None else [ScheduleDefinition(
        name=f"{JOB}_schedule", job=maintenance_job, cron_schedule=settings.cron,
        default_status=DefaultScheduleStatus.RUNNING if settings.running else DefaultScheduleStatus.STOPPED)]
    return maintenance_job, schedules
