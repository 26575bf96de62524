"""The golden all-types table lands with exact values (DESIGN principle 5)."""

import datetime as dt
from decimal import Decimal

import pytest

from ingest_tests.integration.conftest import snapshot

GOLDEN_DDL = """
CREATE TABLE golden (
  id INT PRIMARY KEY,
  d65 DECIMAL(65,30), d12 DECIMAL(12,4),
  ubig BIGINT UNSIGNED, sbig BIGINT, utiny TINYINT UNSIGNED, stiny TINYINT,
  usmall SMALLINT UNSIGNED, umed MEDIUMINT UNSIGNED, uint INT UNSIGNED,
  f FLOAT, dbl DOUBLE,
  txt VARCHAR(50) CHARACTER SET utf8mb4, longt LONGTEXT CHARACTER SET utf8mb4, j JSON,
  dt6 DATETIME(6), ts6 TIMESTAMP(6) NULL DEFAULT NULL, t0 TIME, t3 TIME(3), y YEAR,
  e ENUM('x','y','z'), s SET('a','b','c'),
  b1 BIT(1), b10 BIT(10), b64 BIT(64),
  bl BLOB, vb VARBINARY(8), bn BINARY(4),
  d DATE, dtz DATETIME,
  s2 SET('Trailers','Commentaries','Deleted Scenes','Behind the Scenes'),
  g GEOMETRY, pt POINT REF_SYSTEM_ID=4326, u UUID, i4 INET4, i6 INET6,
  ch CHAR(20) CHARACTER SET utf8mb4, nch NCHAR(5), chl CHAR(4) CHARACTER SET latin1,
  el ENUM('x','\u00fc') CHARACTER SET latin1, sl SET('a','\u00fc') CHARACTER SET latin1, t6 TIME(6), i6z INET6
)"""

GOLDEN_ROWS = [
    """(1, '12345678901234567890123456789012345.123456789012345678901234567890', -12345678.1234,
        18446744073709551615, -9223372036854775808, 255, -128, 65535, 16777215, 4294967295,
        1.5, 2.718281828459045,
        'caf\u00e9 \U0001F600', REPEAT('\U0001F680', 1000), '{"k": [1, 2.5, "\u00fc"], "n": null}',
        '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', '838:59:59', '-00:00:01.500', 2155,
        'z', 'a,c', b'1', b'1000000001', b'1111111111111111111111111111111111111111111111111111111111111111',
        x'00FF10', x'DEADBEEF', x'0102', '2024-02-29', '1970-01-01 00:00:00',
        'Behind the Scenes,Trailers,Commentaries', ST_GeomFromText('LINESTRING(0 0, 1 1)'),
        ST_GeomFromText('POINT(1 2)', 4326), '123e4567-e89b-12d3-a456-426614174000', '10.1.2.3',
        '::ffff:1.2.3.4', 'English   ', ' \u00fc a', 'ab', '\u00fc', 'a,\u00fc', '-00:00:00.001214',
        '1:0:2:3:4:5:6:7')""",
    "(2" + ", NULL" * 42 + ")",
    # zero values; 'bogus' is no ENUM label: a permissive sql_mode stores index 0, read back as ''
    """(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '', '', '[]', '0000-00-00 00:00:00', '0000-00-00 00:00:00',
        '-838:59:59', '00:00:00', 0, 'bogus', '', b'0', b'0', b'0', '', '', '', '0000-00-00', '2020-00-00 00:00:00',
        '', ST_GeomFromText('POINT(0 0)'), ST_GeomFromText('POINT(0 0)', 4326),
        '00000000-0000-0000-0000-000000000000', '0.0.0.0', '::', '', '   ', ' ', 'x', '', '00:00:00', '::')""",
]

EXPECTED = {
    1: {
        "d65": "12345678901234567890123456789012345.123456789012345678901234567890",
        "d12": Decimal("-12345678.1234"), "ubig": Decimal("18446744073709551615"), "sbig": -9223372036854775808,
        "utiny": 255, "stiny": -128, "usmall": 65535, "umed": 16777215, "uint": 4294967295,
        "f": 1.5, "dbl": 2.718281828459045, "txt": "caf\u00e9 \U0001F600", "longt": "\U0001F680" * 1000,
        "j": '{"k": [1, 2.5, "\u00fc"], "n": null}',
        "dt6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "ts6": "2038-01-19 03:14:07.999999",
        "t0": "838:59:59", "t3": "-00:00:01.500", "y": 2155, "e": "z", "s": ["a", "c"],
        "b1": b"\x01", "b10": b"\x02\x01", "b64": b"\xff" * 8, "bl": b"\x00\xff\x10", "vb": b"\xde\xad\xbe\xef",
        "bn": b"\x01\x02\x00\x00", "d": dt.date(2024, 2, 29), "dtz": dt.datetime(1970, 1, 1),
        # SET members in definition order, not in the order written nor alphabetical
        "s2": ["Trailers", "Commentaries", "Behind the Scenes"],
        "g": {"wkb": bytes.fromhex("010200000002000000" + "00" * 16 + "000000000000f03f" * 2), "srid": 0},
        "pt": {"wkb": bytes.fromhex("0101000000000000000000f03f0000000000000040"), "srid": 4326},
        "u": "123e4567-e89b-12d3-a456-426614174000", "i4": "10.1.2.3", "i6": "::ffff:1.2.3.4",
        # CHAR(n) as MariaDB's clients and its binlog give it: without the trailing spaces that pad it
        "ch": "English", "nch": " \u00fc a", "chl": "ab",
        # each wrong through the binlog before (the differential test found them): a latin1 label, a
        # negative fraction of a second, a lone zero group of an INET6
        "el": "\u00fc", "sl": ["a", "\u00fc"], "t6": "-00:00:00.001214", "i6z": "1::2:3:4:5:6:7",
    },
    2: {k: None for k in ["d65", "d12", "ubig", "sbig", "utiny", "stiny", "usmall", "umed", "uint", "f", "dbl",
                          "txt", "longt", "j", "dt6", "ts6", "t0", "t3", "y", "e", "s", "b1", "b10", "b64", "bl",
                          "vb", "bn", "d", "dtz", "s2", "g", "pt", "u", "i4", "i6", "ch", "nch", "chl", "el", "sl",
                          "t6", "i6z"]},
    3: {
        "d65": "0." + "0" * 30, "d12": Decimal("0.0000"), "ubig": Decimal(0), "sbig": 0, "utiny": 0, "stiny": 0,
        "usmall": 0, "umed": 0, "uint": 0, "f": 0.0, "dbl": 0.0, "txt": "", "longt": "", "j": "[]",
        "dt6": None, "ts6": None, "t0": "-838:59:59", "t3": "00:00:00.000", "y": None, "e": "", "s": [],
        "b1": b"\x00", "b10": b"\x00\x00", "b64": b"\x00" * 8, "bl": b"", "vb": b"", "bn": b"\x00" * 4,
        "d": None, "dtz": None, "s2": [],
        "g": {"wkb": bytes.fromhex("0101000000" + "00" * 16), "srid": 0},
        "pt": {"wkb": bytes.fromhex("0101000000" + "00" * 16), "srid": 4326},
        "u": "00000000-0000-0000-0000-000000000000", "i4": "0.0.0.0", "i6": "::",
        "ch": "", "nch": "", "chl": "", "el": "x", "sl": [], "t6": "00:00:00.000000", "i6z": "::",
    },
}


@pytest.mark.parametrize("reader", ["jdbc", "python"])
def test_golden_table_lands_with_exact_values(spark, root, params, tmp_path, monkeypatch, reader):
    """Both chunk readers: Spark's JDBC reader (the type contract as SQL), and the Python data source
    that reads tables with a column JDBC cannot carry (made to read this one here)."""
    import ingest.sources.mysql.jdbc as jdbc

    if reader == "python":
        monkeypatch.setattr(jdbc, "jdbc_columns", lambda columns, table="?": None)
    with root.cursor() as cur:
        cur.execute(GOLDEN_DDL)
        cur.execute("INSERT INTO golden VALUES " + ",".join(GOLDEN_ROWS))
    path = str(tmp_path / "golden")
    read = spy_on_readers(monkeypatch)
    snapshot(spark, params, "golden", path)
    assert read == [reader], read
    df = spark.read.format("delta").load(path)
    types = dict(df.dtypes)
    assert types["d65"] == "string" and types["ubig"] == "decimal(20,0)" and types["s"] == "array<string>"
    assert types["ch"] == "string" and types["nch"] == "string"  # not char(n), which Spark pads on read
    assert types["dt6"] == "timestamp_ntz" and types["ts6"] == "timestamp" and types["b10"] == "binary"
    assert types["g"] == "struct<wkb:binary,srid:int>" and types["u"] == "string" and types["i6"] == "string"
    # TIMESTAMP is an instant: render it in UTC to compare without the Python process's zone
    rows = {r["id"]: r.asDict() for r in df.selectExpr("*", "date_format(ts6, 'yyyy-MM-dd HH:mm:ss.SSSSSS') AS ts6s")
            .drop("ts6").withColumnRenamed("ts6s", "ts6").collect()}
    for key, expected in EXPECTED.items():
        got = {k: plain(v) for k, v in rows[key].items()}
        for column, value in expected.items():
            assert got[column] == value, f"row {key}, column {column}: {got[column]!r} != {value!r}"


def spy_on_readers(monkeypatch) -> list[str]:
    """Which chunk reader each wave used."""
    import ingest.adapters.mysql as adapter

    used: list[str] = []

    def spy(name: str, label: str):
        real = getattr(adapter, name)

        def read(*args, **kwargs):
            used.append(label)
            return real(*args, **kwargs)

        monkeypatch.setattr(adapter, name, read)

    spy("read_chunks_jdbc_df", "jdbc")
    spy("read_chunks_python_df", "python")
    return used


def plain(value):
    """A Spark value as plain Python: structs as dicts, binary as bytes."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: plain(v) for k, v in value.asDict().items()}
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


def comparable(df):
    """A lake table's rows as plain Python dicts, ordered by id, without `_pos`."""
    return [plain(r) for r in df.drop("_pos").orderBy("id").collect()]
