"""Secrets stay out of everything written, and hostile identifiers cannot inject SQL."""

import os
import subprocess
import uuid
from pathlib import Path

import boto3
import pytest
import yaml
from dagster import AssetKey, DagsterInstance

from ingest.lake.columns import lake_name
from ingest.lake.tables import asset_part, spark_ident
from ingest.localdev.mariadb import INGEST_GRANTS
from ingest_tests.integration.cdc_harness import (
    CdcHarness, add_partitions, dagster_env, latest_metadata_in, register_batch_to_head, write_sources,
)
from ingest_tests.integration.dynamodb_harness import create_table, unique
from ingest_tests.integration.test_cdc_e2e import DAGSTER, ROOT
from ingest_tests.probes import server_log_files

DEPLOYMENT = (ROOT / "docs" / "deployment.md").read_text()


def test_hostile_database_table_and_column_names_are_quoted_everywhere(spark, mariadb, tmp_path):
    database = "ingest test-db`x"  # a space, a hyphen and a backtick
    table = "odd-name$1"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS `ingest test-db``x`")
        cur.execute("CREATE DATABASE `ingest test-db``x`")
        cur.execute("CREATE TABLE `ingest test-db``x`.`odd-name$1` (`id` INT PRIMARY KEY, `we``ird col` TEXT, "
                    "`select` INT, `x'); DROP TABLE t; --` INT)")
        cur.execute("INSERT INTO `ingest test-db``x`.`odd-name$1` VALUES (1, 'a`b', 1, 1), (2, 'c''d', 2, 2)")
    sources = write_sources(tmp_path, mariadb.port, database, [table])
    h = CdcHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral())
    h.snapshot()
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("UPDATE `ingest test-db``x`.`odd-name$1` SET `we``ird col` = 'z;`--' WHERE id = 1")
        cur.execute("INSERT INTO `ingest test-db``x`.`odd-name$1` VALUES (3, '''; DROP', 3, 3)")
        cur.execute("DELETE FROM `ingest test-db``x`.`odd-name$1` WHERE id = 2")
    assert h.sync() is not None
    # names Delta cannot hold without column mapping are stored under their normalized names
    columns = [spark_ident(lake_name(c)) for c in ("id", "we`ird col", "select", "x'); DROP TABLE t; --")]
    assert h.live(asset_part(table), columns) == [(1, "z;`--", 1, 1), (3, "'; DROP", 3, 3)]


def test_the_documented_grants_are_the_ones_the_tests_run_with(mariadb):
    """Every MariaDB test runs as a user with exactly these grants, and docs/deployment.md documents them."""
    assert f"GRANT {INGEST_GRANTS} ON *.* TO 'ingest'@'%';" in DEPLOYMENT
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GRANTS FOR 'ingest'@'127.0.0.1'")
        grants = " ".join(r[0] for r in cur.fetchall())
    granted = {g.strip() for g in grants.split(" ON ")[0].removeprefix("GRANT ").split(",")}
    # MariaDB names REPLICATION CLIENT "BINLOG MONITOR"
    assert granted == {"SELECT", "REPLICATION SLAVE", "BINLOG MONITOR"}, grants


def test_without_replication_slave_a_batch_fails_naming_the_privilege(spark, mariadb, database, root, tmp_path):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE p (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO p VALUES (1)")
    mariadb.create_ingest_user("noslave", "noslave-pw")
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("REVOKE REPLICATION SLAVE ON *.* FROM 'noslave'@'127.0.0.1'")
    os.environ["NOSLAVE_PW"] = "noslave-pw"
    sources = tmp_path / "s.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"src": {
        "host": "127.0.0.1", "port": mariadb.port, "user": "noslave", "password_env": "NOSLAVE_PW",
        "database": database, "tables": {"include": ["p"]}}}}))
    h = CdcHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral())
    h.snapshot()  # SELECT is enough for the snapshot
    with root.cursor() as cur:
        cur.execute("INSERT INTO p VALUES (2)")
    key = h.add_batch()
    result = h.run_batch(key, expect_success=False)
    assert "REPLICATION SLAVE" in h.failure(result)


def user_and_table(mariadb, root, user: str, password: str, rows: str) -> None:
    """A source user with `password`, and a table `s` holding `rows` (SQL VALUES)."""
    mariadb.create_ingest_user(user, password)
    with root.cursor() as cur:
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v TEXT)")
        cur.execute(f"INSERT INTO s VALUES {rows}")


def test_credentials_appear_in_no_log_metadata_commit_or_error(spark, mariadb, database, root, dynamodb, tmp_path):
    password = f"Pw-{uuid.uuid4().hex}"
    aws_secret = f"AwsSecret-{uuid.uuid4().hex}"
    user_and_table(mariadb, root, "secretive", password, "(1, 'a'), (2, 'b')")
    ddb = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    dtable = create_table(ddb, unique("secrets"))
    ddb.put_item(TableName=dtable, Item={"id": {"S": "k1"}})
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {
        "src": {"host": "127.0.0.1", "port": mariadb.port, "user": "secretive", "password_env": "SECRET_DB_PW",
                "database": database, "tables": {"include": ["s"]}},
        "ddb": {"kind": "dynamodb", "endpoint_url": dynamodb.endpoint_url, "tables": [dtable],
                "access_key_id_env": "SECRET_AWS_KEY", "secret_access_key_env": "SECRET_AWS_SECRET"},
    }}))
    env = {**dagster_env(tmp_path, sources), "SECRET_DB_PW": password, "SECRET_AWS_KEY": "localKey1",  # DynamoDB Local takes letters and digits only
           "SECRET_AWS_SECRET": aws_secret}
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(key, None)
    outputs = []

    def materialize(*args, ok=True):
        run = subprocess.run([DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions", *args], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=600)
        outputs.append(run.stdout + run.stderr)
        assert (run.returncode == 0) == ok, run.stderr[-3000:]

    materialize("--select", f"src/s/snapshot,ddb/{dtable}/snapshot")
    with root.cursor() as cur:
        cur.execute("UPDATE s SET v = 'c' WHERE id = 1")
    ddb.put_item(TableName=dtable, Item={"id": {"S": "k2"}})
    batch = register_batch_to_head(env, root, "src", "s")
    materialize("--select", "src/s/changes,src/s", "--partition", batch)
    add_partitions(env, f"ddb_{dtable}_batches", ["00000001", "00000003"])
    materialize("--select", f"ddb/{dtable}/changes,ddb/{dtable}", "--partition", "00000001")
    materialize("--select", f"ddb/{dtable}/changes", "--partition", "00000003", ok=False)  # an error, too
    assert "continues batch 00000002" in outputs[-1]
    lake_logs = list((tmp_path / "lake").rglob("_delta_log/*.json"))
    assert len(lake_logs) >= 6
    for secret in (password, aws_secret):
        for text in outputs:
            assert secret not in text
        for path in tmp_path.rglob("*"):
            if path.is_file() and path != sources:
                assert secret.encode() not in path.read_bytes(), f"{secret[:6]}... found in {path}"


@pytest.mark.parametrize("storage", ["sqlite", "postgres"])
def test_account_statements_and_other_databases_ddl_reach_nothing_written(
        storage, spark, spark_server, mariadb, database, root, tmp_path, request):
    """A batch whose binlog range holds CREATE USER / ALTER USER ... IDENTIFIED BY, SET PASSWORD, a GRANT
    and DDL of a database the source does not capture: none of it, and not the source's own password,
    is in any byte the project and Dagster write (the lake, the instance's event storage on SQLite and
    on PostgreSQL, the compute logs, the Spark Connect server's log, the command's output). The
    captured table's own DDL still shows in the batch's metadata, as what it did."""
    marker = f"Mk{uuid.uuid4().hex[:12]}"
    password = f"Pw{marker}src"
    user_and_table(mariadb, root, "tight", password, "(1, 'a')")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"src": {
        "host": "127.0.0.1", "port": mariadb.port, "user": "tight", "password_env": "TIGHT_PW",
        "database": database, "tables": {"include": ["s"]}}}}))
    env = {**dagster_env(tmp_path, sources), "TIGHT_PW": password}
    pg = None
    if storage == "postgres":
        pg = request.getfixturevalue("dagster_postgres")
        (tmp_path / "dagster_home" / "dagster.yaml").write_text((ROOT / "deploy" / "dagster-postgres.yaml").read_text())
        env.update({k: v for k, v in os.environ.items() if k.startswith("DAGSTER_PG_")})

    def dump() -> str:
        """Every row of the instance's PostgreSQL tables as text ("" on SQLite, whose files are searched)."""
        if pg is None:
            return ""
        with pg.connect(os.environ["DAGSTER_PG_DB"]) as conn, conn.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            tables = [r[0] for r in cur.fetchall()]
            assert "event_logs" in tables
            rows = []
            for table in tables:
                cur.execute(f'SELECT t::text FROM "{table}" t')
                rows += [r[0] for r in cur.fetchall()]
            return "\n".join(rows)
    outputs = []

    def materialize(*args):
        run = subprocess.run([DAGSTER, "asset", "materialize", "-m", "ingest.defs.definitions", *args], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=600)
        outputs.append(run.stdout + run.stderr)
        assert run.returncode == 0, run.stderr[-3000:]

    materialize("--select", "src/s/snapshot")
    with mariadb.connect() as conn, conn.cursor() as cur:  # as root, on the same server, during the batch
        cur.execute(f"CREATE USER 'acct_{marker}'@'127.0.0.1' IDENTIFIED BY '{marker}create'")
        cur.execute(f"ALTER USER 'acct_{marker}'@'127.0.0.1' IDENTIFIED BY '{marker}alter'")
        cur.execute(f"SET PASSWORD FOR 'acct_{marker}'@'127.0.0.1' = PASSWORD('{marker}set')")
        cur.execute(f"GRANT SELECT ON `{database}`.* TO 'acct_{marker}'@'127.0.0.1'")
        cur.execute(f"CREATE DATABASE other_{marker}")
        cur.execute(f"CREATE TABLE other_{marker}.t (id INT, note VARCHAR(40) DEFAULT '{marker}default')")
        cur.execute(f"DROP DATABASE other_{marker}")
        cur.execute(f"DROP USER 'acct_{marker}'@'127.0.0.1'")
    with root.cursor() as cur:
        cur.execute("UPDATE s SET v = 'b' WHERE id = 1")
        cur.execute("ALTER TABLE s ADD COLUMN extra INT")
        cur.execute("INSERT INTO s VALUES (2, 'c', 7)")
    batch = register_batch_to_head(env, root, "src", "s")
    materialize("--select", "src/s/changes,src/s", "--partition", batch)
    ddl = latest_metadata_in(env, AssetKey(["src", "s", "changes"]))["ddl"].value
    assert ddl == [{"table": "s", "statement": "ALTER TABLE", "columns": ["ADD COLUMN extra"]}]
    assert spark.read.format("delta").load(str(tmp_path / "lake" / "src" / "s" / "silver")).where(
        "NOT _deleted").count() == 2
    searched = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file() and path != sources}
    assert any(p.suffix == ".db" for p in searched) or storage == "postgres"  # the SQLite event storage
    assert any("compute_logs" in str(p) for p in searched)
    searched.update(server_log_files(spark_server))
    searched[Path("command output")] = "\n".join(outputs).encode()
    searched[Path("PostgreSQL event storage")] = dump().encode()
    for secret in (marker, password):
        for path, data in searched.items():
            assert secret.encode() not in data, f"{secret[:8]}... found in {path}"
