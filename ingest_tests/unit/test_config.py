import pytest
import yaml
from hypothesis import given, settings, strategies as st

from ingest.config import ConfigError, load_config, parse_config

GOOD = {
    "sources": {
        "shop": {
            "host": "127.0.0.1", "port": 3306, "user": "ingest", "password_env": "SHOP_PW",
            "database": "shop", "tables": {"include": ["orders", "order_*"], "exclude": ["*_tmp"]},
            "snapshot": {"chunk_size": 1000, "parallelism": 4},
        }
    }
}


def write(tmp_path, data):
    path = tmp_path / "sources.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_good_config_loads(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    shop = cfg.sources["shop"]
    assert shop.snapshot.chunk_size == 1000 and shop.snapshot.chunks_per_commit == 128  # the default
    assert shop.tables.select(["orders", "order_lines", "order_tmp", "users"]) == ["order_lines", "orders"]
    assert not shop.tables.is_static()


def opted(tmp_path, key: str, mysql: list[str], dynamodb: list[str]):
    """A MySQL source `shop` and a DynamoDB source `events` with the per-table list `key`; the file's data
    and the two sources."""
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["sources"]["shop"]["tables"][key] = mysql
    data["sources"].update(yaml.safe_load(yaml.safe_dump(DYNAMO))["sources"])
    data["sources"]["events"][key] = dynamodb
    cfg = load_config(write(tmp_path, data))
    return data, cfg.sources["shop"], cfg.sources["events"]


def test_deletion_vectors_are_a_per_table_opt_in(tmp_path):
    data, shop, events = opted(tmp_path, "deletion_vectors", ["order_*"], ["users"])
    assert [t for t in ("orders", "order_lines") if shop.layout(t).deletion_vectors] == ["order_lines"]
    assert events.layout("users").deletion_vectors and not events.layout("orders").deletion_vectors
    data["sources"]["shop"]["tables"]["deletion_vectors"] = ["a; drop"]
    with pytest.raises(ConfigError, match="sources.shop.tables.deletion_vectors"):
        load_config(write(tmp_path, data))


def test_the_change_data_feed_is_on_unless_a_table_opts_out(tmp_path):
    from ingest.lake.merge import CHANGE_DATA_FEED, DELETION_VECTORS

    data, shop, events = opted(tmp_path, "without_change_feed", ["order_l*"], ["users"])
    assert [t for t in ("orders", "order_lines") if not shop.layout(t).change_feed] == ["order_lines"]
    assert not events.layout("users").change_feed and events.layout("orders").change_feed
    # the properties a table is made with, and set on one opted in or out later
    assert shop.layout("orders").wanted(["id", "v"]) == {CHANGE_DATA_FEED: "true"}
    assert shop.layout("order_lines").wanted(["id", "v"]) == {CHANGE_DATA_FEED: "false"}
    # Delta 4.4's MERGE cannot build the feed of a column named with a backtick: such a table has none
    assert shop.layout("orders").wanted(["id", "a`b"]) == {}
    data["sources"]["shop"]["tables"]["deletion_vectors"] = ["order_lines"]
    both = load_config(write(tmp_path, data)).sources["shop"].layout("order_lines")
    assert both.wanted(["id"]) == {CHANGE_DATA_FEED: "false", DELETION_VECTORS: "true"}
    assert both.history().wanted(["id"]) == {CHANGE_DATA_FEED: "false"}  # history never takes deletion vectors
    data["sources"]["events"]["without_change_feed"] = ["nosuch"]
    with pytest.raises(ConfigError, match="without_change_feed: 'nosuch' is not one of the source's tables"):
        load_config(write(tmp_path, data))


def test_every_field_has_a_docstring():
    from ingest.config import CdcSettings, MySQLSource, PostgresSource, SnapshotSettings, TableSelection

    for model in (MySQLSource, PostgresSource, SnapshotSettings, TableSelection, CdcSettings):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


@pytest.mark.parametrize("mutate, where, fix", [
    (lambda s: s.update(bogus=1), "sources.shop.bogus", "remove the key"),
    (lambda s: s.pop("database"), "sources.shop.database", "add the key"),
    (lambda s: s.update(port="x"), "sources.shop.port", "correct the value"),
    (lambda s: s["snapshot"].update(chunk_size=0), "sources.shop.snapshot.chunk_size", "correct the value"),
    (lambda s: s["tables"].update(include=["a; drop"]), "sources.shop.tables.include", "correct the value"),
    (lambda s: s.update(password_env="1BAD"), "sources.shop.password_env", "correct the value"),
])
def test_errors_name_file_key_and_fix(tmp_path, mutate, where, fix):
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    mutate(data["sources"]["shop"])
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(path) in str(exc.value) and where in str(exc.value) and f"Fix: {fix}" in str(exc.value)


def test_a_password_in_the_file_is_refused(tmp_path):
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["sources"]["shop"]["password"] = "hunter2"
    with pytest.raises(ConfigError, match="sources.shop.password: secrets are not read from the file") as exc:
        load_config(write(tmp_path, data))
    assert "hunter2" not in str(exc.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no such sources file"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "sources: [unclosed"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_hostile_source_name_is_refused():
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["sources"]["../../etc"] = data["sources"].pop("shop")
    with pytest.raises(ConfigError, match="source name"):
        parse_config(data, "f.yaml")


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["host", "port", "user", "password_env", "database", "tables",
                                        "snapshot", "extra"]), junk, max_size=8))
def test_fuzzed_sources_give_config_errors_only(source):
    """Whatever is in the file, the outcome is a config or a ConfigError, never another exception."""
    try:
        parse_config({"sources": {"s": source}}, "fuzz.yaml")
    except ConfigError as exc:
        assert "fuzz.yaml" in str(exc)


DYNAMO = {"sources": {"events": {
    "kind": "dynamodb", "region": "eu-west-1", "endpoint_url": "http://127.0.0.1:5055",
    "tables": ["orders", "users"], "attributes": {"orders": {"total": "decimal(12,2)", "tags": "array<string>"}},
    "snapshot": {"segments": 16}, "cdc": {"max_records": 5000},
}}}


def test_a_dynamodb_source_loads_beside_a_mysql_one(tmp_path):
    from ingest.config import DynamoDBSource, MySQLSource, ScanSettings, StreamSettings

    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["sources"].update(DYNAMO["sources"])
    cfg = load_config(write(tmp_path, data))
    assert isinstance(cfg.sources["shop"], MySQLSource) and isinstance(cfg.sources["events"], DynamoDBSource)
    assert cfg.sources["events"].snapshot.segments == 16 and cfg.sources["events"].cdc.page_limit == 1000
    for model in (DynamoDBSource, ScanSettings, StreamSettings):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


@pytest.mark.parametrize("mutate, where", [
    (lambda s: s["attributes"]["orders"].update(total="money"), "attributes.orders.total: unknown type 'money'"),
    (lambda s: s["attributes"].update(nosuch={"a": "string"}), "attributes.nosuch: not one of the source's tables"),
    (lambda s: s.update(deletion_vectors=["nosuch"]), "deletion_vectors: 'nosuch' is not one of the source's tables"),
    (lambda s: s.update(tables=["bad-name"]), "sources.events.tables"),
    (lambda s: s["cdc"].update(page_limit=5000), "sources.events.cdc.page_limit"),
    (lambda s: s.update(kind="oracle"), "kind must be mysql, dynamodb or postgres"),
    (lambda s: s.update(aws_secret_access_key="x"), "secrets are not read from the file"),
])
def test_dynamodb_errors_name_the_key(tmp_path, mutate, where):
    data = yaml.safe_load(yaml.safe_dump(DYNAMO))
    mutate(data["sources"]["events"])
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, data))
    assert where in str(exc.value)


hostile = st.text(alphabet=st.sampled_from(list("ab_`'\";-$ */.\\\n")), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["kind", "region", "endpoint_url", "tables", "attributes", "snapshot", "cdc",
                                        "access_key_id_env", "secret_access_key_env", "max_attempts", "bogus"]),
                       junk | hostile | st.lists(hostile, max_size=3)
                       | st.dictionaries(hostile, st.dictionaries(hostile, hostile, max_size=2), max_size=2),
                       max_size=9))
def test_fuzzed_dynamodb_sources_give_config_errors_only(source):
    """Wrong types, unknown keys, missing fields and hostile names: a ConfigError naming the file, or a
    config whose table names and declared types are safe to use."""
    from ingest.config import DYNAMODB_TABLE_RE

    try:
        cfg = parse_config({"sources": {"s": {"kind": "dynamodb", **source}}}, "fuzz.yaml")
    except ConfigError as exc:
        assert "fuzz.yaml" in str(exc)
        return
    for table in cfg.sources["s"].tables:
        assert DYNAMODB_TABLE_RE.match(table)


POSTGRES = {"sources": {"pg": {"kind": "postgres", "host": "db", "user": "ingest", "password_env": "PG_PW",
                               "database": "shop", "publication": "shop_pub", "tables": {"include": ["orders"]}}}}


def test_a_postgres_source_loads_with_its_defaults(tmp_path):
    pg = load_config(write(tmp_path, POSTGRES)).sources["pg"]
    assert (pg.port, pg.db_schema, pg.slot_name("pg"), pg.qualified("orders")) == (5432, "public", "ingest_pg",
                                                                                   "public.orders")


@pytest.mark.parametrize("mutate, where", [
    (lambda s: s.pop("publication"), "sources.pg.publication"),
    (lambda s: s.update(publication="Bad Pub"), "sources.pg.publication"),
    (lambda s: s.update(slot="no-dashes"), "sources.pg.slot"),
    (lambda s: s.update(schema="a;b"), "sources.pg.schema"),
    (lambda s: s["tables"].update(history=["orders"]), "SCD2 history is not available for postgres"),
])
def test_postgres_errors_name_the_key(tmp_path, mutate, where):
    data = yaml.safe_load(yaml.safe_dump(POSTGRES))
    mutate(data["sources"]["pg"])
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, data))
    assert where in str(exc.value)


def test_a_vacuum_retention_shorter_than_a_batch_run_may_last_is_refused(tmp_path):
    raw = {**GOOD, "maintenance": {"vacuum_retain_hours": 1}}
    raw["sources"] = {"shop": {**GOOD["sources"]["shop"], "cdc": {"max_run_seconds": 3 * 3600}}}
    with pytest.raises(ConfigError, match=r"maintenance.vacuum_retain_hours \(1\) is shorter than "
                                          r"sources.shop.cdc.max_run_seconds \(10800 s\).*Fix: vacuum_retain_hours "
                                          r"of at least 3"):
        load_config(write(tmp_path, raw))
    raw["maintenance"]["vacuum_retain_hours"] = 3
    assert load_config(write(tmp_path, raw)).maintenance.vacuum_retain_hours == 3


def test_every_key_of_the_sources_file_is_documented_and_every_documented_key_exists():
    """docs/configuration.md lists each key of the config model (type, default, meaning): a key added to
    the model and not documented, or documented and since gone, fails here."""
    from pathlib import Path

    from ingest.config_reference import documented, keys

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    model = {k.path for k in keys()}
    assert {"sources.<name>.snapshot.chunk_size", "sources.<name>.tables.overrides.<table>.chunk_size",
            "sources.<name>.schema", "maintenance.cron"} <= model  # the walk sees nested, per-table and aliased keys
    written = documented(doc)
    assert sorted(model - written) == [], "keys of the model missing from docs/configuration.md"
    assert sorted(written - model) == [], "keys docs/configuration.md documents that the model no longer has"
