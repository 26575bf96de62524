"""SCD2 history converges whatever order batches arrive in, and however often."""

import datetime as dt
from decimal import Decimal

from hypothesis import HealthCheck, given, settings, strategies as st

from ingest.lake.commits import Txn
from ingest.lake.history import Truncate, merge_history

VERSIONS = "id int, v string, _valid_from decimal(38,0), _valid_from_ts timestamp, _deleted boolean"
T0 = dt.datetime(2026, 1, 1)

# A table's changes: (key, op, value); an event's position is its index + 1.
events = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["upsert", "upsert", "delete", "truncate"]),
                            st.text("ab", max_size=2)), min_size=1, max_size=20)


def ts(pos):
    return T0 + dt.timedelta(seconds=pos)


def expected_history(changes):
    """Per (key, from): (value, to, to_ts, current, deleted), straight from the definition."""
    truncates = [pos for pos, (_, op, _) in enumerate(changes, 1) if op == "truncate"]
    rows = {}
    for pos, (key, op, value) in enumerate(changes, 1):
        if op != "truncate":
            rows.setdefault(key, []).append((pos, value, op == "delete"))
    out = {}
    for key, rs in rows.items():
        real = []
        for i, (pos, value, deleted) in enumerate(rs):
            prev = rs[i - 1] if i else None
            if (prev and not deleted and not prev[2] and prev[1] == value
                    and not any(prev[0] < t < pos for t in truncates)):
                out[(key, pos)] = (value, pos, ts(pos), False, False)  # the same image again: no new version
            else:
                real.append((pos, value, deleted))
        for i, (pos, value, deleted) in enumerate(real):
            ends = [real[i + 1][0]] if i + 1 < len(real) else []
            ends += [t for t in truncates if t > pos][:1]
            to = pos if deleted else (min(ends) if ends else None)
            out[(key, pos)] = (value, to, ts(to) if to else None, to is None, deleted)
    return out


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(changes=events, data=st.data())
def test_batches_in_any_order_and_repeated_give_the_same_history(spark, tmp_path_factory, changes, data):
    n = len(changes)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=3)))
    batches = [range(a, b) for a, b in zip([0, *cuts], [*cuts, n]) if a < b]
    order = data.draw(st.permutations(range(len(batches))))
    repeats = data.draw(st.lists(st.sampled_from(range(len(batches))), max_size=2))
    path = str(tmp_path_factory.mktemp("history") / "history")
    seen: set[int] = set()  # what bronze holds when the batch's history step runs
    for run, b in enumerate([*order, *repeats]):
        seen |= set(batches[b])
        rows = [(k, v, Decimal(i + 1), ts(i + 1), op == "delete")
                for i in batches[b] for k, op, v in [changes[i]] if op != "truncate"]
        truncates = sorted(Truncate(i + 1, ts(i + 1)) for i in seen if changes[i][1] == "truncate")
        mine = [t for t in truncates if t.pos - 1 in batches[b]]
        # a fresh txn each run: this is about the merge itself, not txn dedup
        merge_history(spark, path, spark.createDataFrame(rows, VERSIONS), ["id"], truncates, {"kind": "history"},
                      Txn("prop", run), mine)
    if not any(op != "truncate" for _, op, _ in changes):
        return  # no version at all: nothing was written
    got = {(r["id"], int(r["_valid_from"])): (r["v"], None if r["_valid_to"] is None else int(r["_valid_to"]),
                                               r["_valid_to_ts"], r["_current"], r["_deleted"])
           for r in spark.read.format("delta").load(path).collect()}
    assert got == expected_history(changes)
