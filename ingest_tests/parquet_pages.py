"""The rows of each data page of a Parquet file's column, read from the page headers themselves: pyarrow's
metadata stops at the column chunk. A page header is a Thrift struct in the compact protocol
(parquet-format's PageHeader), followed by the page's compressed bytes."""

from pathlib import Path

import pyarrow.parquet as pq

_DATA_PAGE, _DATA_PAGE_V2 = 0, 3


def page_rows(path: str | Path, column: int = 0) -> list[int]:
    """Rows in each data page of `column`, over every row group, in file order."""
    meta = pq.ParquetFile(path).metadata
    data = Path(path).read_bytes()
    rows = []
    for group in range(meta.num_row_groups):
        chunk = meta.row_group(group).column(column)
        at = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        end = at + chunk.total_compressed_size  # headers included
        while at < end:
            header, at = _struct(data, at)
            if header[1] == _DATA_PAGE:
                rows.append(header[5][1])  # num_values: a flat column's rows, nulls counted
            elif header[1] == _DATA_PAGE_V2:
                rows.append(header[8][3])  # num_rows
            at += header[3]  # compressed_page_size
    return rows


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    value, at = _varint(data, at)
    return (value >> 1) ^ -(value & 1), at


def _struct(data: bytes, at: int) -> tuple[dict, int]:
    """A struct's fields by id (integers as ints, structs as dicts, the rest as None) and where it ends."""
    fields: dict = {}
    last = 0
    while True:
        head = data[at]
        at += 1
        kind = head & 0x0F
        if kind == 0:  # stop
            return fields, at
        if head >> 4:
            last += head >> 4
        else:
            last, at = _zigzag(data, at)
        fields[last], at = _value(data, at, kind)


def _value(data: bytes, at: int, kind: int):
    if kind in (1, 2):  # a boolean field carries its value in its type
        return kind == 1, at
    if kind == 3:
        return data[at], at + 1
    if kind in (4, 5, 6):
        return _zigzag(data, at)
    if kind == 7:
        return None, at + 8
    if kind == 8:
        size, at = _varint(data, at)
        return None, at + size
    if kind in (9, 10):  # list, set
        head = data[at]
        at += 1
        size, element = head >> 4, head & 0x0F
        if size == 15:
            size, at = _varint(data, at)
        for _ in range(size):
            at = at + 1 if element in (1, 2) else _value(data, at, element)[1]
        return None, at
    if kind == 11:  # map
        size, at = _varint(data, at)
        if size:
            types = data[at]
            at += 1
            for _ in range(size):
                at = _value(data, at, types >> 4)[1]
                at = _value(data, at, types & 0x0F)[1]
        return None, at
    if kind == 12:
        return _struct(data, at)
    raise ValueError(f"Thrift compact type {kind} at byte {at}")
