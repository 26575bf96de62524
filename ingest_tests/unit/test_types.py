import datetime as dt
from decimal import Decimal

import pytest

from ingest.sources.mysql.errors import UnsupportedColumnType
from ingest.sources.mysql.types import MySQLColumn, column_type, convert_column


def col(data_type, column_type=None, **kw):
    return MySQLColumn("c", data_type, column_type or data_type, **kw)


@pytest.mark.parametrize("column, spark", [
    (col("tinyint"), "tinyint"),
    (col("tinyint", "tinyint(3) unsigned"), "smallint"),
    (col("smallint", "smallint unsigned"), "int"),
    (col("mediumint", "mediumint unsigned"), "int"),
    (col("int", "int(10) unsigned"), "bigint"),
    (col("bigint"), "bigint"),
    (col("bigint", "bigint(20) unsigned"), "decimal(20,0)"),
    (col("decimal", "decimal(12,2)", numeric_precision=12, numeric_scale=2), "decimal(12,2)"),
    (col("decimal", "decimal(65,30)", numeric_precision=65, numeric_scale=30), "string"),
    (col("double"), "double"), (col("float"), "float"),
    (col("varchar", "varchar(10)"), "string"), (col("longtext"), "string"), (col("json"), "string"),
    (col("enum", "enum('a','b')"), "string"), (col("set", "set('a','b')"), "array<string>"),
    (col("blob"), "binary"), (col("varbinary", "varbinary(4)"), "binary"),
    (col("binary", "binary(4)", char_length=4), "binary"),
    (col("bit", "bit(10)", numeric_precision=10), "binary"),
    (col("date"), "date"), (col("datetime", "datetime(6)"), "timestamp_ntz"),
    (col("timestamp", "timestamp(6)"), "timestamp"), (col("time", "time(3)"), "string"),
    (col("year", "year(4)"), "smallint"),
])
def test_spark_types(column, spark):
    assert column_type(column).spark == spark


def convert(column, value):
    return convert_column(column_type(column), [value])[0]


def test_unsigned_bigint_max_is_exact():
    assert convert(col("bigint", "bigint unsigned"), 18446744073709551615) == Decimal("18446744073709551615")


def test_wide_decimal_keeps_every_digit_in_plain_notation():
    c = col("decimal", "decimal(65,30)", numeric_precision=65, numeric_scale=30)
    assert convert(c, Decimal("0E-30")) == "0." + "0" * 30
    big = Decimal("12345678901234567890123456789012345.123456789012345678901234567890")
    assert convert(c, big) == "12345678901234567890123456789012345.123456789012345678901234567890"


def test_set_members_including_empty_set():
    c = col("set", "set('a','b')")
    assert convert(c, "a,b") == ["a", "b"]
    assert convert(c, "") == []
    assert convert(c, {"b", "a"}) == ["a", "b"]  # the binlog decoder gives a Python set


def test_bit_from_driver_bytes_and_from_binlog_bit_string_agree():
    c = col("bit", "bit(10)", numeric_precision=10)
    assert convert(c, b"\x02\x01") == b"\x02\x01"
    assert convert(c, "1000000001") == b"\x02\x01"
    assert convert(c, 513) == b"\x02\x01"


def test_zero_dates_become_null():
    assert convert(col("date"), "0000-00-00") is None
    assert convert(col("datetime"), "0000-00-00 00:00:00") is None
    assert convert(col("timestamp"), "0000-00-00 00:00:00") is None
    assert convert(col("date"), dt.date(2024, 2, 29)) == dt.date(2024, 2, 29)


def test_timestamp_is_an_utc_instant():
    value = convert(col("timestamp"), dt.datetime(2024, 1, 1, 12, 0, 0, 5))
    assert value == dt.datetime(2024, 1, 1, 12, 0, 0, 5, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("fsp, delta, text", [
    (0, dt.timedelta(hours=838, minutes=59, seconds=59), "838:59:59"),
    (0, -dt.timedelta(hours=838, minutes=59, seconds=59), "-838:59:59"),
    (6, dt.timedelta(seconds=1, microseconds=5), "00:00:01.000005"),
    (3, dt.timedelta(hours=1, microseconds=123456), "01:00:00.123"),
    (6, -dt.timedelta(microseconds=1), "-00:00:00.000001"),
])
def test_time_text(fsp, delta, text):
    assert convert(col("time", f"time({fsp})", datetime_precision=fsp), delta) == text


def test_year_zero_is_null():
    assert convert(col("year"), 0) is None
    assert convert(col("year"), 2155) == 2155


def test_unsupported_types_name_table_column_and_fix():
    with pytest.raises(UnsupportedColumnType,
                       match=r"table shop\.t: column 'c' .* Fix: leave the column out \(tables\.columns\.shop\.t\.exclude"):
        column_type(col("type#242"), "shop.t")


def test_set_members_keep_definition_order_from_the_binlog():
    members = ("Trailers", "Commentaries", "Deleted Scenes", "Behind the Scenes")
    c = col("set", "set(...)", members=members)
    # python-mysql-replication hands back an unordered Python set; the snapshot, the server's text
    assert convert(c, {"Commentaries", "Trailers"}) == ["Trailers", "Commentaries"]
    assert convert(c, {"Behind the Scenes", "Trailers"}) == convert(c, "Trailers,Behind the Scenes")


@pytest.mark.parametrize("kind", ["geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                                  "multipolygon", "geometrycollection", "geomcollection"])
def test_spatial_types_are_wkb_and_srid(kind):
    internal = (4326).to_bytes(4, "little") + bytes.fromhex("0101000000000000000000f03f0000000000000040")
    assert column_type(col(kind)).spark == "struct<wkb:binary,srid:int>"
    assert convert(col(kind), internal) == {"wkb": internal[4:], "srid": 4326}


def test_uuid_and_inet_from_binlog_bytes_equal_the_snapshot_text():
    # the binlog strips trailing zero bytes of these fixed-size binary columns
    assert convert(col("uuid"), bytes.fromhex("123e4567e89b12d3a456426614174000")[:-1]) == \
        "123e4567-e89b-12d3-a456-426614174000"
    assert convert(col("uuid"), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11") == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert convert(col("inet4"), "") == "0.0.0.0"
    assert convert(col("inet4"), b"\n\x01\x02\x03") == "10.1.2.3"
    assert convert(col("inet6"), bytes(10) + b"\xff\xff\x01\x02\x03\x04") == "::ffff:1.2.3.4"
    assert convert(col("inet6"), bytes(12) + b"\x01\x02\x03\x04") == "::1.2.3.4"
    assert convert(col("inet6"), bytes(15) + b"\x01") == "::1"
    assert convert(col("inet6"), bytes.fromhex("20010db8000000000000ff0000428329")) == "2001:db8::ff00:42:8329"


@pytest.mark.parametrize("address, server_text", [
    # as MariaDB 10.11 gave them back (the differential test compares every random one)
    ("1:0:2:3:4:5:6:7", "1::2:3:4:5:6:7"), ("2001:2:0:e361:66ab:94fa:82d5:eae5", "2001:2::e361:66ab:94fa:82d5:eae5"),
    ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"), ("1:0:0:2:0:0:0:3", "1:0:0:2::3"), ("1::", "1::"), ("::", "::"),
    ("::1:0", "::0.1.0.0"), ("::100", "::100"), ("::ffff:0:0", "::ffff:0.0.0.0")])
def test_inet6_from_the_binlog_is_written_as_mariadb_writes_it(address, server_text):
    import ipaddress

    assert convert(col("inet6"), ipaddress.IPv6Address(address).packed) == server_text


def test_vector_is_an_array_of_float32():
    import struct

    assert column_type(col("vector")).spark == "array<float>"
    assert convert(col("vector"), struct.pack("<3f", 1.5, -2.0, 0.25)) == [1.5, -2.0, 0.25]


def test_fast_path_returns_values_untouched():
    values = [1, None, 3]
    assert convert_column(column_type(col("int")), values) is values


def test_binlog_quirks_map_onto_the_snapshot_values():
    # values as python-mysql-replication decodes them, next to what the snapshot reads
    assert convert(col("binary", "binary(4)", char_length=4), b"\x01\x02") == b"\x01\x02\x00\x00"
    assert convert(col("blob"), "") == b""
    assert convert(col("year"), 1900) is None
    assert convert(col("timestamp"), dt.datetime(1970, 1, 1)) is None
    assert convert(col("timestamp"), dt.datetime(1970, 1, 1, 0, 0, 1)) == dt.datetime(1970, 1, 1, 0, 0, 1,
                                                                                       tzinfo=dt.timezone.utc)
