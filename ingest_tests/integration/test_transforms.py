"""Column transforms (hash, mask, truncate, null): applied before anything is written, the same on every
path, and the raw values of transformed columns in no byte the project writes."""

import hashlib
import json
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from dagster import AssetKey, DagsterInstance

from ingest_tests.integration.cdc_harness import HARNESS_CDC, CdcHarness, write_sources
from ingest_tests.probes import server_log_files

SALT = f"salt-{uuid.uuid4().hex}"
TRANSFORMS = {
    "email": {"hash": {"salt_env": "TEST_PII_SALT"}},
    "amount": {"hash": {"salt_env": "TEST_PII_SALT"}},
    "phone": {"mask": {"keep_last": 4}},
    "bio": {"truncate": 6},
    "ssn": None,
}


def digest(text: str) -> str:
    """What the lake must hold for a hashed value, computed here from the definition (salt, then text)."""
    return hashlib.sha256(SALT.encode() + text.encode()).hexdigest()


def masked(phone: str) -> str:
    return "*" * (len(phone) - 4) + phone[-4:]


@pytest.fixture
def salted(monkeypatch):
    monkeypatch.setenv("TEST_PII_SALT", SALT)


def written_text(root: Path) -> dict[Path, bytes]:
    """Every file under `root` as bytes, and each Parquet file's values decoded as well: a value in a
    compressed page would not show in its bytes."""
    out = {}
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        out[path] = path.read_bytes()
        if path.suffix == ".parquet":
            values = pq.read_table(path).to_pylist()
            out[path.with_name(path.name + "#values")] = json.dumps(values, default=str).encode()
    return out


def test_mysql_snapshot_and_batches_land_only_transformed_values(spark, spark_server, mariadb, database, root, tmp_path,
                                                                  salted):
    marker = uuid.uuid4().hex[:10]
    raw = {  # what must never be written: each transformed column's raw value holds the marker
        1: (f"ann-{marker}@example.com", f"555{marker}0101", f"Bio-1 {marker}", f"ssn-{marker}-1", "12.50"),
        2: (f"bob-{marker}@example.com", f"555{marker}0202", f"Bio-2 {marker}", f"ssn-{marker}-2", "7.00"),
    }
    with root.cursor() as cur:
        cur.execute("CREATE TABLE people (id INT PRIMARY KEY, email VARCHAR(80), phone VARCHAR(40), bio TEXT, "
                    "ssn VARCHAR(40), amount DECIMAL(10,2), city VARCHAR(20))")
        for k, (e, p, b, s, a) in raw.items():
            cur.execute("INSERT INTO people VALUES (%s, %s, %s, %s, %s, %s, 'Oslo')", (k, e, p, b, s, a))
    sources = write_sources(tmp_path, mariadb.port, database, ["people"],
                            columns={"people": {"transform": TRANSFORMS}}, history=["people"])
    (tmp_path / "dagster").mkdir()
    h = CdcHarness(spark, sources, tmp_path / "lake", DagsterInstance.local_temp(str(tmp_path / "dagster")))
    h.snapshot()
    # a batch the run decodes, then one Spark's executors decode (executor_min_bytes 0)
    with root.cursor() as cur:
        cur.execute("UPDATE people SET email = %s, amount = 13.5 WHERE id = 1", (f"ann2-{marker}@example.com",))
        cur.execute("INSERT INTO people VALUES (3, %s, '12', 'short', %s, 1.00, 'Rome')",
                    (f"cy-{marker}@example.com", f"ssn-{marker}-3"))
    assert h.sync() is not None
    with root.cursor() as cur:
        cur.execute("DELETE FROM people WHERE id = 2")
        cur.execute("UPDATE people SET bio = %s WHERE id = 3", (f"Longer {marker}",))
    big = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["people"],
                                          columns={"people": {"transform": TRANSFORMS}}, history=["people"],
                                          cdc={"executor_min_bytes": 0}),
                     tmp_path / "lake", h.instance)
    assert big.sync() is not None

    expected = [
        (1, digest(f"ann2-{marker}@example.com"), masked(raw[1][1]), raw[1][2][:6], None, digest("13.50"), "Oslo"),
        (3, digest(f"cy-{marker}@example.com"), "**", f"Longer {marker}"[:6], None, digest("1.00"), "Rome"),
    ]
    assert h.live("people", ["id", "email", "phone", "bio", "ssn", "amount", "city"]) == expected
    # bronze's before image of the update holds the old email hashed like the column would
    bronze = spark.read.format("delta").load(str(tmp_path / "lake" / "src" / "people" / "bronze"))
    befores = [json.loads(r["_before"]) for r in bronze.where("_op = 'update' AND id = 1").collect()]
    assert befores and befores[0]["email"] == digest(raw[1][0]) and befores[0]["amount"] == digest("12.50")
    assert befores[0]["ssn"] is None and befores[0]["phone"] == masked(raw[1][1])
    assert dict(bronze.dtypes)["email"] == "string" and dict(bronze.dtypes)["amount"] == "string"

    history = spark.read.format("delta").load(str(tmp_path / "lake" / "src" / "people" / "history"))
    assert sorted(r["email"] for r in history.where("id = 1").collect()) == sorted(
        [digest(raw[1][0]), digest(f"ann2-{marker}@example.com")])  # both versions of the key, hashed
    evaluation = h.check("people")
    assert evaluation.passed, evaluation.metadata
    assert_no_marker_written(marker, tmp_path, spark_server, sources)


def assert_no_marker_written(marker: str, tmp_path: Path, spark_server, sources: Path) -> None:
    """No byte under `tmp_path` (lake, instance, compute logs) nor the Spark server's logs holds `marker`."""
    written = {**written_text(tmp_path), **server_log_files(spark_server)}
    assert any(p.suffix == ".parquet" for p in written) and any("compute_logs" in str(p) for p in written)
    for path, data in written.items():  # every raw value holds the marker where a transform hides it
        if path != sources:
            assert marker.encode() not in data, f"a raw value of a transformed column in {path}"


def test_postgres_hashed_key_snapshot_batches_and_reconciliation(spark, spark_server, pg, tmp_path, monkeypatch,
                                                                  salted):
    """A hashed primary key is still the key: updates and deletes find their rows in silver, on the run's
    batches and on the executors' alike, and reconciliation compares the hashed rows."""
    marker = uuid.uuid4().hex[:10]
    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    with pg.connect() as conn:
        conn.execute("DROP PUBLICATION IF EXISTS members_pub")
        conn.execute("DROP TABLE IF EXISTS members")
        conn.execute("CREATE TABLE members (email text PRIMARY KEY, phone text, note text, score numeric(8,2))")
        conn.execute("INSERT INTO members SELECT 'm' || g || '-' || %s || '@x.org', '+47' || %s || lpad(g::text, 4, '0'), "
                     "'Note ' || %s, g * 1.5 FROM generate_series(1, 30) g", (marker, marker, marker))
        conn.execute("CREATE PUBLICATION members_pub FOR TABLE members")
    sources = tmp_path / "sources.yaml"

    def write(executor_min_bytes: int) -> CdcHarness:
        sources.write_text(yaml.safe_dump({"sources": {"pgm": {
            "kind": "postgres", "host": pg.host, "port": pg.port, "user": pg.user,
            "password_env": "INGEST_TEST_PG_PASSWORD", "database": "postgres", "publication": "members_pub",
            "slot": "pgm_slot", "tables": {"include": ["members"], "columns": {"members": {"transform": {
                "email": {"hash": {"salt_env": "TEST_PII_SALT"}}, "phone": {"mask": {"keep_first": 3, "keep_last": 2}},
                "note": {"truncate": 4}, "score": None}}}},
            "cdc": {**HARNESS_CDC, "executor_min_bytes": executor_min_bytes}}}}))
        return CdcHarness(spark, sources, tmp_path / "lake", instance, name="pgm")

    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster"))
    try:
        h = write(64 * 2**20)
        h.snapshot()
        with pg.connect() as conn:
            conn.execute("UPDATE members SET phone = '+4799' || %s WHERE email LIKE 'm1-%%'", (marker,))
            conn.execute("DELETE FROM members WHERE email LIKE 'm2-%%'")
        assert h.sync() is not None
        h = write(0)  # the next batch is read on Spark's executors
        with pg.connect() as conn:
            conn.execute("UPDATE members SET note = 'Later ' || %s WHERE email LIKE 'm3-%%'", (marker,))
            conn.execute("INSERT INTO members VALUES ('new-' || %s || '@x.org', '12', NULL, 2)", (marker,))
        assert h.sync() is not None
        with pg.connect() as conn:
            source = conn.execute("SELECT email, phone, note FROM members").fetchall()
        expected = sorted((digest(e), p[:3] + "*" * (len(p) - 5) + p[-2:] if len(p) > 5 else "*" * len(p),
                           n[:4] if n is not None else None, None) for e, p, n in source)
        assert h.live("members", ["email", "phone", "note", "score"]) == expected
        evaluation = h.check("members")
        assert evaluation.passed, evaluation.metadata
        assert_no_marker_written(marker, tmp_path, spark_server, sources)
    finally:
        instance.dispose()
        with pg.connect() as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = 'pgm_slot'")


def test_dynamodb_attributes_transformed_in_columns_and_in_item(spark, spark_server, dynamodb, tmp_path, salted):
    """A hashed key, a hashed declared number, masked text, and attributes no column declares (transformed
    inside `_item`): the same on the Scan and on the stream, and reconciliation agrees."""
    import boto3

    from ingest_tests.integration.dynamodb_harness import DynamoHarness, create_table, unique

    marker = uuid.uuid4().hex[:10]
    client = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    table = create_table(client, unique("pii"))

    def item(i: int, note: str = "Note") -> dict:
        return {"id": {"S": f"user-{i}-{marker}"}, "total": {"N": f"{i}.5"}, "nick": {"S": f"N{marker}{i:02d}"},
                "email": {"S": f"u{i}-{marker}@x.org"}, "note": {"S": f"{note} {marker}"}, "city": {"S": "Oslo"}}

    for i in range(1, 4):
        client.put_item(TableName=table, Item=item(i))
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": {"ddb": {
        "kind": "dynamodb", "region": "us-east-1", "endpoint_url": dynamodb.endpoint_url, "tables": [table],
        "attributes": {table: {"total": "decimal(12,2)", "nick": "string"}},
        "transform": {table: {"id": {"hash": {"salt_env": "TEST_PII_SALT"}},
                              "total": {"hash": {"salt_env": "TEST_PII_SALT"}},
                              "nick": {"mask": {"keep_last": 2}}, "email": {"hash": {"salt_env": "TEST_PII_SALT"}},
                              "note": {"truncate": 4}}},
        "snapshot": {"segments": 2, "segments_per_commit": 1}, "cdc": HARNESS_CDC}}}))
    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster"))
    try:
        h = DynamoHarness(spark, sources, tmp_path / "lake", instance, dynamodb.endpoint_url, name="ddb")
        h.snapshot(table)
        client.put_item(TableName=table, Item=item(2, note="Changed"))
        client.put_item(TableName=table, Item=item(4))
        client.delete_item(TableName=table, Key={"id": {"S": f"user-3-{marker}"}})
        assert h.sync_until_idle()
        rows = live_silver(spark, h.path(table, "silver"))
        assert sorted(rows) == sorted(
            (digest(f"user-{i}-{marker}"), digest(f"{i}.50"), "*" * 11 + f"{i:02d}",
             {"city": "Oslo", "email": digest(f"u{i}-{marker}@x.org"), "id": digest(f"user-{i}-{marker}"),
              "nick": "*" * 11 + f"{i:02d}", "note": ("Chan" if i == 2 else "Note"), "total": digest(f"{i}.50")})
            for i in (1, 2, 4))
        evaluation = h.check(table)
        assert evaluation.passed, evaluation.metadata
        assert_no_marker_written(marker, tmp_path, spark_server, sources)
    finally:
        instance.dispose()


def live_silver(spark, path: str) -> list[tuple]:
    from ingest.lake.merge import live_rows

    return [(r["id"], r["total"], r["nick"], json.loads(r["_item"]))
            for r in live_rows(spark.read.format("delta").load(path)).collect()]


def test_a_transform_the_table_cannot_take_fails_the_snapshot_before_anything_is_written(
        spark, mariadb, database, root, tmp_path, monkeypatch):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT)")
        cur.execute("INSERT INTO t VALUES (1, 2)")
    for transform, message in (
            ({"mail": None}, "table t: tables.columns.t.transform.mail: the table has no column 'mail' (it has id, n). "
                             "Fix: correct the name or remove the transform"),
            ({"n": {"truncate": 2}}, "truncate applies to text columns, and n is int. Fix: hash or null it instead"),
            ({"n": {"hash": {"salt_env": "UNSET_TEST_SALT"}}}, "environment variable UNSET_TEST_SALT is not set")):
        monkeypatch.delenv("UNSET_TEST_SALT", raising=False)
        sources = write_sources(tmp_path, mariadb.port, database, ["t"], columns={"t": {"transform": transform}})
        h = CdcHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral())
        result = h.run([AssetKey(["src", "t", "snapshot"])], expect_success=False)
        assert message in h.failure(result)
        assert not (tmp_path / "lake" / "src" / "t").exists()
