"""`ingest status`: its pure parts (how far behind, retention headroom, the table) and its usage errors."""

import datetime as dt
import subprocess
import sys
from pathlib import Path

from ingest.sources.mysql.positions import BinlogPosition
from ingest.status import TableStatus, ago, behind, format_table, headroom


def test_behind_and_headroom_are_read_from_the_binlog_files():
    end = BinlogPosition("mysql-bin.000007", 1200)
    assert behind(BinlogPosition("mysql-bin.000007", 5200), end) == "4000 bytes"
    assert behind(BinlogPosition("mysql-bin.000009", 4), end) == "2 binlog file(s)"
    assert headroom("mysql-bin.000004", end) == "3 file(s)"
    assert headroom("mysql-bin.000008", end).startswith("GONE")
    # a server that never expires binlogs: no alarm in "0 file(s)"
    assert headroom("mysql-bin.000007", end, expiry_seconds=0) == "no expiry set (0 file(s) before)"
    assert headroom("mysql-bin.000006", end, expiry_seconds=7 * 86_400) == "1 file(s), expiry 7 d"
    assert headroom("mysql-bin.000008", end, expiry_seconds=0).startswith("GONE")


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
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  shop:\n    host: h\n    user: u\n    password_env: P\n    database: d\n"
                       "    tables: {include: [orders]}\n")
    for args, message in ((["--source", "nope"], "unknown source 'nope'; "),
                          (["--source", "shop", "--table", "lines"], "unknown table 'lines' in source shop; it has: orders")):
        run = subprocess.run([ingest, "--sources", str(sources), "status", *args], capture_output=True, text=True)
        assert run.returncode == 2 and message in run.stderr, run.stderr
