"""`ingest status`: its pure parts (how far behind, retention headroom, the table) and its usage errors."""

import datetime as dt
import subprocess
import sys
from pathlib import Path

from ingest.sources.mysql.positions import BinlogPosition
from ingest.status import (
    TableStatus, ago, binlog_bytes, binlog_view, covered_through, format_table, headroom, slot_view, waiting,
)


def test_a_table_is_current_through_the_newest_batch_that_did_not_leave_it_out():
    """A logged batch applied every change it held, and a table it did not name had none: such a table is
    in the lake through the batch log's newest end, not its own last bronze end. A batch that left it
    out (quarantined) stops that."""
    own = BinlogPosition("b.000002", 400)
    logged = [(BinlogPosition("b.000003", 900), set()), (BinlogPosition("b.000003", 100), set()),
              (BinlogPosition("b.000002", 400), set()), (BinlogPosition("b.000001", 4), {"t"})]
    assert covered_through(own, logged, "t") == BinlogPosition("b.000003", 900)
    assert covered_through(own, [(BinlogPosition("b.000003", 900), set()), (BinlogPosition("b.000003", 100), {"t"}),
                                 *logged[2:]], "t") == own
    assert covered_through(own, [], "t") == own
    assert covered_through(BinlogPosition("b.000004", 4), logged, "t") == BinlogPosition("b.000004", 4)


def test_changes_wait_only_for_the_tables_the_unread_log_touches_in_one_unit():
    assert waiting(0, frozenset(), "orders", "binlog") == "none"
    assert waiting(41_319, frozenset({"lines"}), "orders", "binlog") == "none"  # the head moved for others
    assert waiting(41_319, frozenset({"orders"}), "orders", "binlog") == "yes: 41,319 bytes of binlog not read yet"
    assert waiting(20_040, None, "public.a", "WAL") == "unknown: 20,040 bytes of WAL not read yet"
    logs = [("b.000006", 9_000), ("b.000007", 5_000), ("b.000008", 700)]
    assert binlog_bytes(logs, BinlogPosition("b.000007", 1_200), BinlogPosition("b.000007", 5_200)) == 4_000
    assert binlog_bytes(logs, BinlogPosition("b.000007", 1_200), BinlogPosition("b.000008", 300)) == 3_800 + 296


def test_headroom_says_how_many_older_binlogs_the_server_keeps_and_how_it_purges():
    end = BinlogPosition("mysql-bin.000007", 1200)
    assert headroom("mysql-bin.000004", end) == "3 older binlog file(s)"
    assert headroom("mysql-bin.000008", end).startswith("GONE")
    # a server that never expires binlogs: no alarm in "0 file(s)"
    assert headroom("mysql-bin.000007", end, expiry_seconds=0) == "0 older binlog file(s); the server purges none by itself"
    assert headroom("mysql-bin.000006", end, expiry_seconds=7 * 86_400) == "1 older binlog file(s); purged after 7 d"
    assert headroom("mysql-bin.000008", end, expiry_seconds=0).startswith("GONE")


def test_a_missing_secret_names_its_variable_once_in_status_and_check(monkeypatch):
    """No server is asked: the variable is read first. Status names it and nothing else; check gives one
    fix, for MySQL and PostgreSQL alike."""
    from ingest.config import parse_config
    from ingest.defs.postgres import check_postgres
    from ingest.sources.mysql.preflight import check_source

    monkeypatch.delenv("SHOP_PASSWORD", raising=False)
    config = parse_config({"sources": {
        "shop": {"host": "127.0.0.1", "port": 1, "user": "u", "password_env": "SHOP_PASSWORD", "database": "d",
                 "tables": {"include": ["orders"]}},
        "bank": {"kind": "postgres", "host": "127.0.0.1", "port": 1, "user": "u", "password_env": "SHOP_PASSWORD",
                 "database": "d", "publication": "p", "tables": {"include": ["accounts"]}}}})
    shop, bank = config.sources["shop"], config.sources["bank"]
    assert binlog_view(shop, [BinlogPosition("b.000001", 4)]) == "not asked: SHOP_PASSWORD is not set"
    assert slot_view("bank", bank) == "not asked: SHOP_PASSWORD is not set"
    for findings in (check_source("shop", shop, ["orders"]), check_postgres("bank", bank)):
        (finding,) = findings
        line = finding.line()
        assert "SHOP_PASSWORD is not set" in line and line.count("Fix:") == 1 and "connect" not in line, line


def test_ages_and_the_table_layout():
    now = dt.datetime(2026, 1, 1, 12, 0, 0)
    assert [ago(now - dt.timedelta(seconds=s), now) for s in (5, 600, 36000)] == ["5 s ago", "10 min ago", "10 h ago"]
    assert ago(None, now) == "-"
    text = format_table([TableStatus("shop", "orders", "abc complete (5 s ago)", "-", "-", "-", "-", "-")])
    header, row = text.splitlines()
    assert header.startswith("source  table") and row.startswith("shop    orders  abc complete")


def test_the_console_script_has_help_and_names_unknown_sources(tmp_path):
    ingest = str(Path(sys.executable).parent / "ingest")
    helps = [" ".join(subprocess.run([ingest, *args, "--help"], capture_output=True, text=True).stdout.split())
             for args in ([], ["status"])]
    assert "status per source and table" in helps[0] and "how many binlog files the server may purge" in helps[1]
    assert "which tables the source has changes for" in helps[1]
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  shop:\n    host: h\n    user: u\n    password_env: P\n    database: d\n"
                       "    tables: {include: [orders]}\n")
    for args, message in ((["--source", "nope"], "unknown source 'nope'; "),
                          (["--source", "shop", "--table", "lines"], "unknown table 'lines' in source shop; it has: orders")):
        run = subprocess.run([ingest, "--sources", str(sources), "status", *args], capture_output=True, text=True)
        assert run.returncode == 2 and message in run.stderr, run.stderr
