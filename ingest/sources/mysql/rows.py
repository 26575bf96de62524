"""A faster reader of rows events' bodies (pure): each row as the type contract's values, for less.

Decoding binlog rows in Python is the cost of CDC (DESIGN: ~28k inserts/s on one core). Most of it
is the library's generic path: several calls, a buffer copy and a type dispatch for every value.
Here a table map is compiled once into one row function (generated Python) that reads each column's
value straight out of the event's bytes at an offset: numbers and text inline, other types by a
reader of their own.

Each reader gives the value python-mysql-replication would give, quirks included (a zero DATE is
None, a BIT is a string of bits), and the column's contract conversion (events.TableDecoder's) is
applied to it as it is read, so a row comes out as one list of contract values in the table map's
order, with no dict of the library's values in between. The binlog tests hold this reader and the
library's (through TableDecoder.row) to equal records. A column type not compiled here (MySQL's
binary JSON, pre-5.6 temporal types) leaves the whole table map to the library (`compile_rows`
returns None).
"""

from __future__ import annotations

import codecs
import datetime as dt
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

# MySQL protocol field type codes (include/mysql_com.h)
TINY, SHORT, LONG, FLOAT, DOUBLE, TIMESTAMP, LONGLONG, INT24, DATE = 1, 2, 3, 4, 5, 7, 8, 9, 10
YEAR, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = 13, 15, 16, 17, 18, 19
NEWDECIMAL, ENUM, SET, BLOB, STRING, GEOMETRY = 246, 247, 248, 252, 254, 255

Reader = Callable[[bytes, int], tuple[Any, int]]

_FIXED = {  # type: (signed format, unsigned format)
    TINY: ("<b", "<B"), SHORT: ("<h", "<H"), LONG: ("<i", "<I"), LONGLONG: ("<q", "<Q"),
    FLOAT: ("<f", "<f"), DOUBLE: ("<d", "<d"),
}
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


class Fixed(NamedTuple):
    """A fixed-width number, read inline by the row function: struct's `unpack_from` and its size."""

    unpack: Callable[[bytes, int], tuple[Any, ...]]
    size: int


class Text(NamedTuple):
    """A length-prefixed value, read inline by the row function: the prefix's size and the codec
    (None: kept as bytes)."""

    length_size: int
    encoding: str | None


Column = Reader | Fixed | Text
"""How the row function reads one column: inline (Fixed, Text) or by calling its reader."""


def _fixed(fmt: str) -> Fixed:
    return Fixed(struct.Struct(fmt).unpack_from, struct.calcsize(fmt))


def _int24(unsigned: bool) -> Reader:
    def read(buf: bytes, off: int) -> tuple[int, int]:
        value = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
        if not unsigned and value >= 0x800000:
            value -= 0x1000000
        return value, off + 3
    return read


def _uint_le(size: int) -> Callable[[bytes, int], int]:
    if size == 1:  # a VARCHAR's or TINYBLOB's length, an ENUM's index: no slice
        return lambda buf, off: buf[off]
    if size == 2:
        return lambda buf, off: buf[off] | buf[off + 1] << 8
    return lambda buf, off: int.from_bytes(buf[off:off + size], "little")


def _int_be(data: bytes) -> int:
    """The library's read_int_be_by_size: signed big-endian, except 5 bytes (unsigned)."""
    return int.from_bytes(data, "big", signed=len(data) != 5)


def _text(length_size: int, column) -> Text:
    """A length-prefixed value, decoded as the library decodes it: by the column's character set, kept
    as bytes when Python has no codec of that name (binary), UTF-8 when the table map names none."""
    encoding: str | None = "utf-8"
    if column.character_set_name is not None:
        from pymysqlreplication.row_event import RowsEvent

        encoding = RowsEvent.charset_to_encoding(column.character_set_name)
        try:
            codecs.lookup(encoding)
        except LookupError:
            encoding = None
    return Text(length_size, encoding)


def _fsp(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """The fractional seconds' bytes and their microseconds (the library's __read_fsp)."""
    size = (fsp + 1) // 2
    if size == 0:
        return 0, lambda buf, off: 0

    def micro(buf: bytes, off: int) -> int:
        value = _int_be(buf[off:off + size])
        if fsp % 2:
            value = int(value / 10)
        return value * 10 ** (6 - fsp)
    return size, micro


def _datetime2(column) -> Reader:
    size, micro = _fsp(column.fsp)

    def read(buf: bytes, off: int) -> tuple[Any, int]:
        data = int.from_bytes(buf[off:off + 5], "big")
        year_month = (data >> 22) & 0x1FFFF
        try:
            value = dt.datetime(int(year_month / 13), year_month % 13, (data >> 17) & 0x1F, (data >> 12) & 0x1F,
                                (data >> 6) & 0x3F, data & 0x3F)
        except ValueError:
            return None, off + 5 + size
        ms = micro(buf, off + 5)
        return (value.replace(microsecond=ms) if ms > 0 else value), off + 5 + size
    return read


def _timestamp2(column) -> Reader:
    size, micro = _fsp(column.fsp)
    seconds = struct.Struct(">i").unpack_from

    def read(buf: bytes, off: int) -> tuple[Any, int]:
        value = dt.datetime.utcfromtimestamp(seconds(buf, off)[0])
        ms = micro(buf, off + 4)
        return (value.replace(microsecond=ms) if ms > 0 else value), off + 4 + size
    return read


def time2(data: bytes) -> dt.timedelta:
    """A TIME(fsp) value in MySQL 5.6's binary form (MariaDB's too), `data` its 3 + (fsp+1)//2 bytes:
    my_time_packed_from_binary. The whole is one offset big-endian number, so a negative time's
    fraction is stored complemented against its rounded-down seconds (-0.001214 s as -1 s and
    0.998786 s): reading the two parts apart, as python-mysql-replication 1.0.x does, gave
    -00:00:00.998786 for it."""
    size = len(data) - 3
    whole = int.from_bytes(data[:3], "big") - 0x800000
    frac = int.from_bytes(data[3:], "big") if size else 0
    if whole < 0 and frac:  # the fraction counts back from the next second
        whole, frac = whole + 1, frac - (1 << 8 * size)
    packed = (whole << 24) + frac * (0, 10_000, 100, 1)[size]
    sign, packed = (-1, -packed) if packed < 0 else (1, packed)
    hms = packed >> 24
    return dt.timedelta(hours=hms >> 12 & 0x3FF, minutes=hms >> 6 & 0x3F, seconds=hms & 0x3F,
                        microseconds=packed & 0xFFFFFF) * sign


def _time2(column) -> Reader:
    size = 3 + (column.fsp + 1) // 2
    return lambda buf, off: (time2(buf[off:off + size]), off + size)


def _date(buf: bytes, off: int) -> tuple[Any, int]:
    value = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
    year, month, day = value >> 9 & 0x7FFF, value >> 5 & 0xF, value & 0x1F
    if value == 0 or year == 0 or month == 0 or day == 0:
        return None, off + 3
    return dt.date(year, month, day), off + 3


def _new_decimal(column) -> Reader:
    """DECIMAL's packed form: groups of 9 digits in 4 bytes, the rest in fewer, all big-endian, the
    sign in the first byte's high bit and negatives stored complemented. Read as one integer whose
    groups are cut off by shifts (a walk over the bytes cost a third of an update's decoding)."""
    integral = column.precision - column.decimals
    whole_int, whole_frac = integral // 9, column.decimals // 9
    rest_int, rest_frac = integral - whole_int * 9, column.decimals - whole_frac * 9
    head, tail = _DECIMAL_BYTES[rest_int], _DECIMAL_BYTES[rest_frac]
    total = head + 4 * (whole_int + whole_frac) + tail
    sign_bit, every_bit = 1 << (8 * total - 1), (1 << (8 * total)) - 1
    frac_digits = column.decimals

    def read(buf: bytes, off: int) -> tuple[Any, int]:
        raw = int.from_bytes(buf[off:off + total], "big")
        negative = not raw & sign_bit
        raw ^= (every_bit ^ sign_bit) if negative else sign_bit  # sign bit off; a negative's complement undone
        frac = raw & ((1 << (8 * tail)) - 1)
        raw >>= 8 * tail
        scale = 10 ** rest_frac
        for i in range(whole_frac):  # from the last group of the fraction back
            frac += (raw & 0xFFFFFFFF) * scale
            raw >>= 32
            scale *= 10 ** 9
        whole, scale = 0, 1
        for _ in range(whole_int):
            whole += (raw & 0xFFFFFFFF) * scale
            raw >>= 32
            scale *= 10 ** 9
        whole += raw * scale  # the head bytes
        text = f"{'-' if negative else ''}{whole}.{frac:0{frac_digits}d}" if frac_digits else \
            f"{'-' if negative else ''}{whole}"
        return Decimal(text), off + total
    return read


def _enum(column) -> Reader:
    size, index, values = column.size, _uint_le(column.size), column.enum_values
    return lambda buf, off: ((values[index(buf, off)] if values else None), off + size)


def _set(column) -> Reader:
    """The members as a Python set, an empty one for a SET with none (the library gives None and says
    "empty set" in its none_sources; the contract's conversion makes it [])."""
    size, bits, members = column.size, _uint_le(column.size), list(enumerate(column.set_values or ()))

    def read(buf: bytes, off: int) -> tuple[Any, int]:
        mask = bits(buf, off)
        return {v for i, v in members if mask & (1 << i)}, off + size
    return read


def _bit(column) -> Reader:
    size, bits = column.bytes, column.bits

    def read(buf: bytes, off: int) -> tuple[Any, int]:
        out = []
        for i in range(size):
            end = 8 if i else (bits if size == 1 else (bits % 8 or 8))
            out.append(format(buf[off + i], "08b")[8 - end:])
        return "".join(out), off + size
    return read


def _year(buf: bytes, off: int) -> tuple[Any, int]:
    return buf[off] + 1900, off + 1


def column_reader(column) -> Column | None:
    """How to read one table-map column (a python-mysql-replication Column), or None when only the
    library reads its type."""
    kind = column.type
    if kind in _FIXED:
        return _fixed(_FIXED[kind][1 if column.unsigned else 0])
    if kind == INT24:
        return _int24(column.unsigned)
    if kind in (VARCHAR, STRING):
        return _text(2 if column.max_length > 255 else 1, column)
    if kind == BLOB:
        return _text(column.length_size, column)
    if kind == GEOMETRY:
        length = _uint_le(column.length_size)
        size = column.length_size
        return lambda buf, off: (buf[off + size:off + size + length(buf, off)], off + size + length(buf, off))
    readers = {NEWDECIMAL: _new_decimal, DATETIME2: _datetime2, TIMESTAMP2: _timestamp2, TIME2: _time2,
               ENUM: _enum, SET: _set, BIT: _bit}
    if kind in readers:
        return readers[kind](column)
    return {DATE: _date, YEAR: _year}.get(kind)


class RowsReader:
    """A table map compiled: reads the rows of its rows events as lists of contract values."""

    def __init__(self, readers: Sequence[Column], converts: Sequence[Callable[[Any], Any] | None],
                 kept: Sequence[bool]) -> None:
        self.image = image_function(readers, converts, kept)

    def rows(self, body: bytes, update: bool) -> list[Any]:
        """Every row of an event's body (after its columns-present bitmaps): a list of values per row,
        for an update a (before, after) pair."""
        out: list[Any] = []
        off, end, image = 0, len(body), self.image
        while off < end:
            if update:
                before, off = image(body, off)
                after, off = image(body, off)
                out.append((before, after))
            else:
                values, off = image(body, off)
                out.append(values)
        return out


_LENGTH = {1: "buf[off]", 2: "buf[off] | buf[off + 1] << 8"}
"""A length prefix of 1 or 2 bytes read inline (longer ones are BLOBs': int.from_bytes)."""


def image_function(readers: Sequence[Column], converts: Sequence[Callable[[Any], Any] | None],
                   kept: Sequence[bool]) -> Callable[[bytes, int], tuple[list[Any], int]]:
    """`image(buf, off) -> (values, next offset)` for one row image of these columns, generated as
    straight-line Python (as namedtuple and dataclasses generate theirs): a loop over the columns'
    readers cost a quarter of decoding, in the loop itself and a call per value. Integers, floats and
    length-prefixed text are read inline; every other type calls its reader. A column not `kept` (the
    config excludes it) is read past; each kept one is converted by its contract function, if any."""
    lines = ["def image(buf, off):"]
    null_bytes = (len(readers) + 7) // 8
    lines += [f"    n{k} = buf[off + {k}]" for k in range(null_bytes)]
    lines.append(f"    off += {null_bytes}")
    names: dict[str, Any] = {}
    values = []
    for i, (read, convert, keep) in enumerate(zip(readers, converts, kept)):
        v = f"v{i}"
        lines += [f"    if n{i >> 3} & {1 << (i & 7)}:", f"        {v} = None", "    else:"]
        if isinstance(read, Fixed):
            names[f"u{i}"] = read.unpack
            lines += [f"        {v} = u{i}(buf, off)[0]", f"        off += {read.size}"]
        elif isinstance(read, Text):
            size = read.length_size
            length = _LENGTH.get(size, f"int.from_bytes(buf[off:off + {size}], 'little')")
            lines += [f"        n = {length}", f"        off += {size}"]
            if read.encoding is None:
                lines.append(f"        {v} = buf[off:off + n]")
            else:
                names[f"e{i}"] = read.encoding
                lines.append(f"        {v} = buf[off:off + n].decode(e{i})")
            lines.append("        off += n")
        else:
            names[f"r{i}"] = read
            lines.append(f"        {v}, off = r{i}(buf, off)")
        if keep:
            if convert is None:
                values.append(v)
            else:
                names[f"c{i}"] = convert
                values.append(f"None if {v} is None else c{i}({v})")
    lines.append(f"    return [{', '.join(values)}], off")
    exec("\n".join(lines), names)  # noqa: S102 (our own text: names and offsets only)
    return names["image"]


def compile_rows(columns: Sequence[Any], converts: Mapping[str, Callable[[Any], Any] | None]) -> RowsReader | None:
    """A reader for a table map's columns, or None when a column's type is left to the library.
    `converts`: the contract's conversion of each column a row keeps, by name (None: the value as read)."""
    readers = [column_reader(c) for c in columns]
    if any(r is None for r in readers) or any(not c.name for c in columns):
        return None
    return RowsReader(readers, [converts.get(c.name) for c in columns],  # type: ignore[arg-type]
                      [c.name in converts for c in columns])
