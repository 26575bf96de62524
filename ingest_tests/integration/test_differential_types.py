"""Differential: random values of MariaDB's string and binary types, edge values included (empty and
all-space strings, trailing and leading spaces, NUL bytes, tabs, characters outside the BMP), land the
same through both snapshot readers (Spark's JDBC reader, the Python data source) and through the binlog,
and equal what the server's own client returns (issue 49; the other types are held to the contract by
the golden table, test_snapshot_types and test_cdc_edges)."""

import itertools

from dagster import instance_for_test
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from ingest_tests.integration.cdc_harness import CdcHarness, write_sources
from ingest_tests.integration.conftest import snapshot
from ingest_tests.integration.test_snapshot_types import comparable

ROWS = 200
_examples = itertools.count()
COLUMNS = {
    # column: (its type, the values hypothesis draws for it)
    "ch": ("CHAR(8) CHARACTER SET utf8mb4", st.text(alphabet=" a\u00fc\t\U0001F600", max_size=8)),
    "nch": ("NCHAR(3)", st.text(alphabet=" b\u00e9", max_size=3)),
    "vc": ("VARCHAR(12) CHARACTER SET utf8mb4", st.text(alphabet=" c\u00fc\t\x00\U0001F680", max_size=12)),
    "tx": ("TEXT CHARACTER SET utf8mb4", st.text(alphabet=" d\u00fc\n\U0001F600", max_size=40)),
    "bn": ("BINARY(4)", st.binary(max_size=4)),
    "vb": ("VARBINARY(6)", st.binary(max_size=6)),
}
row = st.fixed_dictionaries({c: st.none() | values for c, (_, values) in COLUMNS.items()})
# every edge value in every column at least once (as bytes in the binary ones), then random ones
EDGES = [{c: v for c in COLUMNS} for v in ("", " ", "  a", "\x00", " \u00fc ", None)]


def _edge(column: str, value):
    """An edge value in the column's own kind (bytes for the binary columns)."""
    return value.encode() if "BINARY" in COLUMNS[column][0] and isinstance(value, str) else value


def _load(cur, table: str, rows: list[dict]) -> None:
    cur.executemany(f"INSERT INTO {table} (id, {', '.join(COLUMNS)}) VALUES (%s{', %s' * len(COLUMNS)})",
                    [(i, *(_edge(c, r[c]) for c in COLUMNS)) for i, r in enumerate(rows)])


def _server(cur, table: str) -> list[dict]:
    """The rows as the server's client (PyMySQL) returns them."""
    cur.execute(f"SELECT id, {', '.join(COLUMNS)} FROM {table} ORDER BY id")
    return [dict(zip(["id", *COLUMNS], r)) for r in cur.fetchall()]


# one example of 200 rows plus the edges, not shrunk: a failure names its row and values already
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
@given(drawn=st.lists(row, min_size=ROWS, max_size=ROWS), changed=st.lists(row, min_size=ROWS // 2,
                                                                          max_size=ROWS // 2))
def test_string_and_binary_values_agree_on_every_path_and_with_the_server(
        spark, mariadb, database, root, params, tmp_path_factory, monkeypatch, drawn, changed):
    import ingest.sources.mysql.jdbc as jdbc
    from ingest.lake.merge import live_rows

    tmp = tmp_path_factory.mktemp("diff")
    n = next(_examples)
    snap, stream = f"snap{n}", f"stream{n}"
    rows = EDGES + drawn
    ddl = ", ".join(f"{c} {t}" for c, (t, _) in COLUMNS.items())
    with root.cursor() as cur:
        for table in (snap, stream):
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, {ddl})")
        _load(cur, snap, rows)
        server = _server(cur, snap)
    snapshot(spark, params, snap, str(tmp / "jdbc"))
    with monkeypatch.context() as m:
        m.setattr(jdbc, "jdbc_columns", lambda columns, table="?": None)  # the Python data source reads it
        snapshot(spark, params, snap, str(tmp / "python"))
    for reader in ("jdbc", "python"):
        got = comparable(spark.read.format("delta").load(str(tmp / reader)).select("id", *COLUMNS))
        for want, have in zip(server, got, strict=True):
            assert have == want, f"{reader} snapshot, row {want['id']}: {have!r} != the server's {want!r}"

    with instance_for_test() as instance:
        h = CdcHarness(spark, write_sources(tmp, mariadb.port, database, [stream]), tmp / "lake", instance)
        h.snapshot()  # empty: every row arrives through the binlog, inserted, then half of them updated
        h.sync()
        with root.cursor() as cur:
            _load(cur, stream, rows)
            for i, new in enumerate(changed):
                cur.execute(f"UPDATE {stream} SET {', '.join(f'{c} = %s' for c in COLUMNS)} WHERE id = %s",
                            (*(new[c] for c in COLUMNS), 2 * i))
            cur.execute(f"DELETE FROM {stream} WHERE id % 7 = 3")
            server = _server(cur, stream)
        h.sync()
        got = comparable(live_rows(spark.read.format("delta").load(h.silver_path(stream))).select("id", *COLUMNS))
    for want, have in zip(server, got, strict=True):
        assert have == want, f"binlog, row {want['id']}: {have!r} != the server's {want!r}"
