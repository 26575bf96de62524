"""Row filters (tables.where): only the rows the source's own predicate holds for land, on the snapshot and
on every change batch, with the source's semantics (here a case-insensitive collation and an ENUM)."""

import json
import re
import uuid

import pytest
from dagster import AssetKey, DagsterInstance

from ingest_tests.integration.cdc_harness import CdcHarness, write_sources
from ingest_tests.integration.test_transforms import assert_no_marker_written

WHERE = "region = 'eu' AND status = 'active'"


def grant_temporary_tables(root, grant: bool = True) -> None:
    """Batches judge their changes in a temporary table (ingest/sources/mysql/filters.py)."""
    with root.cursor() as cur:
        cur.execute("GRANT CREATE TEMPORARY TABLES ON *.* TO 'ingest'@'127.0.0.1'" if grant else
                    "REVOKE CREATE TEMPORARY TABLES ON *.* FROM 'ingest'@'127.0.0.1'")


@pytest.fixture
def temporary_tables(root):
    """The privilege a filtered source's user needs, for this test only (the server is shared)."""
    grant_temporary_tables(root)
    yield
    grant_temporary_tables(root, grant=False)


def filtered_source_rows(root) -> list[tuple]:
    with root.cursor() as cur:
        cur.execute(f"SELECT id, region, name, status FROM customers WHERE {WHERE}")
        return sorted(cur.fetchall())


def test_mysql_filter_lands_only_rows_inside_and_moves_become_deletes_and_inserts(
        spark, spark_server, mariadb, database, root, tmp_path, temporary_tables):
    marker = uuid.uuid4().hex[:10]  # only in rows that are never inside the filter
    with root.cursor() as cur:
        cur.execute("CREATE TABLE customers (id INT PRIMARY KEY, region VARCHAR(10) COLLATE utf8mb4_general_ci, "
                    "name VARCHAR(60), status ENUM('active', 'closed'))")
        cur.executemany("INSERT INTO customers VALUES (%s, %s, %s, %s)", [
            (1, "EU", "Ann", "active"), (2, "us", f"Bob {marker}", "active"), (3, "Eu", "Cy", "closed"),
            (4, "eu", "Di", "active")])
    sources = write_sources(tmp_path, mariadb.port, database, ["customers"], where={"customers": WHERE},
                            history=["customers"])
    (tmp_path / "dagster").mkdir()
    h = CdcHarness(spark, sources, tmp_path / "lake", DagsterInstance.local_temp(str(tmp_path / "dagster")))
    h.snapshot()
    columns = ["id", "region", "name", "status"]
    snapshot = spark.read.format("delta").load(str(tmp_path / "lake" / "src" / "customers" / "snapshot"))
    assert sorted(tuple(r) for r in snapshot.select(*columns).collect()) == filtered_source_rows(root) == [
        (1, "EU", "Ann", "active"), (4, "eu", "Di", "active")]
    snapshot_meta = h.instance.get_latest_materialization_event(
        AssetKey(["src", "customers", "snapshot"])).asset_materialization.metadata
    assert snapshot_meta["row_filter"].value == WHERE

    with root.cursor() as cur:
        cur.execute("INSERT INTO customers VALUES (5, 'EU', 'Ed', 'active'), (6, 'us', %s, 'active')",
                    (f"Fay {marker}",))
        cur.execute("UPDATE customers SET region = 'us' WHERE id = 1")  # moves out: a delete
        cur.execute("UPDATE customers SET status = 'active' WHERE id = 3")  # moves in: an insert
        cur.execute("UPDATE customers SET name = %s WHERE id = 2", (f"Bo {marker}",))  # outside, stays out
        cur.execute("DELETE FROM customers WHERE id IN (4, 6)")  # one inside, one never inside
    assert h.sync() is not None
    assert h.live("customers", columns) == filtered_source_rows(root) == [
        (3, "Eu", "Cy", "active"), (5, "EU", "Ed", "active")]
    bronze = spark.read.format("delta").load(str(tmp_path / "lake" / "src" / "customers" / "bronze"))
    landed = sorted((r["id"], r["_op"]) for r in bronze.collect())
    assert landed == [(1, "delete"), (3, "insert"), (4, "delete"), (5, "insert")]
    # the moved-out row's delete carries the row as it was inside the filter, not its new values
    (gone,) = bronze.where("id = 1").collect()
    assert (gone["region"], gone["_before"]) == ("EU", None)

    with root.cursor() as cur:
        cur.execute("UPDATE customers SET region = 'EU' WHERE id = 1")  # back inside
        cur.execute("UPDATE customers SET name = 'Cyd' WHERE id = 3")  # inside, stays inside
    assert h.sync() is not None
    assert h.live("customers", columns) == filtered_source_rows(root) == [
        (1, "EU", "Ann", "active"), (3, "Eu", "Cyd", "active"), (5, "EU", "Ed", "active")]
    update = bronze.where("id = 3 AND _op = 'update'").collect()
    assert [json.loads(r["_before"])["name"] for r in update] == ["Cy"]

    # a batch Spark's executors decode (executor_min_bytes 0): its slices are judged there, the same way
    with root.cursor() as cur:
        cur.execute("INSERT INTO customers VALUES (7, 'eU', 'Gus', 'active'), (8, 'asia', %s, 'active')",
                    (f"Hal {marker}",))
        cur.execute("UPDATE customers SET status = 'closed' WHERE id = 5")  # moves out
        cur.execute("UPDATE customers SET region = 'EU', name = 'Bob' WHERE id = 2")  # moves in
        cur.execute("UPDATE customers SET name = %s WHERE id = 8", (f"Hu {marker}",))  # stays out
    sliced = CdcHarness(spark, write_sources(tmp_path, mariadb.port, database, ["customers"],
                                             where={"customers": WHERE}, history=["customers"],
                                             cdc={"executor_min_bytes": 0}), tmp_path / "lake", h.instance)
    assert sliced.sync() is not None
    bronze_meta = h.instance.get_latest_materialization_event(
        AssetKey(["src", "customers", "changes"])).asset_materialization.metadata
    assert bronze_meta["slices"].value >= 1  # read on the executors
    assert h.live("customers", columns) == filtered_source_rows(root) == [
        (1, "EU", "Ann", "active"), (2, "EU", "Bob", "active"), (3, "Eu", "Cyd", "active"), (7, "eU", "Gus", "active")]
    history = spark.read.format("delta").load(str(tmp_path / "lake" / "src" / "customers" / "history"))
    assert not history.where("id IN (6, 8)").count() and history.where("id = 2").count() == 1

    evaluation = h.check("customers")  # compares only the rows inside the filter
    assert evaluation.passed, evaluation.metadata
    assert_no_marker_written(marker, tmp_path, spark_server, sources)


def test_a_filter_the_table_cannot_take_fails_before_anything_is_written(
        spark, mariadb, database, root, tmp_path, temporary_tables):
    with root.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT, secret VARCHAR(10))")
        cur.execute("INSERT INTO t VALUES (1, 2, 'x')")
    for where, message in (
            ("m > 1", "table t: the row filter tables.where.t cannot be used: it names column 'm', which the "
                      "table does not have. Fix: correct the predicate"),
            ("secret = 'x'", "it names column 'secret', which tables.columns.t.exclude leaves out. Fix: filter on "
                             "a column that lands, or stop excluding it"),
            ("n >", "the server refused it (error 1064")):
        sources = write_sources(tmp_path, mariadb.port, database, ["t"], where={"t": where},
                                columns={"t": {"exclude": ["secret"]}})
        h = CdcHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral())
        result = h.run([AssetKey(["src", "t", "snapshot"])], expect_success=False)
        assert message in h.failure(result)
        assert not (tmp_path / "lake" / "src" / "t").exists()


def test_check_reports_a_bad_filter_and_a_missing_privilege(mariadb, database, root, tmp_path, temporary_tables):
    from ingest.config import load_config
    from ingest.sources.findings import FAIL, OK
    from ingest.sources.mysql.preflight import check_source

    with root.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, n INT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, n INT)")
    grant_temporary_tables(root, grant=False)
    sources = write_sources(tmp_path, mariadb.port, database, ["a", "b"], where={"a": "n > 1", "b": "nope = 1"})
    source = load_config(sources).sources["src"]

    def by_table():
        return {f.subject: f for f in check_source("src", source, ["a", "b"])}

    found = by_table()
    assert found[f"{database}.a"].level == FAIL and "GRANT CREATE TEMPORARY TABLES" in found[f"{database}.a"].message
    assert found[f"{database}.b"].level == FAIL and "column 'nope'" in found[f"{database}.b"].message
    grant_temporary_tables(root)
    found = by_table()
    assert found[f"{database}.a"].level == OK and "rows where n > 1" in found[f"{database}.a"].message


def test_a_batch_judges_every_type_as_the_server_judges_the_row_it_logged(mariadb, database, root, params,
                                                                          temporary_tables):
    """The images a batch decodes go back into the server (ingest/sources/mysql/filters.py) as the values
    the table holds: for every column of every type, edge values included, the server finds each image
    equal (`<=>`) to its own row. The one documented difference: a zero or partial-zero date and YEAR 0000
    land as NULL, and a batch judges them so."""
    from ingest.filters import RowFilter
    from ingest.sources.mysql.binlog import master_position
    from ingest.sources.mysql.cdc import read_change_batch
    from ingest.sources.mysql.filters import SCRATCH, images_inside
    from ingest.sources.mysql.positions import BatchRange
    from ingest_tests.integration.test_differential_types import OTHERS, STRINGS, _draw, _edge_rows, _load, _session

    columns = {**STRINGS, **OTHERS}
    rows = _edge_rows(columns) + _draw(columns, 60)
    with root.cursor() as cur:
        _session(cur)
        cur.execute(f"CREATE TABLE every (id INT PRIMARY KEY, "
                    f"{', '.join(f'{c} {col.type}' for c, col in columns.items())})")
        start = master_position(root)
        _load(cur, "every", columns, rows)
        end = master_position(root)
    with params.connect() as conn:
        from ingest.sources.mysql.schema import describe_table

        schema = describe_table(conn, database, "every")
    batch = read_change_batch(params, "src", BatchRange(start, end).key, {"every": schema.captured()})
    images = [r.row for r in batch.tables["every"].records]
    assert sorted(i["id"] for i in images) == list(range(len(rows)))
    zero_or_null = {}  # (column, id) of server values that land as NULL but are not NULL
    with root.cursor() as cur:
        _session(cur)
        for c in ("d", "dt0", "dt6", "ts6", "y"):
            cur.execute(f"SELECT id FROM every WHERE {c} IS NOT NULL AND ({c} = 0 OR {c} LIKE '%-00%')")
            zero_or_null[c] = {r[0] for r in cur.fetchall()}
    with params.connect() as conn:
        for c in columns:
            same = RowFilter("every", f"EXISTS (SELECT 1 FROM `{database}`.every AS s WHERE s.id = {SCRATCH}.id "
                                      f"AND s.{c} <=> {SCRATCH}.{c})")
            judged = images_inside(conn, database, "every", schema.columns, same, images)
            differ = {i["id"] for i, held in zip(images, judged) if not held}
            assert differ == zero_or_null.get(c, set()), f"column {c} ({columns[c].type})"


def pg_source(tmp_path, pg, where: dict, table: str = "accounts", **cdc):
    import yaml

    from ingest_tests.integration.cdc_harness import HARNESS_CDC

    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump({"sources": {"pgf": {
        "kind": "postgres", "host": pg.host, "port": pg.port, "user": pg.user,
        "password_env": "INGEST_TEST_PG_PASSWORD", "database": "postgres", "publication": f"{table}_pub",
        "slot": "pgf_slot", "tables": {"include": [table], "where": where}, "cdc": {**HARNESS_CDC, **cdc}}}}))
    return path


PG_WHERE = "region ILIKE 'eu' AND status = 'active'"


def pg_table(pg, table: str, *statements: tuple) -> None:
    """`table` made afresh by `statements` (SQL, parameters), with a publication of its own."""
    with pg.connect() as conn:
        conn.execute(f"DROP PUBLICATION IF EXISTS {table}_pub")
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        for sql, params in statements:
            conn.execute(sql, params)
        conn.execute(f"CREATE PUBLICATION {table}_pub FOR TABLE {table}")


def drop_slot(pg, slot: str = "pgf_slot") -> None:
    with pg.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                     (slot,))


def test_postgres_filter_lands_only_rows_inside_and_an_unsent_toasted_value_is_judged_and_kept(
        spark, spark_server, pg, tmp_path, monkeypatch):
    marker = uuid.uuid4().hex[:10]
    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    pg_table(pg, "accounts",
             ("CREATE TABLE accounts (id int PRIMARY KEY, region text, owner text, status text, notes text)", ()),
             ("ALTER TABLE accounts REPLICA IDENTITY FULL", ()),
             # notes: past the TOAST threshold and incompressible (md5 text), so an update that leaves it
             # alone does not send it
             ("INSERT INTO accounts VALUES (1, 'EU', 'Ann', 'active', NULL), (2, 'us', %s, 'active', NULL), "
              "(3, 'Eu', 'Cy', 'closed', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g)), "
              "(4, 'eu', 'Di', 'active', NULL)", (f"Bob {marker}",)))

    def source_rows():
        with pg.connect() as conn:
            return sorted(conn.execute(f"SELECT id, region, owner, status, notes FROM accounts WHERE {PG_WHERE}"
                                       .replace("%", "%%")).fetchall())

    sources = pg_source(tmp_path, pg, {"accounts": PG_WHERE})
    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster"))
    columns = ["id", "region", "owner", "status", "notes"]
    try:
        h = CdcHarness(spark, sources, tmp_path / "lake", instance, name="pgf")
        h.snapshot()
        snapshot = spark.read.format("delta").load(str(tmp_path / "lake" / "pgf" / "accounts" / "snapshot"))
        assert sorted(tuple(r) for r in snapshot.select(*columns).collect()) == source_rows()
        assert [r[0] for r in source_rows()] == [1, 4]
        with pg.connect() as conn:
            conn.execute("INSERT INTO accounts VALUES (5, 'EU', 'Ed', 'active', NULL), (6, 'us', %s, 'active', NULL)",
                         (f"Fay {marker}",))
            conn.execute("UPDATE accounts SET region = 'us' WHERE id = 1")  # moves out: a delete
            conn.execute("UPDATE accounts SET status = 'active' WHERE id = 3")  # moves in, notes not sent
            conn.execute("UPDATE accounts SET owner = %s WHERE id = 2", (f"Bo {marker}",))  # stays out
            conn.execute("DELETE FROM accounts WHERE id IN (4, 6)")
        assert h.sync() is not None
        assert h.live("accounts", columns) == source_rows()
        assert [r[0] for r in source_rows()] == [3, 5] and len(source_rows()[0][4]) == 400 * 32
        bronze = spark.read.format("delta").load(str(tmp_path / "lake" / "pgf" / "accounts" / "bronze"))
        assert sorted((r["id"], r["_op"]) for r in bronze.collect()) == [
            (1, "delete"), (3, "insert"), (4, "delete"), (5, "insert")]

        # a batch Spark's executors read from the slot (executor_min_bytes 0): judged there the same way
        with pg.connect() as conn:
            conn.execute("INSERT INTO accounts VALUES (7, 'eU', 'Gus', 'active', NULL), (8, 'asia', %s, 'active', "
                         "NULL)", (f"Hal {marker}",))
            conn.execute("UPDATE accounts SET status = 'closed' WHERE id = 5")  # moves out
            conn.execute("UPDATE accounts SET owner = 'Cyd' WHERE id = 3")  # stays in, notes not sent
            conn.execute("UPDATE accounts SET owner = %s WHERE id = 8", (f"Hu {marker}",))  # stays out
        h = CdcHarness(spark, pg_source(tmp_path, pg, {"accounts": PG_WHERE}, executor_min_bytes=0),
                       tmp_path / "lake", instance, name="pgf")
        assert h.sync() is not None
        bronze_meta = instance.get_latest_materialization_event(
            AssetKey(["pgf", "accounts", "changes"])).asset_materialization.metadata
        assert bronze_meta["read_on_executors"].value is True
        assert h.live("accounts", columns) == source_rows()
        assert [r[0] for r in source_rows()] == [3, 7] and source_rows()[0][2] == "Cyd"
        assert len(source_rows()[0][4]) == 400 * 32
        evaluation = h.check("accounts")
        assert evaluation.passed, evaluation.metadata
        assert_no_marker_written(marker, tmp_path, spark_server, sources)
    finally:
        instance.dispose()
        drop_slot(pg)


def test_postgres_filter_needs_replica_identity_full_and_real_columns(spark, pg, tmp_path, monkeypatch):
    from ingest.config import load_config
    from ingest.defs.postgres import check_postgres
    from ingest.sources.findings import FAIL

    monkeypatch.setenv("INGEST_TEST_PG_PASSWORD", pg.password)
    pg_table(pg, "plain", ("CREATE TABLE plain (id int PRIMARY KEY, n int)", ()),
             ("INSERT INTO plain VALUES (1, 2)", ()))
    try:
        for where, message in (
                ("n > 1", "table public.plain: a row filter (tables.where) needs the table's REPLICA IDENTITY FULL"),
                ("m > 1", 'table public.plain: the row filter tables.where.plain cannot be used: it names a column '
                          'the table does not have (column "m" does not exist). Fix: correct the predicate')):
            if where == "m > 1":
                with pg.connect() as conn:
                    conn.execute("ALTER TABLE plain REPLICA IDENTITY FULL")
            sources = pg_source(tmp_path, pg, {"plain": where}, "plain")
            h = CdcHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral(), name="pgf")
            result = h.run([AssetKey(["pgf", "plain", "snapshot"])], expect_success=False)
            assert message in h.failure(result)
            assert not (tmp_path / "lake" / "pgf" / "plain").exists()
            found = {f.subject: f for f in check_postgres("pgf", load_config(sources).sources["pgf"])}
            assert found["public.plain"].level == FAIL and message in found["public.plain"].message
    finally:
        drop_slot(pg)


DYNAMODB_FILTERS = [  # (expression, values): every form of the grammar, edge types included
    ("st1 = :a", {":a": "open"}),
    ("st1 <> :a", {":a": "open"}),
    ("st1 < :a", {":a": "o"}),
    ("st1 >= :a", {":a": "\u00e9"}),
    ("amt1 > :n", {":n": 5}),
    ("amt1 <= :n", {":n": -1.5}),
    ("amt1 = :n", {":n": "7"}),
    ("amt1 BETWEEN :lo AND :hi", {":lo": 0, ":hi": 10}),
    ("mx1 > :n", {":n": 0}),
    ("mx1 <> :n", {":n": 3}),
    ("st1 IN (:a, :b, :c)", {":a": "open", ":b": "Open", ":c": "\u00fcber"}),
    ("begins_with(st1, :p)", {":p": "op"}),
    ("begins_with(bn1, :p)", {":p": {"B": "AQ=="}}),
    ("contains(st1, :p)", {":p": "e"}),
    ("contains(tg1, :p)", {":p": "x"}),
    ("contains(ls1, :p)", {":p": 2}),
    ("size(st1) > :n", {":n": 4}),
    ("size(tg1) = :n", {":n": 2}),
    ("size(ls1) >= :n", {":n": 2}),
    ("size(bn1) < :n", {":n": 2}),
    ("attribute_exists(amt1) AND NOT attribute_exists(mx1)", {}),
    ("attribute_not_exists(fl1) OR fl1 = :t", {":t": True}),
    ("attribute_type(mx1, :t)", {":t": "S"}),
    ("ns1.a > :n", {":n": 1}),
    ("ns1.b = :s", {":s": "x"}),
    ("ls1[1] = :n", {":n": 2}),
    ("NOT st1 = :a AND amt1 > :n OR fl1 = :t", {":a": "open", ":n": 3, ":t": False}),
    ("NOT (st1 = :a AND (amt1 > :n OR fl1 = :t))", {":a": "open", ":n": 3, ":t": False}),
    ("#s = :a", {":a": "closed"}),
    ("gn1 = :a", {":a": "x"}),
    ("gn1 <> :a", {":a": "x"}),
    ("nl1 = :z", {":z": None}),
    ("tg1 = :set", {":set": {"SS": ["y", "x"]}}),
    ("ns1 = :m", {":m": {"a": 2, "b": "x"}}),
]


def random_items(n: int) -> list[dict]:
    """Typed ls1 with attributes that are there or not, of more than one type, ns1 and unicode."""
    import base64
    import random

    rng = random.Random(50)

    def maybe(value):
        return value if rng.random() < 0.8 else None

    out = []
    for i in range(n):
        item = {"id": {"S": f"i{i:03d}"},
                "st1": maybe({"S": rng.choice(["open", "Open", "closed", "o", "\u00fcber", "\u00e9t\u00e9", "op", "", "\U0001F600abc"])
                             if rng.random() < 0.95 else "x"}),
                "amt1": maybe({"N": rng.choice(["5", "7", "7.0", "-1.5", "10", "0", "1e2", "3.25", "-20"])}),
                "mx1": maybe(rng.choice([{"N": "3"}, {"S": "3"}, {"N": "-2"}, {"S": "b"}, {"BOOL": True}])),
                "tg1": maybe({"SS": rng.sample(["x", "y", "z"], rng.randint(1, 3))}),
                "ls1": maybe({"L": [{"N": str(rng.randint(0, 3))} for _ in range(rng.randint(0, 3))]}),
                "bn1": maybe({"B": base64.b64decode(rng.choice(["AQ==", "AQI=", "Ag==", "AQID"]))}),
                "fl1": maybe({"BOOL": rng.random() < 0.5}),
                "ns1": maybe({"M": {"a": {"N": str(rng.randint(0, 3))}, "b": {"S": rng.choice(["x", "y"])}}}),
                "nl1": maybe(rng.choice([{"NULL": True}, {"S": "v"}]))}
        out.append({k: v for k, v in item.items() if v is not None})
    return out


def test_dynamodb_conditions_judge_items_as_dynamodb_local_does(dynamodb):
    """The stream path's evaluator (ingest/sources/dynamodb/conditions.py) against the Scan path's: DynamoDB
    Local's FilterExpression over the same items, expression by expression."""
    import boto3

    from ingest.sources.dynamodb.conditions import condition, scan_arguments
    from ingest_tests.integration.dynamodb_harness import create_table, unique

    client = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    table = create_table(client, unique("cond"))
    items = random_items(300)
    by_id = {i["id"]["S"]: i for i in items}
    for item in items:
        client.put_item(TableName=table, Item=item)
    wrong = []
    for expression, values in DYNAMODB_FILTERS:
        spec = {"expression": expression, "names": {"#s": "st1"} if "#s" in expression else {}, "values": values}
        found, kwargs = set(), {"TableName": table, **scan_arguments(spec)}
        while True:
            page = client.scan(**kwargs)
            found |= {i["id"]["S"] for i in page["Items"]}
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        judged = {i["id"]["S"] for i in items if condition(spec).holds(i)}
        if judged != found:
            wrong.append((expression, [by_id[i] for i in sorted(judged - found)[:2]],
                          [by_id[i] for i in sorted(found - judged)[:2]]))
    assert not wrong, wrong


def test_dynamodb_filter_lands_only_items_inside_on_the_scan_and_the_stream(spark, spark_server, dynamodb, tmp_path):
    import boto3

    from ingest.sources.dynamodb.conditions import scan_arguments
    from ingest_tests.integration.dynamodb_harness import DynamoHarness, create_table, unique, write_sources

    marker = uuid.uuid4().hex[:10]  # only in items that are never inside the filter
    client = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    table = create_table(client, unique("carts"))
    where = {"expression": "st1 = :open AND begins_with(#r, :eu)", "names": {"#r": "region"},
             "values": {":open": "open", ":eu": "eu"}}

    def put(i: int, st: str, region: str, owner: str = "x") -> None:
        client.put_item(TableName=table, Item={"id": {"S": f"c{i}"}, "st1": {"S": st}, "region": {"S": region},
                                               "owner": {"S": owner}})

    def inside_now() -> list[str]:
        found, kwargs = [], {"TableName": table, **scan_arguments(where)}
        while True:
            page = client.scan(**kwargs)
            found += [i["id"]["S"] for i in page["Items"]]
            if "LastEvaluatedKey" not in page:
                return sorted(found)
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    put(1, "open", "eu-west"), put(2, "open", "us", f"Bob {marker}"), put(3, "closed", "eu"), put(4, "open", "eu-north")
    sources = write_sources(tmp_path, dynamodb.endpoint_url, [table], name="ddb", where={table: where})
    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster"))
    try:
        h = DynamoHarness(spark, sources, tmp_path / "lake", instance, dynamodb.endpoint_url, name="ddb")
        h.snapshot(table)
        snapshot = spark.read.format("delta").load(h.path(table, "snapshot"))
        assert sorted(r["id"] for r in snapshot.collect()) == inside_now() == ["c1", "c4"]
        put(5, "open", "eu"), put(6, "open", "us", f"Fay {marker}")
        put(1, "open", "us")  # moves out: a delete
        put(3, "open", "eu")  # moves in: an insert
        put(2, "open", "us", f"Bo {marker}")  # stays out
        client.delete_item(TableName=table, Key={"id": {"S": "c4"}})
        client.delete_item(TableName=table, Key={"id": {"S": "c6"}})
        assert h.sync_until_idle()
        assert sorted(r[0] for r in h.silver_rows(table)) == inside_now() == ["c3", "c5"]
        bronze = spark.read.format("delta").load(h.path(table, "bronze"))
        # the stream also holds the items' first puts (before the snapshot): the ones inside land again
        assert sorted({(r["id"], r["_op"]) for r in bronze.collect()}) == [
            ("c1", "delete"), ("c1", "insert"), ("c3", "insert"), ("c4", "delete"), ("c4", "insert"), ("c5", "insert")]
        evaluation = h.check(table)
        assert evaluation.passed, evaluation.metadata
        assert_no_marker_written(marker, tmp_path, spark_server, sources)
    finally:
        instance.dispose()


def test_a_dynamodb_filter_dynamodb_refuses_fails_the_snapshot_before_anything_is_written(
        spark, dynamodb, tmp_path):
    import boto3

    from ingest_tests.integration.dynamodb_harness import DynamoHarness, create_table, unique, write_sources

    client = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1")
    table = create_table(client, unique("refused"))
    sources = write_sources(tmp_path, dynamodb.endpoint_url, [table], name="ddb",
                            where={table: {"expression": "status = :a", "values": {":a": "open"}}})
    h = DynamoHarness(spark, sources, tmp_path / "lake", DagsterInstance.ephemeral(), dynamodb.endpoint_url,
                      name="ddb")
    result = h.run([AssetKey(["ddb", table, "snapshot"])], expect_success=False)
    assert f"table {table}: DynamoDB refused the row filter where.{table}" in h.failure(result)
    assert "reserved keyword: status" in h.failure(result)
    assert not (tmp_path / "lake" / "ddb" / table).exists()


def test_a_dynamodb_filter_that_does_not_parse_is_refused_at_load(tmp_path):
    from ingest.config import ConfigError, load_config
    from ingest_tests.integration.dynamodb_harness import write_sources

    for where, message in (({"expression": "st1 = :nope"}, "value :nope is not defined (values)"),
                           ({"expression": "st1 = = :a", "values": {":a": 1}}, "expected an attribute or a :value"),
                           ({"expression": "#x = :a", "values": {":a": 1}}, "name #x is not defined (names)")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(write_sources(tmp_path, "http://127.0.0.1:1", ["carts"], where={"carts": where}))
