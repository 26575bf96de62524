"""Which tables a batch run names: those the server's binlog shows it touching, plus snapshots to merge."""

from ingest.batches import batch_tables
from ingest.sources.mysql.peek import tables_in_range
from ingest.sources.mysql.positions import BinlogPosition

LOG = "mysql-bin.000001"


def events(*rows):
    """SHOW BINLOG EVENTS rows (log, pos, type, server id, end pos, info) from (pos, type, info), each
    event ending where the next begins and the last 31 bytes on."""
    ends = [pos for pos, _, _ in rows[1:]] + [rows[-1][0] + 31]
    return [(LOG, pos, kind, 1, end, info) for (pos, kind, info), end in zip(rows, ends)]


# As MariaDB 10.11 lists an INSERT into `we.ird` and an UPDATE of `t2` in database d, then one into
# another database's table of the same name.
TWO_TRANSACTIONS = events(
    (100, "Gtid", "BEGIN GTID 0-1-7"),
    (142, "Annotate_rows", "INSERT INTO `we.ird` VALUES (1,1),(2,2)"),
    (204, "Table_map", "table_id: 18 (d.we.ird)"),
    (264, "Write_rows_v1", "table_id: 18 flags: STMT_END_F"),
    (315, "Xid", "COMMIT /* xid=12 */"),
    (346, "Gtid", "BEGIN GTID 0-1-8"),
    (388, "Table_map", "table_id: 19 (d.t2)"),
    (448, "Update_rows_v1", "table_id: 19 flags: STMT_END_F"),
    (518, "Xid", "COMMIT /* xid=14 */"),
    (549, "Gtid", "BEGIN GTID 0-1-9"),
    (591, "Table_map", "table_id: 20 (other.t3)"),
    (651, "Write_rows_v1", "table_id: 20 flags: STMT_END_F"),
    (702, "Xid", "COMMIT /* xid=16 */"),
)


def test_the_tables_of_the_database_whose_rows_the_range_changes():
    # 733: where the last event ends (a batch up to the binlog's head)
    assert tables_in_range(TWO_TRANSACTIONS, "d", BinlogPosition(LOG, 733)) == {"we.ird", "t2"}
    assert tables_in_range(TWO_TRANSACTIONS, "other", BinlogPosition(LOG, 733)) == {"t3"}
    assert tables_in_range(TWO_TRANSACTIONS, "d", BinlogPosition(LOG, 549)) == {"we.ird", "t2"}


def test_the_range_ends_at_its_end_but_a_transaction_begun_before_it_counts_whole():
    assert tables_in_range(TWO_TRANSACTIONS, "d", BinlogPosition(LOG, 346)) == {"we.ird"}
    # the batch takes every transaction that begins before its end
    assert tables_in_range(TWO_TRANSACTIONS, "d", BinlogPosition(LOG, 388)) == {"we.ird", "t2"}


def test_ddl_or_events_that_run_out_before_the_end_cannot_tell():
    truncate = events((100, "Gtid", "GTID 0-1-9"), (142, "Query", "use `d`; TRUNCATE TABLE `t2`"))
    assert tables_in_range(truncate, "d", BinlogPosition(LOG, 300)) is None
    assert tables_in_range(TWO_TRANSACTIONS[:7], "d", BinlogPosition(LOG, 733)) is None  # read no further
    statement_based = events((100, "Query", "BEGIN"), (140, "Table_map", "table_id: 5 (d.t2)"),
                             (200, "Query", "COMMIT"))
    assert tables_in_range(statement_based, "d", BinlogPosition(LOG, 150)) == {"t2"}
    assert tables_in_range(statement_based[:2], "d", BinlogPosition(LOG, 150)) is None  # its COMMIT unread


def test_a_run_names_the_touched_tables_and_those_with_a_snapshot_to_merge():
    tables = ["a", "b", "c", "d"]
    snapshots = {"a": "s1", "b": "s2", "c": "s3", "d": None}
    merged = {"a": ["s1"], "b": ["s1"], "c": ["s3", None], "d": [None]}  # b: a newer snapshot; c: history lacks it
    assert batch_tables(tables, {"a"}, snapshots, merged) == ["a", "b", "c"]
    assert batch_tables(tables, set(), {t: "s" for t in tables}, {t: ["s"] for t in tables}) == []
    assert batch_tables(tables, None, snapshots, merged) == tables  # the server could not tell
