"""The JDBC snapshot reader's SQL (pure): chunk predicates, the reader choice, driver errors."""

import datetime as dt

import pytest

from ingest.sources.mysql.chunks import Chunk
from ingest.sources.mysql.errors import TRANSIENT_CODES, executor_error_code
from ingest.sources.mysql.jdbc import chunk_predicate, chunk_table, jdbc_columns
from ingest.sources.mysql.types import MySQLColumn


def test_chunk_predicate_spells_the_key_range_with_literals_over_the_key_aliases():
    chunk = Chunk(3, (10, "a'b"), (20, "z"))
    sql = chunk_predicate(["id", "name"], chunk)
    assert sql == ("((`k0` > 10) OR (`k0` = 10 AND `k1` >= 'a\\'b')) AND "
                   "((`k0` < 20) OR (`k0` = 20 AND `k1` < 'z'))")


def test_chunk_predicate_of_open_ends_and_typed_keys():
    assert chunk_predicate(["id"], Chunk(0, None, None)) == "TRUE"
    assert chunk_predicate(["d"], Chunk(0, (dt.date(2024, 2, 29),), None)) == "((`k0` >= '2024-02-29'))"
    assert chunk_predicate(["b"], Chunk(0, None, (b"\x00'",),)) == "((`k0` < _binary X'0027'))"


def test_a_table_with_a_column_only_the_python_reader_converts_is_not_read_by_jdbc():
    cols = [MySQLColumn("id", "int", "int"), MySQLColumn("v", "vector", "vector(3)")]
    assert jdbc_columns(cols) is None
    plain = jdbc_columns([MySQLColumn("id", "int", "int"), MySQLColumn("t", "time", "time(3)", datetime_precision=3)])
    assert [c.alias for c in plain] == ["c0", "c1"]


def test_the_chunk_table_joins_the_snapshot_position_instead_of_selecting_subqueries():
    cols = jdbc_columns([MySQLColumn("id", "int", "int"), MySQLColumn("we`ird", "varchar", "varchar(3)")])
    sql = chunk_table("db", "t", cols, ["id"])
    select_list = sql.split(" FROM `db`.`t`")[0]
    # a subquery in the select list would stop the server from merging the derived table Spark wraps
    assert "SESSION_STATUS" not in select_list
    assert "`_t`.`we``ird` AS `c1`" in select_list and "`_t`.`id` AS `k0`" in select_list
    # the position is computed once, in the one-row table joined to every row
    assert "BINLOG_SNAPSHOT_POSITION" in sql.split(" CROSS JOIN ")[1] and "`_s`.`p` AS `_pos`" in select_list


def test_text_is_read_as_its_bytes_and_numbers_as_the_driver_maps_them():
    cols = jdbc_columns([MySQLColumn("id", "int", "int"), MySQLColumn("v", "varchar", "varchar(3)"),
                         MySQLColumn("e", "enum", "enum('a')"), MySQLColumn("s", "set", "set('a','b')"),
                         MySQLColumn("d", "datetime", "datetime")])
    assert [c.jdbc_type for c in cols] == [None, "BINARY", "BINARY", "BINARY", None]
    # Spark's expressions see a string: a SET's split and comparison over the bytes made one
    assert "split(CAST(c3 AS STRING), ',')" in cols[3].spark and cols[1].spark == "CAST(c1 AS string)"


@pytest.mark.parametrize("text, code", [
    ("py4j... java.sql.SQLNonTransientConnectionException: (conn=12) Connection reset", 2013),
    ("java.sql.SQLTransientConnectionException: (conn=3) Connection was killed", 2013),
    ("java.sql.SQLNonTransientConnectionException: Socket fail to connect to address=(host=127.0.0.1)"
     "(port=9)(type=primary). Connection refused", 2003),
    ("java.sql.SQLSyntaxErrorException: (conn=4) Unknown column 'x'", None),
    ("MySQLdb.OperationalError: (2013, 'Lost connection')", 2013),
])
def test_jdbc_connection_errors_map_to_the_codes_the_wave_retry_knows(text, code):
    assert executor_error_code(text) == code
    assert (code in TRANSIENT_CODES) == (code is not None)
