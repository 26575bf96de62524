"""Keeping Delta tables fast to read and cheap to store over months: compaction, vacuum, retention.

A sensor batch every few seconds leaves many small files and log entries per table. The
maintenance job, on a schedule, runs for each lake table:

1. its retention properties, set once (a property change is a metadata commit, which would
   conflict with concurrent writers if made every time): `delta.setTransactionRetentionDuration`
   expires the idempotent txn ids (else every snapshot of the log carries all of them forever);
   `delta.logRetentionDuration` keeps the log, and with it our commit metadata, at least as long;
   `delta.deletedFileRetentionDuration` is what VACUUM keeps;
2. OPTIMIZE (bin-packing compaction): files under 1 MiB become files of up to 32 MiB (`compact`);
3. VACUUM with the retention the user sets.

A write that loses a commit race to OPTIMIZE is retried by the writer (see lake/write.py), and
OPTIMIZE is retried the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Delta refuses a VACUUM that keeps less than this unless told it is safe (readers of older
# versions, and writers that started before, may still need those files).
DELTA_SAFE_RETAIN_HOURS = 168


# OPTIMIZE compacts files smaller than COMPACT_BELOW into files of at most COMPACT_UP_TO (Delta's defaults:
# 1 GiB for both). With those defaults a 10M-row silver became one file, which every batch then rewrote
# whole. Silver is written in key order, in files of a narrow key range (merge.SILVER_FILE_ROWS: 1M rows of
# a narrow table took 5.7 MB), and a batch at clustered keys rewrites one or two of them; compaction leaves
# them apart. What it joins are a sensor batch's small appends and merges (kilobytes each).
COMPACT_BELOW = 2**20
COMPACT_UP_TO = 32 * 2**20


@dataclass(frozen=True)
class Retention:
    txn_days: int = 30
    """How long Delta keeps an idempotent txn id: a batch re-run within it is skipped by Delta itself."""
    vacuum_hours: int = DELTA_SAFE_RETAIN_HOURS
    """How long VACUUM keeps files a newer version no longer uses (time travel back that far)."""

    def properties(self) -> dict[str, str]:
        """The table properties this retention sets (pure). The log is kept at least as long as txn ids
        (the commit metadata the batches look up lives there)."""
        log_days = max(self.txn_days, 30)
        return {"delta.setTransactionRetentionDuration": f"interval {self.txn_days} days",
                "delta.logRetentionDuration": f"interval {log_days} days",
                "delta.deletedFileRetentionDuration": f"interval {self.vacuum_hours} hours"}


def maintain(spark, path: str, retention: Retention, log: Callable[[str], None]) -> dict[str, Any]:
    """Retention properties, OPTIMIZE and VACUUM on the Delta table at `path`; what each did."""
    from ingest.lake.deltalog import is_delta_table
    from ingest.lake.merge import delta_path
    from ingest.lake.write import retry_conflicts

    if not is_delta_table(path):
        return {"path": path, "exists": False}
    table = delta_path(path)

    def files() -> int:
        return int(spark.sql(f"DESCRIBE DETAIL {table}").select("numFiles").first()[0])

    have = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    want = retention.properties()
    changed = {k: v for k, v in want.items() if have.get(k) != v}
    if changed:
        settings = ", ".join(f"'{k}' = '{v}'" for k, v in changed.items())
        retry_conflicts(lambda: spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({settings})").collect(),
                        f"{path}: retention properties")
        log(f"{path}: set {', '.join(changed)}")
    before = files()
    compact(spark, path)
    compacted = files()
    unsafe = retention.vacuum_hours < DELTA_SAFE_RETAIN_HOURS
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    if unsafe:  # the user asked for it (sources.yaml): Delta's own guard would refuse
        spark.conf.set(check, "false")
    try:
        spark.sql(f"VACUUM {table} RETAIN {retention.vacuum_hours} HOURS").collect()
    finally:
        if unsafe:
            spark.conf.unset(check)
    log(f"{path}: {before} files, {compacted} after OPTIMIZE; VACUUM kept {retention.vacuum_hours} h")
    return {"path": path, "exists": True, "files_before": before, "files_after": compacted,
            "properties_set": sorted(changed)}


def compact(spark, path: str, below: int = COMPACT_BELOW, up_to: int = COMPACT_UP_TO) -> None:
    """OPTIMIZE the Delta table at `path`: its files under `below` bytes become files of at most `up_to`
    (session settings for this command only: the session may be a leased one that others reuse)."""
    from ingest.lake.merge import delta_path
    from ingest.lake.write import retry_conflicts

    sizes = {"spark.databricks.delta.optimize.minFileSize": str(below),
             "spark.databricks.delta.optimize.maxFileSize": str(up_to)}
    for key, value in sizes.items():
        spark.conf.set(key, value)
    try:
        retry_conflicts(lambda: spark.sql(f"OPTIMIZE {delta_path(path)}").collect(), f"{path}: OPTIMIZE")
    finally:
        for key in sizes:
            spark.conf.unset(key)
