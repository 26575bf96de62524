"""Maintenance settings and the retention properties they set (pure)."""

import pytest

from ingest.config import ConfigError, load_config
from ingest.lake.maintenance import Retention


def test_the_log_is_kept_at_least_as_long_as_txn_ids():
    assert Retention(txn_days=90, vacuum_hours=24).properties() == {
        "delta.setTransactionRetentionDuration": "interval 90 days",
        "delta.logRetentionDuration": "interval 90 days",
        "delta.deletedFileRetentionDuration": "interval 24 hours",
    }
    assert Retention(txn_days=7).properties()["delta.logRetentionDuration"] == "interval 30 days"


def test_a_txn_retention_shorter_than_the_replay_check_is_refused(tmp_path):
    path = tmp_path / "sources.yaml"
    path.write_text("sources: {}\nmaintenance: {txn_retention_days: 3}\n")
    with pytest.raises(ConfigError, match=r"maintenance.txn_retention_days.*greater than or equal to 7"):
        load_config(path)


def test_defaults_schedule_maintenance_nightly(tmp_path):
    path = tmp_path / "sources.yaml"
    path.write_text("sources: {}\n")
    settings = load_config(path).maintenance
    assert (settings.cron, settings.running, settings.txn_retention_days, settings.vacuum_retain_hours) == (
        "30 3 * * *", True, 30, 168)


def test_reconciliation_runs_daily_by_default_and_can_be_unscheduled(tmp_path):
    path = tmp_path / "sources.yaml"
    path.write_text("sources: {}\n")
    assert (load_config(path).reconcile.cron, load_config(path).reconcile.running) == ("0 4 * * *", True)
    path.write_text("sources: {}\nreconcile: {cron: null}\n")
    assert load_config(path).reconcile.cron is None
    path.write_text("sources: {}\nreconcile: {cron: daily}\n")
    with pytest.raises(ConfigError, match=r"reconcile.*cron"):
        load_config(path)
