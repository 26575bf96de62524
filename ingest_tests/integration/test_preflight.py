"""`ingest check` against a real, misconfigured MariaDB: every problem named with its fix."""

import pytest
import yaml

from ingest.cli import main


@pytest.fixture(scope="module")
def misconfigured(tmp_path_factory):
    """Its own server: the binlog settings are wrong on purpose, which the shared one must not be."""
    from ingest.localdev.mariadb import MariaDBServer
    from ingest_tests.conftest import free_port

    server = MariaDBServer(tmp_path_factory.mktemp("mdbbad"), free_port(),
                           extra_args=("--binlog-row-metadata=MINIMAL", "--binlog-format=MIXED"))
    server.start()
    yield server
    server.stop()


def test_check_names_settings_grants_anonymous_users_keys_and_missing_tables(misconfigured, tmp_path, capsys,
                                                                            monkeypatch):
    with misconfigured.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.ok (id INT PRIMARY KEY, loc POINT, u UUID)")
        cur.execute("CREATE TABLE shop.nokey (a INT)")
        cur.execute("CREATE TABLE shop.pii (id INT PRIMARY KEY, n INT)")  # its transform names a missing column
        cur.execute("CREATE USER 'weak'@'%' IDENTIFIED BY 'pw'")  # as docs/deployment.md's grant steps do
        cur.execute("GRANT SELECT ON shop.* TO 'weak'@'%'")  # no replication privileges
        # what mariadb-install-db leaves for 'localhost'; this server skips name resolution, so the
        # account that takes logins from 127.0.0.1 is spelled with the address
        cur.execute("CREATE USER ''@'127.0.0.1'")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"shop": {
        "host": "127.0.0.1", "port": misconfigured.port, "user": "weak", "password_env": "CHECK_TEST_PW",
        "database": "shop", "tables": {"include": ["ok", "nokey", "gone", "pii"],
                                       "columns": {"ok": {"exclude": ["loc"]},
                                                   "pii": {"transform": {"mail": {"hash": {"salt_env": "CHECK_SALT"}}}}}}}}}))
    monkeypatch.setenv("CHECK_TEST_PW", "pw")
    monkeypatch.setenv("CHECK_SALT", "salt")

    # the anonymous account wins over 'weak'@'%' for logins from its host: nothing else can be checked
    assert main(["--sources", str(sources), "check"]) == 1
    out = capsys.readouterr().out
    assert "Access denied" in out and "anonymous account '@127.0.0.1'" in out
    assert "Fix: DROP USER ''@'127.0.0.1'" in out and out.strip().endswith("1 problem(s)")
    with misconfigured.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP USER ''@'127.0.0.1'")

    assert main(["--sources", str(sources), "check"]) == 1
    out = capsys.readouterr().out
    lines = {line.split(": ")[0]: line for line in out.splitlines() if ": " in line}
    assert "binlog_format=MIXED" in out and "binlog_row_metadata=MINIMAL" in out
    assert "binlog_format=ROW, binlog_row_metadata=FULL" in out  # the fix
    assert "lacks REPLICATION SLAVE ON *.*, REPLICATION CLIENT (MariaDB: BINLOG MONITOR) ON *.*" in out
    assert lines["FAIL  shop.nokey"].endswith("Fix: add a primary key to the table, or exclude it (tables.exclude)")
    assert "does not exist" in lines["FAIL  shop.gone"]
    assert lines["ok    shop.ok"].endswith("2 columns, primary key (id), leaving out loc")
    assert lines["FAIL  shop.pii"].endswith("tables.columns.pii.transform.mail: the table has no column 'mail' "
                                            "(it has id, n). Fix: correct the name or remove the transform")
    assert out.strip().endswith("5 problem(s)")

    # the same server, fixed: the check passes
    with misconfigured.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_format = 'ROW'")
        cur.execute("SET GLOBAL binlog_row_metadata = 'FULL'")
        cur.execute("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'weak'@'%'")
        cur.execute("ALTER TABLE shop.nokey ADD PRIMARY KEY (a)")
        cur.execute("CREATE TABLE shop.gone (id INT PRIMARY KEY)")
        cur.execute("ALTER TABLE shop.pii ADD COLUMN mail TEXT")
    assert main(["--sources", str(sources), "check"]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("all checks passed") and "3 columns, primary key (id), transforming mail" in out
