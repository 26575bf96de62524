"""What the batch, freshness and headroom asset checks decide, from positions and times (pure).

The checks themselves (ingest/defs/checks.py) read the Delta log and the source;
the verdicts are here so they can be tested without either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CommittedBatch:
    key: str
    start: Any
    end: Any


@dataclass(frozen=True)
class Verdict:
    passed: bool
    description: str
    metadata: dict[str, Any]
    warn_only: bool = False
    """A failure that loses nothing (an overlap re-reads changes the ordered merge ignores)."""


def contiguity(batches: Sequence[CommittedBatch], compare: Callable[[Any, Any], int | None],
               log_start: Any | None) -> Verdict:
    """Each committed batch starts where the one before it ended: no gap (changes never read) and no
    overlap (changes read twice). `compare(a, b)` orders two positions (<0, 0, >0), or None when they
    only compare for equality (DynamoDB checkpoints). Batches come in key order; the first must start
    at or before the snapshot's log start, or the changes in between were never read."""
    gaps, overlaps = [], []
    if batches and log_start is not None and (compare(batches[0].start, log_start) or 0) > 0:
        gaps.append(f"before {batches[0].key}: the snapshot's log start {log_start} < the first batch's start")
    for before, after in zip(batches, batches[1:]):
        if after.start == before.end:
            continue
        order = compare(after.start, before.end)
        if order is None or order > 0:
            gaps.append(f"{before.key} ends at {before.end}, {after.key} starts at {after.start}")
        else:
            overlaps.append(f"{after.key} starts at {after.start}, before {before.key}'s end {before.end}")
    meta = {"batches": len(batches), "gaps": len(gaps), "overlaps": len(overlaps)}
    if gaps:
        return Verdict(False, "GAP: changes between these batches were never read: " + "; ".join(gaps[:5])
                       + ". Fix: run the missing range as a batch, or re-snapshot the table", meta)
    if overlaps:
        return Verdict(False, "OVERLAP: these batches read the same changes twice (the ordered merge applied "
                       "them once, so silver is right, but the batches were cut wrongly): " + "; ".join(overlaps[:5]),
                       meta, warn_only=True)
    return Verdict(True, f"{len(batches)} batches, each starting where the one before ended", meta)


def freshness(behind: bool, since_merge_seconds: float | None, max_lag_seconds: int) -> Verdict:
    """Silver is fresh when the source has nothing it lacks, or it merged within `max_lag_seconds`."""
    lag = 0.0 if not behind else (since_merge_seconds if since_merge_seconds is not None else float("inf"))
    meta = {"lag_seconds": round(lag, 1) if lag != float("inf") else -1, "max_lag_seconds": max_lag_seconds}
    if lag <= max_lag_seconds:
        return Verdict(True, "up to date with the source" if not behind
                       else f"behind the source, last merged {lag:.0f} s ago (allowed {max_lag_seconds} s)", meta)
    what = "never merged" if since_merge_seconds is None else f"last merged {lag:.0f} s ago"
    return Verdict(False, f"STALE: the source has changes silver lacks and silver {what} (allowed "
                   f"{max_lag_seconds} s). Fix: check the sensor is on and its runs succeed", meta)


def retention_headroom(end_seq: int, oldest_seq: int, head_seq: int, expiry_seconds: int | None = None) -> Verdict:
    """Binlog files the server keeps before the committed end. Gone: the next batch cannot run. At risk:
    the file holding the end is the oldest kept and no longer the active one, so the next purge takes it
    (a server with no expiry set purges only by hand, which the message says)."""
    meta = {"headroom_files": end_seq - oldest_seq, "behind_files": head_seq - end_seq,
            **({"binlog_expire_seconds": expiry_seconds} if expiry_seconds is not None else {})}
    if oldest_seq > end_seq:
        return Verdict(False, f"GONE: the server purged binlog files up to {oldest_seq - 1}, past the committed end "
                       f"(file {end_seq}). Fix: re-snapshot the tables", meta)
    if oldest_seq == end_seq < head_seq:
        return Verdict(False, f"AT RISK: the committed end is in the oldest binlog file the server keeps "
                       f"(file {end_seq}) and batches are {head_seq - end_seq} file(s) behind; the next purge "
                       "loses changes. Fix: let the batches catch up, or keep binlogs longer "
                       "(binlog_expire_logs_seconds)", meta, warn_only=True)
    if expiry_seconds == 0:
        return Verdict(True, f"no expiry set: the server purges binlogs only by hand ({end_seq - oldest_seq} "
                       "file(s) kept before the committed end)", meta)
    return Verdict(True, f"{end_seq - oldest_seq} binlog file(s) kept before the committed end", meta)


def slot_headroom(slot: str, wal_status: str | None, retained_bytes: int, safe_wal_bytes: int | None,
                  at_risk_bytes: int = 64 * 1024 * 1024) -> Verdict:
    """A PostgreSQL source's slot and the WAL the server keeps for it (`wal_status` None: no such slot).
    Gone: the next batch cannot run. At risk: the server may invalidate the slot at its next checkpoint
    (`unreserved`, or less than `at_risk_bytes` of WAL before max_slot_wal_keep_size)."""
    mib = 1024 * 1024
    meta = {"slot": slot, "wal_status": wal_status or "missing", "retained_wal_mib": round(retained_bytes / mib, 1),
            **({"safe_wal_mib": round(safe_wal_bytes / mib, 1)} if safe_wal_bytes is not None else {})}
    if wal_status is None or wal_status == "lost":
        return Verdict(False, f"GONE: replication slot {slot} {'does not exist' if wal_status is None else 'was invalidated'}"
                       ": the changes since the last batch are no longer on the server. Fix: re-snapshot the source's "
                       "tables", meta)
    if wal_status == "unreserved" or (safe_wal_bytes is not None and safe_wal_bytes < at_risk_bytes):
        return Verdict(False, f"AT RISK: slot {slot} keeps {retained_bytes / mib:.0f} MiB of WAL and the server may "
                       "invalidate it at its next checkpoint (max_slot_wal_keep_size). Fix: let the batches catch up "
                       "(is the sensor on?), or raise max_slot_wal_keep_size", meta, warn_only=True)
    limit = "no limit set" if safe_wal_bytes is None else f"{safe_wal_bytes / mib:.0f} MiB more allowed"
    return Verdict(True, f"slot {slot} keeps {retained_bytes / mib:.0f} MiB of WAL ({limit})", meta)
