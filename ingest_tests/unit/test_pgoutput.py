"""pgoutput decoding and LSN positions (pure); the messages are built here to the protocol's spec."""

import dataclasses
import datetime as dt
import struct

import pytest

from ingest.sources.postgres.pgoutput import (
    UNCHANGED, Begin, Delete, Insert, ProtocolError, Relation, Truncate, Update, decode, transactions)
from ingest.sources.postgres.positions import Lsn, LsnRange, decode_pos, encode_pos
from ingest.sources.postgres.slot import relation_names


def s(text: str) -> bytes:
    return text.encode() + b"\0"


def tup(*values) -> bytes:
    out = struct.pack("!H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            raw = v.encode()
            out += b"t" + struct.pack("!i", len(raw)) + raw
    return out


def begin(lsn: int, xid: int, micros: int = 0) -> bytes:
    return b"B" + struct.pack("!Qq", lsn, micros) + struct.pack("!I", xid)


def commit(lsn: int, end: int, micros: int = 0) -> bytes:
    return b"C" + struct.pack("!BQQq", 0, lsn, end, micros)


def relation(oid: int, name: str, columns, identity: bytes = b"d") -> bytes:
    out = b"R" + struct.pack("!I", oid) + s("public") + s(name) + identity + struct.pack("!H", len(columns))
    for col, type_oid, key in columns:
        out += struct.pack("!B", 1 if key else 0) + s(col) + struct.pack("!Ii", type_oid, -1)
    return out


def test_lsns_parse_print_and_order_as_numbers_not_text():
    assert Lsn.parse("16/B374D848").value == 0x16B374D848
    assert str(Lsn(0x16B374D848)) == "16/B374D848"
    assert Lsn.parse("0/9") < Lsn.parse("0/10") < Lsn.parse("1/0")  # as text "0/9" > "0/10"
    assert Lsn.from_metadata(Lsn.parse("A/1").to_metadata()) == Lsn.parse("A/1")
    with pytest.raises(ValueError, match="not an LSN"):
        Lsn.parse("16-B374")


def test_pos_orders_by_commit_lsn_then_index_and_a_snapshot_row_comes_first():
    point = Lsn.parse("0/5000")
    assert point.row_pos() < encode_pos(point, 1) < encode_pos(Lsn.parse("0/5001"), 0)
    top = Lsn(2**64 - 1)
    assert decode_pos(encode_pos(top, 10**18 - 1)) == (top, 10**18 - 1)
    assert len(str(encode_pos(top, 10**18 - 1))) <= 38


def test_batch_keys_sort_as_their_ranges_and_round_trip():
    a, b = LsnRange(Lsn.parse("0/FF"), Lsn.parse("1/0")), LsnRange(Lsn.parse("1/0"), Lsn.parse("10/0"))
    assert a.key < b.key and LsnRange.from_key(b.key) == b
    with pytest.raises(ValueError, match="not a PostgreSQL batch key"):
        LsnRange.from_key("0/FF-1/0")


def test_messages_decode_to_the_spec():
    assert decode(begin(0x100, 7, 1_000_000)) == Begin(Lsn(0x100), dt.datetime(2000, 1, 1, 0, 0, 1,
                                                                              tzinfo=dt.timezone.utc), 7)
    assert decode(commit(0x100, 0x130)).end_lsn == Lsn(0x130)
    rel = decode(relation(16384, "t", [("id", 23, True), ("doc", 25, False)]))
    assert isinstance(rel, Relation) and [c.name for c in rel.columns] == ["id", "doc"]
    assert [c.key for c in rel.columns] == [True, False]
    assert decode(b"I" + struct.pack("!I", 16384) + b"N" + tup("1", None)) == Insert(16384, ("1", None))
    # an UPDATE that left a TOASTed value alone; one that changed the key sends the old key first
    assert decode(b"U" + struct.pack("!I", 16384) + b"N" + tup("1", UNCHANGED)).new == ("1", UNCHANGED)
    moved = decode(b"U" + struct.pack("!I", 16384) + b"K" + tup("1", None) + b"N" + tup("2", "x"))
    assert moved == Update(16384, ("2", "x"), ("1", None))
    assert decode(b"D" + struct.pack("!I", 16384) + b"K" + tup("2", None)) == Delete(16384, ("2", None))
    assert decode(b"T" + struct.pack("!IBII", 2, 3, 1, 2)) == Truncate((1, 2), True, True)


def test_malformed_messages_are_refused_with_what_is_wrong():
    with pytest.raises(ProtocolError, match="ends after"):
        decode(begin(1, 1)[:10])
    with pytest.raises(ProtocolError, match="unknown pgoutput message 'S'"):
        decode(b"S" + b"\0" * 8)
    with pytest.raises(ProtocolError, match="unknown tuple value kind"):
        decode(b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"x")
    insert = b"I" + struct.pack("!I", 1) + b"N"
    for cut in (insert + tup("abc", "de")[:-1], insert + tup("abc")[:4], insert + struct.pack("!H", 2) + b"n"):
        with pytest.raises(ProtocolError, match="run past the end"):
            decode(cut)
    with pytest.raises(ProtocolError, match="run past the end"):  # a negative length
        decode(insert + struct.pack("!H", 1) + b"t" + struct.pack("!i", -1) + b"abc")
    with pytest.raises(ProtocolError, match="expected 'N' before the new tuple"):
        decode(b"U" + struct.pack("!I", 1) + b"K" + tup("1"))
    with pytest.raises(ProtocolError, match="expected 'K' or 'O'"):
        decode(b"D" + struct.pack("!I", 1) + b"N" + tup("1"))


def test_changes_group_into_transactions_with_the_columns_of_their_time():
    before = relation(1, "t", [("id", 23, True)])
    after = relation(1, "t", [("id", 23, True), ("added", 25, False)])
    stream = [begin(0x200, 1), before, b"I" + struct.pack("!I", 1) + b"N" + tup("1"), commit(0x200, 0x210),
              begin(0x300, 2), after, b"I" + struct.pack("!I", 1) + b"N" + tup("2", "a"), commit(0x300, 0x310)]
    first, second = transactions(stream)
    assert (first.begin.final_lsn, second.commit.commit_lsn) == (Lsn(0x200), Lsn(0x300))
    assert [len(rel.columns) for rel, _ in first.changes + second.changes] == [1, 2]
    relations = {}
    list(transactions(stream[:4], relations))  # a later call knows the tables described before it
    (third,) = transactions([begin(0x400, 3), b"D" + struct.pack("!I", 1) + b"K" + tup("1"), commit(0x400, 0x410)],
                            relations)
    assert third.changes[0][0].name == "t"
    with pytest.raises(ProtocolError, match="no RELATION message described"):
        list(transactions([begin(1, 1), b"I" + struct.pack("!I", 9) + b"N" + tup("1"), commit(1, 2)]))


def test_the_type_contract_parses_the_servers_text_forms():
    import datetime as dt
    from decimal import Decimal

    from ingest.sources.postgres.types import (
        ValueOutOfContract, array_items, column_type, numeric_typmod, to_date, to_decimal, to_instant)

    assert numeric_typmod(-1) is None and numeric_typmod((12 << 16 | 3) + 4) == (12, 3)
    assert column_type("numeric", (40 << 16 | 2) + 4).spark == "string"  # wider than Spark's 38 digits
    assert column_type("numeric").spark == "string" and column_type("citext").spark == "string"
    assert to_decimal("-1.50") == Decimal("-1.50")
    for bad in ("NaN", "Infinity"):
        with pytest.raises(ValueOutOfContract, match="no decimal value"):
            to_decimal(bad)
    for bad in ("infinity", "0044-03-15 BC"):
        with pytest.raises(ValueOutOfContract, match="outside what Delta's date holds"):
            to_date(bad)
    utc = dt.timezone.utc
    assert to_instant("2024-01-01 00:00:00-08") == dt.datetime(2024, 1, 1, 8, tzinfo=utc)
    assert to_instant("2024-01-01 00:00:00.5+05:30") == dt.datetime(2023, 12, 31, 18, 30, 0, 500000, tzinfo=utc)
    assert array_items('{a,"b,c","d\\\\e","f\\"g",NULL,"NULL"}') == ["a", "b,c", "d\\e", 'f"g', None, "NULL"]
    assert array_items("{}") == [] and array_items("[0:1]={1,2}") == ["1", "2"]
    # box's delimiter is ';' and its text holds commas
    assert array_items('{(1,1),(0,0);NULL;"(3,3),(2,2)"}', ";") == ["(1,1),(0,0)", None, "(3,3),(2,2)"]
    assert column_type("_box", -1, "box", ";").convert("{(1,1),(0,0);(3,3),(2,2)}") == ["(1,1),(0,0)", "(3,3),(2,2)"]
    with pytest.raises(ValueOutOfContract, match="multi-dimensional"):
        array_items("{{1,2},{3,4}}")
    assert column_type("_float8", -1, "float8").convert("{1.5,NaN,-Infinity}")[2] == float("-inf")


def test_a_column_of_simple_array_literals_splits_in_arrow_as_array_items_splits_each_and_others_are_left_to_it():
    import pyarrow as pa

    from ingest.sources.postgres.types import array_items, array_lists

    simple = ["{a,b}", "{}", None, "{NULL,x,NULL}", "{1}", "{NULLx,nULL}", "{}", "{é,ü}"]
    got = array_lists(pa.array(simple, pa.string()))
    assert got.to_pylist() == [None if t is None else array_items(t) for t in simple]
    assert got.to_pylist()[3] == [None, "x", None] and got.to_pylist()[1] == []
    assert array_lists(pa.array([None, None], pa.string())).to_pylist() == [None, None]
    assert array_lists(pa.array([], pa.string())).to_pylist() == []
    # a quoted element, nesting or explicit bounds anywhere in the column: array_items takes it whole
    for other in ('{"a b",c}', "{{1,2},{3,4}}", "[0:1]={1,2}", '{""}'):
        assert array_lists(pa.array(["{a}", other], pa.string())) is None


def test_transactions_become_change_records_ordered_by_commit_and_place_in_their_table_and_a_key_move_is_delete_then_insert():
    from ingest.changes import ChangeOp
    from ingest.sources.postgres.changes import change_records
    from ingest.sources.postgres.pgoutput import changes
    from ingest.sources.postgres.types import column_type

    tid = struct.pack("!I", 1)
    stream = [begin(0x500, 9), relation(1, "t", [("id", 23, True), ("doc", 25, False)]),
              relation(2, "other", [("id", 23, True)]),
              b"I" + tid + b"N" + tup("1", "a"), b"I" + struct.pack("!I", 2) + b"N" + tup("5"),
              b"U" + tid + b"N" + tup("1", UNCHANGED), b"U" + tid + b"K" + tup("1", None) + b"N" + tup("2", "b"),
              b"D" + tid + b"K" + tup("2", None), b"T" + struct.pack("!IBI", 1, 0, 1), commit(0x500, 0x510)]
    types = lambda rel: [column_type("int4" if c.type_oid == 23 else "text") for c in rel.columns]  # noqa: E731
    records = list(change_records(changes(stream), {"public.t"}, types))
    assert [(r.op, r.row) for r in records] == [
        (ChangeOp.INSERT, {"id": 1, "doc": "a"}), (ChangeOp.UPDATE, {"id": 1, "doc": UNCHANGED}),
        (ChangeOp.DELETE, {"id": 1, "doc": None}), (ChangeOp.INSERT, {"id": 2, "doc": "b"}),
        (ChangeOp.DELETE, {"id": 2, "doc": None}), (ChangeOp.TRUNCATE, {})]
    assert [decode_pos(r.pos) for r in records] == [(Lsn(0x500), i) for i in range(1, 7)]  # the other table skipped
    assert {r.txid for r in records} == {"9"} and all(r.table == "public.t" for r in records)
    # a table's places count its own changes: read alone or with the other, each gets the same records
    both = list(change_records(changes(stream), {"public.t", "public.other"}, types))
    (other,) = [r for r in both if r.table == "public.other"]
    assert decode_pos(other.pos) == (Lsn(0x500), 1) and [r for r in both if r.table == "public.t"] == records


def test_with_replica_identity_full_an_update_of_other_columns_stays_an_update_of_its_key():
    """FULL marks every column as identity in RELATION: the key that tells an update from a key move is the
    primary key, which the reader looks up."""
    from ingest.changes import ChangeOp
    from ingest.sources.postgres.changes import change_records
    from ingest.sources.postgres.pgoutput import changes
    from ingest.sources.postgres.types import column_type

    tid = struct.pack("!I", 1)
    stream = [begin(0x500, 9), relation(1, "t", [("id", 23, True), ("doc", 25, True)], identity=b"f"),
              b"U" + tid + b"O" + tup("1", "a") + b"N" + tup("1", "b"),
              b"U" + tid + b"O" + tup("1", "b") + b"N" + tup("2", "b"), commit(0x500, 0x510)]
    types = lambda rel: [column_type("int4" if c.type_oid == 23 else "text") for c in rel.columns]  # noqa: E731
    records = list(change_records(changes(stream), {"public.t"}, types, primary_key=lambda rel: ["id"]))
    assert [(r.op, r.row, r.before) for r in records] == [
        (ChangeOp.UPDATE, {"id": 1, "doc": "b"}, {"id": 1, "doc": "a"}),
        (ChangeOp.DELETE, {"id": 1, "doc": "b"}, None), (ChangeOp.INSERT, {"id": 2, "doc": "b"}, None)]


def test_change_columns_hold_what_change_records_give_column_by_column():
    """An executor's path (TextChanges, converted a column at a time) against the records of the driver's:
    the same ops, places, commits, values, before images and unsent TOASTed columns, in the same order,
    across a key move, REPLICA IDENTITY FULL, a TRUNCATE, another table and a column added mid-batch."""
    from ingest.images import image_json
    from ingest.sources.postgres.changes import change_columns, change_records
    from ingest.sources.postgres.pgoutput import changes
    from ingest.sources.postgres.types import column_type

    tid = struct.pack("!I", 1)
    stream = [begin(0x500, 9, 5_000_000), relation(1, "t", [("id", 23, True), ("doc", 25, False)]),
              relation(2, "other", [("id", 23, True)]),
              b"I" + tid + b"N" + tup("1", "a"), b"I" + struct.pack("!I", 2) + b"N" + tup("5"),
              b"U" + tid + b"N" + tup("1", UNCHANGED), b"U" + tid + b"K" + tup("1", None) + b"N" + tup("2", "b"),
              b"D" + tid + b"K" + tup("2", None), b"T" + struct.pack("!IBI", 1, 0, 1), commit(0x500, 0x510),
              begin(0x600, 10), relation(1, "t", [("id", 23, True), ("doc", 25, True), ("n", 23, True)], b"f"),
              b"I" + tid + b"N" + tup("3", "c", "7"),
              b"U" + tid + b"O" + tup("3", "c", "7") + b"N" + tup("3", "d", "8"),
              b"U" + tid + b"O" + tup("3", "d", "8") + b"N" + tup("4", "d", "8"), commit(0x600, 0x610)]
    types = lambda rel: [column_type("int4" if c.type_oid == 23 else "text") for c in rel.columns]  # noqa: E731
    key = lambda rel: ["id"]  # noqa: E731
    records = list(change_records(changes(stream), {"public.t"}, types, primary_key=key))
    names = ["n", "id", "doc", "gone"]  # bronze's order, and a column no change has
    expected = [(r.op.value, r.pos, r.committed_at, r.txid,
                 {n: None if r.row.get(n) is UNCHANGED else r.row.get(n) for n in names},
                 image_json(r.before), [n for n, v in r.row.items() if v is UNCHANGED] or None) for r in records]
    for sent in (True, False):  # rows as sent, decoded a column at a time, or decoded first and sent again
        chunks = list(change_columns(changes(stream, sent=sent), "public.t", names, types, key, size=2))
        assert [len(c) for c in chunks] == [2, 2, 2, 2, 2]  # the first 6 changes, then the second RELATION's 4
        assert [c.types[3] for c in chunks] == [None] * 5 and chunks[0].types[0] is None and chunks[-1].types[0]
        got = []
        for c in chunks:
            values = [[v if t is None or v is None or t.convert is None else t.convert(v) for v in col.to_pylist()]
                      for t, col in zip(c.types, c.columns())]
            got += [(op, pos, ts, xid, dict(zip(names, row)), before, unsent)
                    for op, pos, ts, xid, before, unsent, *row in zip(c.ops, c.positions, c.committed_at, c.txids,
                                                                      c.befores, c.unchanged, *values)]
        assert got == expected
    assert [g[0] for g in got] == ["insert", "update", "delete", "insert", "delete", "truncate", "insert", "update",
                                   "delete", "insert"]
    assert got[1][6] == ["doc"] and got[7][5] == image_json({"id": 3, "doc": "c", "n": 7})


def test_rows_as_sent_decode_a_column_at_a_time_into_the_values_one_at_a_time_gives_and_refuse_broken_ones():
    """sent_columns (an executor's chunk, every row at once) against _tuple (a value at a time): NULLs,
    unsent TOASTed values, empty and multi-byte text, rows at an offset in their message; a row past its
    message's end, an unknown kind, the wrong number of values and text that is not UTF-8 refused."""
    from ingest.sources.postgres.pgoutput import Sent, _tuple, resent, sent_columns

    rows = [("1", "a", None), ("2", "", UNCHANGED), ("3", "ünïcødé 雪", "x" * 70_000), (None, None, None)]
    sent = [Sent(b"U\x00\x00\x00\x01N" + tup(*r), 6) for r in rows[:2]] + [resent(r) for r in rows[2:]]
    columns, unsent = sent_columns(sent, 3, "public.t")
    decoded = [_tuple(s.data, s.at)[0] for s in sent]
    assert decoded == rows
    assert [c.to_pylist() for c in columns] == [[None if v is UNCHANGED else v for v in col] for col in zip(*rows)]
    assert unsent.tolist() == [[v is UNCHANGED for v in r] for r in rows]
    assert [len(c) for c in sent_columns([], 3, "public.t")[0]] == [0, 0, 0]
    for broken, width, error in ((tup("1", "a")[:-1], 2, ProtocolError), (tup("1", "a")[:4], 2, ProtocolError),
                                 (tup("1"), 2, ValueError), (b"\x00\x01x", 1, ProtocolError),
                                 (b"\x00\x01t\x00\x00\x00\x02\xff\xfe", 1, ProtocolError)):
        with pytest.raises(error):
            sent_columns([Sent(tup(*["9"] * width), 0), Sent(broken, 0)], width, "public.t")


def test_readers_sharing_a_stream_take_each_transaction_once_by_its_id_and_pass_over_the_others_undecoded():
    from ingest.sources.postgres.pgoutput import changes

    tid = struct.pack("!I", 1)
    stream = [relation(1, "t", [("id", 23, True)])]
    for xid in (7, 8, 9, 10, 11):
        stream += [begin(0x100 * xid, xid), b"I" + tid + b"N" + tup(str(xid)), b"T" + struct.pack("!IBI", 1, 0, 1),
                   commit(0x100 * xid, 0x100 * xid + 8)]
    whole = [(b.xid, type(c).__name__) for b, _, c in changes(stream)]
    shares = [[(b.xid, type(c).__name__) for b, _, c in changes(stream, share=(k, 3))] for k in range(3)]
    assert sorted(sum(shares, [])) == sorted(whole) and len(whole) == 10
    assert [{x % 3 for x, _ in share} for share in shares] == [{0}, {1}, {2}]
    broken = stream[:2] + [b"I" + tid + b"not a tuple"] + stream[3:]  # in xid 7's transaction
    assert [b.xid for b, _, _ in changes(broken, share=(0, 2))] == [8, 8, 10, 10]  # xid 7 is reader 1's
    with pytest.raises(ProtocolError):
        list(changes(broken, share=(1, 2)))


def test_changes_of_chosen_tables_pass_over_the_other_tables_rows_without_decoding_them():
    from ingest.sources.postgres.pgoutput import changes

    stream = [begin(0x500, 9), relation(1, "t", [("id", 23, True)]), relation(2, "other", [("id", 23, True)]),
              b"I" + struct.pack("!I", 1) + b"N" + tup("1"),
              b"I" + struct.pack("!I", 2) + b"not a tuple",  # decoding it would fail: it is not decoded
              b"D" + struct.pack("!I", 1) + b"K" + tup("1"), commit(0x500, 0x510)]
    chosen = list(changes(stream, tables={"public.t"}))
    assert [(c[1].name, type(c[2]).__name__) for c in chosen] == [("t", "Insert"), ("t", "Delete")]
    with pytest.raises(ProtocolError):
        list(changes(stream))  # without the choice every row is decoded
    with pytest.raises(ProtocolError, match="outside a transaction"):
        list(changes(stream[1:3] + [b"I" + struct.pack("!I", 2) + b"N" + tup("1")], tables={"public.t"}))


def test_batches_run_from_the_last_end_to_the_head_cut_at_most_max_bytes_of_wal():
    from ingest.sources.postgres.cdc import plan_next_batch
    from ingest.sources.postgres.positions import Lsn, LsnRange

    assert plan_next_batch(None, None, Lsn(100)) is None  # no snapshot yet
    assert plan_next_batch(Lsn(100), None, Lsn(100)) is None  # nothing since the last end
    assert plan_next_batch(None, Lsn(40), Lsn(100)) == LsnRange(Lsn(40), Lsn(100))  # the first, from the snapshots
    assert plan_next_batch(Lsn(40), Lsn(10), Lsn(100)) == LsnRange(Lsn(40), Lsn(100))  # the log wins
    backlog = [plan_next_batch(Lsn(0), None, Lsn(250), max_bytes=100)]
    while backlog[-1].end < Lsn(250):
        backlog.append(plan_next_batch(backlog[-1].end, None, Lsn(250), max_bytes=100))
    assert [(b.start.value, b.end.value) for b in backlog] == [(0, 100), (100, 200), (200, 250)]


def test_the_tables_a_peek_shows_changed_are_those_its_relation_messages_describe():
    stream = [begin(0x200, 1), relation(1, "orders", [("id", 23, True)]),
              b"I" + struct.pack("!I", 1) + b"N" + tup("1"), commit(0x200, 0x210),
              begin(0x300, 2), relation(2, "customers", [("id", 23, True)]),
              b"T" + struct.pack("!IBI", 1, 0, 2), b"I" + struct.pack("!I", 1) + b"N" + tup("2"), commit(0x300, 0x310)]
    assert relation_names(stream) == {"public.orders", "public.customers"}
    assert relation_names([begin(0x400, 3), commit(0x400, 0x410)]) == frozenset()


def test_a_batch_plan_puts_each_truncate_where_placing_every_change_does_and_sees_only_the_batchs_transactions():
    """The driver's flat planning pass (plan_batch) against placing every change (placed_changes, the
    executors' path): the same TRUNCATE positions across key moves, REPLICA IDENTITY FULL, another table and
    a table described again mid-transaction; the same commit times, relations and unsent TOASTed values;
    transactions of an earlier batch still in the slot, and after the batch's end, left out."""
    from ingest.changes import ChangeOp
    from ingest.sources.postgres.changes import KeyMoves, placed_changes
    from ingest.sources.postgres.pgoutput import BatchPlan, PlacesUnknown, changes, plan_batch
    from ingest.sources.postgres.types import column_type

    tid, oid2 = struct.pack("!I", 1), struct.pack("!I", 2)
    truncate_t = b"T" + struct.pack("!IBI", 1, 0, 1)
    stream = [relation(1, "t", [("id", 23, True), ("doc", 25, False)]), relation(2, "other", [("id", 23, True)]),
              # an earlier batch's, still in the slot: its TOASTed value and TRUNCATE are not this batch's
              begin(0x400, 8, 1_000_000), b"U" + tid + b"N" + tup("9", UNCHANGED), truncate_t, commit(0x400, 0x410),
              begin(0x500, 9, 5_000_000), b"I" + tid + b"N" + tup("1", "a"), b"I" + oid2 + b"N" + tup("5"),
              b"U" + tid + b"N" + tup("1", "b"), b"U" + tid + b"K" + tup("1", None) + b"N" + tup("2", "b"),
              b"U" + tid + b"K" + tup("2", None) + b"N" + tup("2", "c"),  # the old key came, the same key
              b"D" + tid + b"K" + tup("2", None), truncate_t, b"I" + tid + b"N" + tup("3", "d"),
              b"T" + struct.pack("!IBII", 2, 0, 2, 1), commit(0x500, 0x510),
              begin(0x600, 10, 7_000_000), b"I" + oid2 + b"N" + tup("6"),
              relation(1, "t", [("id", 23, True), ("doc", 25, True), ("n", 23, True)], b"f"),
              b"U" + tid + b"O" + tup("3", "d", "7") + b"N" + tup("3", "e", "7"),
              b"U" + tid + b"O" + tup("3", "e", "7") + b"N" + tup("4", "e", "7"), truncate_t, commit(0x600, 0x610),
              begin(0x700, 11, 9_000_000), b"I" + tid + b"N" + tup("8", "f", "1"), truncate_t, commit(0x700, 0x710)]
    types = lambda rel: [column_type("int4" if c.type_oid == 23 else "text") for c in rel.columns]  # noqa: E731
    key = lambda rel: ["id"]  # noqa: E731
    batch = LsnRange(Lsn(0x500), Lsn(0x700))
    for tables in ({"public.t"}, {"public.t", "public.other"}, {"public.other"}):
        plan = plan_batch(stream, batch, tables, KeyMoves(types, key))
        placed = [p for p in placed_changes(changes(stream), tables, types, key)
                  if batch.start <= p[0].final_lsn < batch.end]
        truncates: dict[str, list[int]] = {}
        for b, rel, place, op, _, _ in placed:
            if op is ChangeOp.TRUNCATE:
                truncates.setdefault(rel.qualified, []).append(b.final_lsn.row_pos(place))
        assert plan.truncates == truncates
        assert plan.newest_of == {n: max(p[0].commit_time for p in placed if p[1].qualified == n) for n in tables}
        assert plan.oldest_of == {n: min(p[0].commit_time for p in placed if p[1].qualified == n) for n in tables}
        described = list(dict.fromkeys(id(p[1]) for p in placed))  # each decoding pass has its own objects
        assert list(plan.relations.values()) == [next(p[1] for p in placed if id(p[1]) == i) for i in described]
        assert plan.unchanged == set() and (plan.transactions, plan.newest.second) == (2, 7)
    # t's places: 1 insert, 2 update, 3+4 the key move, 5 update, 6 delete, 7 TRUNCATE, 8 insert, 9 TRUNCATE
    assert plan_batch(stream, batch, {"public.t"}, KeyMoves(types, key)).truncates == {
        "public.t": [Lsn(0x500).row_pos(7), Lsn(0x500).row_pos(9), Lsn(0x600).row_pos(4)]}
    toasted = stream[:9] + [b"U" + tid + b"N" + tup("1", UNCHANGED)] + stream[10:]
    assert plan_batch(toasted, batch, {"public.t"}, KeyMoves(types, key)).unchanged == {"public.t"}
    assert plan_batch(toasted, batch, {"public.other"}, KeyMoves(types, key)).unchanged == set()
    assert plan_batch([], batch, {"public.t"}, KeyMoves(types, key)) == BatchPlan()
    # from slot.peek_runs' messages a TRUNCATE after its table's changes cannot be placed; any other can
    with pytest.raises(PlacesUnknown, match="public.t"):
        plan_batch(stream, batch, {"public.t"}, KeyMoves(types, key), runs=True)
    later = LsnRange(Lsn(0x600), Lsn(0x800))
    with_runs, every = (plan_batch(stream, later, {"public.other"}, KeyMoves(types, key), runs=r) for r in (True, False))
    assert list(with_runs.relations.values()) == list(every.relations.values()) and with_runs.newest_of
    assert dataclasses.replace(with_runs, relations={}) == dataclasses.replace(every, relations={})
    for broken in (stream[:2] + [b"I" + tid + b"N" + tup("1", "a")],  # outside a transaction
                   [stream[1], begin(0x500, 9), b"I" + tid + b"N" + tup("1")],  # relation 1 never described
                   stream[:7] + [b"U" + tid + b"N" + b"\x00\x02t\x00\x00\x00\x09ab"],  # a value past the end
                   stream[:7] + [b"I" + tid], stream[:7] + [b"D" + tid + b"N" + tup("1", "a")],
                   stream[:7] + [b"U" + tid + b"X" + tup("1", "a")]):
        with pytest.raises(ProtocolError):
            plan_batch(broken, batch, {"public.t"}, KeyMoves(types, key))
