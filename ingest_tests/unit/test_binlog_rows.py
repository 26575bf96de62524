"""The compiled binlog row readers' DECIMAL (ingest/sources/mysql/rows.py) against MySQL's packed form,
built here as the server writes it (strings/decimal2bin): every group size, both signs, zero."""

from decimal import Decimal
from types import SimpleNamespace

from hypothesis import given, strategies as st

from ingest.sources.mysql.rows import _DECIMAL_BYTES, _new_decimal


def packed(negative: bool, whole: int, frac: int, precision: int, scale: int) -> bytes:
    integral = precision - scale
    digits, frac_digits = str(whole).rjust(integral, "0") if integral else "", str(frac).rjust(scale, "0")
    out = b""
    head = integral % 9
    if head:
        out += int(digits[:head]).to_bytes(_DECIMAL_BYTES[head], "big")
    for i in range(head, integral, 9):
        out += int(digits[i:i + 9]).to_bytes(4, "big")
    groups = scale // 9
    for i in range(0, groups * 9, 9):
        out += int(frac_digits[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_digits[groups * 9:]).to_bytes(_DECIMAL_BYTES[scale % 9], "big")
    data = bytearray(out)
    data[0] ^= 0x80  # the sign bit, set for a positive value
    return bytes(x ^ 0xFF for x in data) if negative else bytes(data)


@st.composite
def decimals(draw):
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(precision, 30)))
    whole = draw(st.integers(0, 10 ** (precision - scale) - 1)) if precision > scale else 0
    frac = draw(st.integers(0, 10 ** scale - 1)) if scale else 0
    return draw(st.booleans()), whole, frac, precision, scale


@given(decimals())
def test_a_packed_decimal_reads_as_its_exact_value_and_scale(case):
    negative, whole, frac, precision, scale = case
    read = _new_decimal(SimpleNamespace(precision=precision, decimals=scale))
    data = b"\x01" + packed(negative, whole, frac, precision, scale) + b"\x02"
    value, end = read(data, 1)
    sign = "-" if negative else ""
    assert str(value) == str(Decimal(f"{sign}{whole}.{frac:0{scale}d}" if scale else f"{sign}{whole}"))
    assert end == len(data) - 1


def time_packed(micros: int, fsp: int) -> bytes:
    """TIME(fsp) as the server writes it (MySQL 5.6's my_time_packed_to_binary, MariaDB's too): the
    packed value (hh:mm:ss bits << 24, plus microseconds) split by C's shift and remainder."""
    negative, whole = micros < 0, abs(micros)
    seconds, frac = divmod(whole, 1_000_000)
    packed = ((seconds // 3600) << 12 | (seconds // 60 % 60) << 6 | seconds % 60) << 24 | frac
    packed = -packed if negative else packed
    int_part = packed >> 24  # an arithmetic shift: rounds a negative down
    frac_part = int(abs(packed) % (1 << 24)) * (-1 if packed < 0 else 1)  # C's %: the dividend's sign
    size = (fsp + 1) // 2
    if size == 3:
        return (packed + 0x800000000000).to_bytes(6, "big")
    head = (int_part + 0x800000).to_bytes(3, "big")
    if size == 0:
        return head
    unit = {1: 10_000, 2: 100}[size]
    return head + (frac_part // unit if frac_part >= 0 else -(-frac_part // unit)).to_bytes(size, "big", signed=True)


@given(st.integers(0, 6).flatmap(lambda fsp: st.tuples(st.just(fsp), st.integers(
    -(838 * 3600 + 59 * 60 + 59) * 10 ** fsp, (838 * 3600 + 59 * 60 + 59) * 10 ** fsp))))
def test_a_packed_time_reads_as_its_value_negative_fractions_too(case):
    import datetime as dt

    from ingest.sources.mysql.rows import time2

    fsp, units = case
    micros = units * 10 ** (6 - fsp)
    assert time2(time_packed(micros, fsp)) == dt.timedelta(microseconds=micros)


def test_enum_and_set_labels_are_decoded_in_their_columns_charset_once():
    from ingest.sources.mysql.binlog import labels_in_their_charset

    # a latin1 column's labels as the patched table map reader keeps them (undecodable bytes as surrogates)
    latin1 = SimpleNamespace(character_set_name="latin1", enum_values=["", "x", b"\xfc".decode("utf-8", "surrogateescape")],
                             set_values=None)
    utf8 = SimpleNamespace(character_set_name="utf8mb4", enum_values=None, set_values=["a", "\u00fc"])
    labels_in_their_charset([latin1, utf8])
    labels_in_their_charset([latin1, utf8])  # a rows event's columns are its table map's: no second decoding
    assert latin1.enum_values == ["", "x", "\u00fc"] and utf8.set_values == ["a", "\u00fc"]
