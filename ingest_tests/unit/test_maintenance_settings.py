"""Maintenance settings, the retention properties they set, and what a batch of one key rewrites (pure)."""

import pytest

from ingest.config import ConfigError, load_config
from ingest.lake.maintenance import Retention, rows_rewritten_per_key


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


def test_a_batch_of_one_key_rewrites_one_file_in_key_order_and_every_file_in_hash_order():
    keys = range(7, 2990, 7)
    in_key_order = [(0, 999, 1000), (1000, 1999, 1000), (2000, 2999, 1000)]
    assert rows_rewritten_per_key(in_key_order, keys) == 1000
    # a merge's hash-ordered output: each file spans the others
    assert rows_rewritten_per_key([(0, 2999, 1000), (1, 2998, 1000), (2, 2997, 1000)], keys) == 3000
    # a batch across the first half rewrote it into one file that spans the untouched ones
    half = [(0, 2999, 1500), (1500, 2249, 750), (2250, 2999, 750)]
    assert rows_rewritten_per_key(half, [10, 2000, 2500]) == (1500 + 2250 + 2250) / 3
    # as Delta's ZORDER leaves a table (measured): neighbours share a key or two at their ends
    zordered = [(0, 997, 998), (998, 2035, 1037), (2034, 2995, 959), (2993, 9001, 1007)]
    assert rows_rewritten_per_key(zordered, range(0, 3000)) < 1010
    # keys past every file (rows inserted since the sample) and tables without rows rewrite nothing
    assert rows_rewritten_per_key(in_key_order, [5000]) == 0
    assert rows_rewritten_per_key([], keys) == 0 and rows_rewritten_per_key([(None, None, 0)], keys) == 0
    assert rows_rewritten_per_key(in_key_order, [None]) == 0


def test_a_maintenance_run_can_name_the_sources_whose_tables_it_maintains():
    from ingest.defs.maintenance import tables_of

    tables = [("bank", "/l/bank/a/silver"), ("shop", "/l/shop/o/bronze"), ("shop", "/l/shop/o/silver")]
    assert tables_of(tables, None) == [p for _, p in tables]
    assert tables_of(tables, ["shop"]) == ["/l/shop/o/bronze", "/l/shop/o/silver"]
    with pytest.raises(ValueError, match=r"no source named 'shpo'.*its sources are bank, shop. Fix: "):
        tables_of(tables, ["shop", "shpo"])
