"""Scheduled upkeep: the lake maintenance job (Dagster wiring for lake/maintenance.py) and the
reconciliation job, each with its schedule."""

# No `from __future__ import annotations`: Dagster reads these annotations at run time.

from collections.abc import Sequence

from dagster import (AssetCheckKey, AssetSelection, DefaultScheduleStatus, Field, JobDefinition, MetadataValue,
                     OpExecutionContext, Output, ScheduleDefinition,
                     define_asset_job, job, op)

from ingest.config import MaintenanceSettings, ReconcileSettings, Scheduled

JOB = "lake_maintenance"
RECONCILE_JOB = "reconcile_silver"


def schedule_for(job_def, settings: Scheduled, cron: str | None) -> list[ScheduleDefinition]:
    return [] if cron is None else [ScheduleDefinition(
        name=f"{job_def.name}_schedule", job=job_def, cron_schedule=cron,
        default_status=DefaultScheduleStatus.RUNNING if settings.running else DefaultScheduleStatus.STOPPED)]


def reconcile_defs(settings: ReconcileSettings, checks: Sequence[AssetCheckKey]
                   ) -> tuple[list, list[ScheduleDefinition]]:
    """A job that runs only the `reconciliation` checks (no materialization), and its schedule."""
    if not checks:
        return [], []
    reconcile_job = define_asset_job(
        RECONCILE_JOB, selection=AssetSelection.checks(*checks),
        description="Compares every MySQL and PostgreSQL silver table with its source by key-range checksums, row by row "
                    "only where a range differs (the `reconciliation` checks).")
    return [reconcile_job], schedule_for(reconcile_job, settings, settings.cron)


def tables_of(tables: Sequence[tuple[str, str]], sources: Sequence[str] | None) -> list[str]:
    """The paths of `tables` ((source, path) pairs) that belong to `sources` (all of them when None).
    A source name that has no table is an error naming it and the sources there are."""
    if sources is None:
        return [path for _, path in tables]
    known = sorted({source for source, _ in tables})
    unknown = sorted(set(sources) - set(known))
    if unknown:
        raise ValueError(f"lake_maintenance: no source named {', '.join(map(repr, unknown))} in the sources file; "
                         f"its sources are {', '.join(known) or 'none'}. Fix: name one of those in the op's "
                         "`sources`, or leave `sources` out to maintain every table.")
    wanted = set(sources)
    return [path for source, path in tables if source in wanted]


def maintenance_defs(settings: MaintenanceSettings, tables: Sequence[tuple[str, str]]
                     ) -> tuple[JobDefinition, list[ScheduleDefinition]]:
    """A job that compacts, vacuums and sets retention on every table in `tables` ((source, path) pairs),
    or on the tables of the sources its run config names, and its schedule."""

    @op(name="maintain_lake_tables", required_resource_keys={"spark", "lake"}, config_schema={
        "sources": Field([str], is_required=False,
                         description="Only these sources' tables (the schedule's runs: every table).")})
    def maintain_tables(context: OpExecutionContext):
        from ingest.lake.maintenance import Retention, maintain

        paths = tables_of(tables, context.op_config.get("sources"))
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
            "reclustered": sum(d["reclustered"] for d in present),
            "per_table": MetadataValue.json({d["path"]: {k: d[k] for k in ("files_before", "files_after",
                                                                            "reclustered")}
                                             for d in present}),
        })

    @job(name=JOB, description="OPTIMIZE and VACUUM every lake table, re-cluster silver tables whose files are out "
                               "of key order, and set retention properties.")
    def maintenance_job():
        maintain_tables()

    return maintenance_job, schedule_for(maintenance_job, settings, settings.cron)
