"""Cutting a change batch into slices that decode on their own (pure).

A planning pass reads only event headers and table maps over the batch's range (binlog.read_batch with
`transactions`) and notes where each transaction starts and how many bytes it takes. Slices are cut at
those starts: every transaction carries its own TABLE_MAP events, so a slice [start, end) decodes with
no event from outside it, on any executor, and a transaction is never split. Slices follow each other
with no gap from the batch's start to its end, so together they hold exactly the batch's transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ingest.sources.mysql.positions import BatchRange, BinlogPosition

SLICE_BYTES = 8 * 2**20
"""Binlog bytes a slice aims at: a 64 MiB binlog file is 8 slices, enough for two cores to share evenly."""


@dataclass(frozen=True)
class Transaction:
    """Where a transaction's first event (its GTID event) starts in the binlog, and its size in bytes."""

    start: BinlogPosition
    size: int


def cut_slices(start: BinlogPosition, end: BinlogPosition, transactions: Sequence[Transaction],
               target_bytes: int = SLICE_BYTES) -> list[BatchRange]:
    """Contiguous slices covering [start, end), cut before a transaction once the slice so far holds at
    least `target_bytes`. `transactions` are the batch's, in binlog order."""
    if target_bytes < 1:
        raise ValueError(f"target_bytes must be at least 1: {target_bytes}")
    if end < start:
        raise ValueError(f"batch end {end} is before its start {start}")
    cuts: list[BinlogPosition] = [start]
    held = 0
    for txn in transactions:
        if not start <= txn.start < end:
            raise ValueError(f"transaction at {txn.start} is outside the batch [{start}, {end})")
        if held >= target_bytes and txn.start > cuts[-1]:
            cuts.append(txn.start)
            held = 0
        held += txn.size
    return [BatchRange(a, b) for a, b in zip(cuts, [*cuts[1:], end])]


def batch_bytes(transactions: Sequence[Transaction]) -> int:
    return sum(t.size for t in transactions)
