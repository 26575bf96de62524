"""Random DML over several tables; batches (decoded here or on executors) applied to silver in random order, with
repeats, equal the source."""

import itertools

from hypothesis import HealthCheck, given, settings, strategies as st

from ingest.adapters.mysql import change_batch_writes
from ingest.lake.bronze import bronze_writes
from ingest.lake.silver import SilverFromBatch
from ingest.lake.tables import LakeTable
from ingest.sources.mysql.cdc import read_change_batch
from ingest.sources.mysql.events import CapturedTable
from ingest.sources.mysql.positions import BatchRange, BinlogPosition
from ingest_tests.integration.conftest import snapshot

_names = itertools.count()

ops = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["upsert", "delete", "rekey", "bump"]),
                st.integers(1, 12), st.integers(1, 12))
workloads = st.lists(st.lists(ops, min_size=1, max_size=12), min_size=2, max_size=4)


def head(cur) -> BinlogPosition:
    cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    return BinlogPosition(row[0], int(row[1]))


def apply_op(cur, table, op, k, v):
    if op == "upsert":
        cur.execute(f"INSERT INTO {table} (k1, k2, v) VALUES (%s, %s, %s) ON DUPLICATE KEY UPDATE v = VALUES(v)",
                    (k % 3, k, f"v{v}"))
    elif op == "delete":
        cur.execute(f"DELETE FROM {table} WHERE k2 = %s", (k,))
    elif op == "rekey":  # primary key change, skipped when the target key is taken
        cur.execute(f"UPDATE IGNORE {table} SET k2 = %s WHERE k2 = %s", (v + 100, k))
    else:
        cur.execute(f"UPDATE {table} SET v = CONCAT(v, '+') WHERE k2 <= %s", (k,))


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=workloads, data=st.data())
def test_random_workload_any_batch_order_converges(spark, root, params, tmp_path_factory, workload, data):
    n = next(_names)
    tables = {"a": f"pa{n}", "b": f"pb{n}"}
    lake = tmp_path_factory.mktemp("prop")
    with root.cursor() as cur:
        for t in tables.values():
            cur.execute(f"CREATE TABLE {t} (k1 INT, k2 INT, v VARCHAR(200), PRIMARY KEY (k1, k2))")
            cur.execute(f"INSERT INTO {t} SELECT seq % 3, seq, 'init' FROM seq_1_to_6")
    snaps = {t: LakeTable(spark, str(lake / t / "snapshot")) for t in tables.values()}
    for t in tables.values():
        snapshot(spark, params, t, snaps[t].path)
    from ingest.lake.deltalog import last_commit

    start = min(BinlogPosition.from_metadata(last_commit(s.path, kind="snapshot").metadata["log_start"])
                for s in snaps.values())
    bounds = [start]
    with root.cursor() as cur:
        for segment in workload:
            cur.execute("BEGIN")
            for table, op, k, v in segment:
                apply_op(cur, tables[table], op, k, v)
            cur.execute("COMMIT")
            bounds.append(head(cur))
    keys = {t: ["k1", "k2"] for t in tables.values()}
    batches = [BatchRange(a, b).key for a, b in zip(bounds, bounds[1:])]
    for key in batches:
        # a batch is decoded here, or planned here and decoded on executors in slices of a transaction or two
        if data.draw(st.booleans(), label=f"batch {key} on executors"):
            writes = change_batch_writes("prop", params, read_change_batch(params, "prop", key, keys,
                                                                           parallel_min_bytes=0, slice_bytes=200),
                                         {t: CapturedTable.of(k) for t, k in keys.items()})
        else:
            writes = bronze_writes("prop", read_change_batch(params, "prop", key, keys))
        for t, write in writes.items():
            write.apply(spark, str(lake / t / "bronze"), lambda m: None)
    order = data.draw(st.permutations(batches))
    repeats = data.draw(st.lists(st.sampled_from(batches), max_size=2))
    for key in [*order, *repeats]:
        for t in tables.values():
            bronze = LakeTable(spark, str(lake / t / "bronze"), key)
            SilverFromBatch("prop", t, bronze, snaps[t]).apply(spark, str(lake / t / "silver"), lambda m: None)
    with root.cursor() as cur:
        for t in tables.values():
            cur.execute(f"SELECT k1, k2, v FROM {t}")
            expected = sorted(cur.fetchall())
            got = sorted(tuple(r) for r in spark.read.format("delta").load(str(lake / t / "silver"))
                         .where("NOT _deleted").select("k1", "k2", "v").collect())
            assert got == expected, f"{t}: silver differs from the source after batches in order {order}"
