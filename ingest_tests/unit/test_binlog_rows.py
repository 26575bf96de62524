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
