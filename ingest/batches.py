"""What a sensor does with a change batch that is not complete: run it again, wait, or stop, and how far
silver is complete along its batches (pure).

A batch is complete when the batch log holds it (ingest/lake/batchlog.py). The
sensor never plans past an incomplete batch: its changes would otherwise never
reach silver. It runs it again after a backoff that doubles with each failure,
and after `max_attempts` failed runs it stops the source and says which batch,
why, and how to run it by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Action(str, Enum):
    RUN = "run"
    WAIT = "wait"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class FailedRun:
    run_id: str
    ended_at: float
    """Epoch seconds."""
    error: str


@dataclass(frozen=True)
class RetryDecision:
    action: Action
    attempt: int
    """The number the next run of the batch would have (1 for its first run)."""
    message: str


def backoff_seconds(failures: int, base_seconds: float) -> float:
    """Wait before the next run after `failures` failed ones: base, 2x base, 4x base, ... capped at an hour."""
    return 0.0 if failures <= 0 else min(base_seconds * 2 ** (failures - 1), 3600.0)


def decide_retry(source: str, batch: str, failures: Sequence[FailedRun], now: float, max_attempts: int,
                 base_seconds: float, retry_command: str) -> RetryDecision:
    """Run the incomplete `batch` (again), wait for its backoff, or give up after `max_attempts` failures."""
    attempt = len(failures) + 1
    if not failures:
        return RetryDecision(Action.RUN, attempt, f"batch {batch} of source {source} is not complete: running it")
    last = max(failures, key=lambda f: f.ended_at)
    if len(failures) >= max_attempts:
        return RetryDecision(Action.GIVE_UP, attempt, (
            f"STOPPED: batch {batch} of source {source} failed {len(failures)} times (cdc.max_batch_attempts = "
            f"{max_attempts}); the last run {last.run_id} failed with: {last.error.strip()[:500]}. Later changes "
            f"wait: no batch starts after an incomplete one. Fix the cause, then run `{retry_command}`; the sensor "
            "goes on once the batch is complete"))
    wait = backoff_seconds(len(failures), base_seconds)
    due = last.ended_at + wait
    if now < due:
        return RetryDecision(Action.WAIT, attempt, (
            f"batch {batch} of source {source} failed {len(failures)} time(s), last in run {last.run_id} "
            f"({last.error.strip()[:200]}); running it again in {due - now:.0f} s (attempt {attempt} of {max_attempts})"))
    return RetryDecision(Action.RUN, attempt, (
        f"batch {batch} of source {source} failed {len(failures)} time(s); running it again "
        f"(attempt {attempt} of {max_attempts})"))


# ---------------------------------------------------------------- tables whose snapshot fails


@dataclass(frozen=True)
class TablePlan:
    """Where each table of a MySQL source stands before a batch is planned (see plan_tables)."""

    ready: dict[str, object]
    """Tables with a usable snapshot: its change-log start."""
    waiting: list[str]
    """Tables CDC cannot start without: never snapshotted, or a snapshot still running."""
    snapshot: list[str]
    """Tables to snapshot now."""
    quarantined: dict[str, str]
    """Tables left out until someone fixes them, with why and how."""
    messages: list[str]


def usable_snapshot(table: str, start, skipped_until: dict[str, object]) -> bool:
    """A complete snapshot whose log start is not before a batch that left the table out (pure)."""
    return start is not None and not (table in skipped_until and start < skipped_until[table])


def plan_tables(source: str, starts: dict[str, object], skipped_until: dict[str, object], running: set[str],
                failures: dict[str, Sequence[FailedRun]], cdc_started: bool, now: float, max_attempts: int,
                base_seconds: float) -> TablePlan:
    """Which tables a change batch can rely on, which to snapshot, which to leave out (pure).

    `starts`: each table's newest complete snapshot's log start (None: none yet). `skipped_until`: the end
    of the newest logged batch that left the table out. `failures`: a table's failed snapshot runs since
    its last good one.

    A table whose snapshot fails stops only itself: CDC starts (or goes on) for the others, and the
    failed one is snapshotted again with the batches' backoff, up to `max_attempts`. Its changes are
    then taken from its own snapshot's log start. A snapshot older than a batch that left the table out
    is stale (that batch's changes of it are not in bronze): the table is snapshotted again.
    """
    ready, waiting, snapshot, quarantined, messages = {}, [], [], {}, []
    for table in sorted(starts):
        start, failed = starts[table], list(failures.get(table, ()))
        if usable_snapshot(table, start, skipped_until):
            ready[table] = start
            continue
        stale = start is not None  # complete, but older than a batch that left the table out
        if table in running:
            waiting.append(table)
            continue
        if not failed:
            if cdc_started or stale:
                snapshot.append(table)
                if stale:
                    messages.append(f"{table}: its snapshot predates a batch that left it out "
                                    f"(until {skipped_until[table]}); snapshotting it again")
            else:
                waiting.append(table)
            continue
        last = max(failed, key=lambda f: f.ended_at)
        fix = (f"Fix the cause (a column type: tables.columns.{table}.exclude; a missing primary key), then "
               f"materialize {source}/{table}/snapshot")
        if len(failed) >= max_attempts:
            quarantined[table] = (f"{table}: snapshot failed {len(failed)} times, last in run {last.run_id}: "
                                  f"{last.error.strip()[:300]}. Left out of change batches. {fix}")
            continue
        due = last.ended_at + backoff_seconds(len(failed), base_seconds)
        quarantined[table] = (f"{table}: snapshot failed (run {last.run_id}: {last.error.strip()[:300]}); "
                              f"left out of change batches until it succeeds. {fix}")
        if now >= due:
            snapshot.append(table)
            messages.append(f"{table}: snapshotting it again (attempt {len(failed) + 1} of {max_attempts})")
    return TablePlan(ready, waiting, snapshot, quarantined, messages)


def merged_through(log_start, merged: Iterable) -> Any:
    """How far silver is complete: from the snapshot's log start along contiguous merged batches (pure;
    any position with ranges that have `start` and `end`: binlog positions, LSNs).

    A batch that starts past the end reached so far leaves a gap: silver may
    lack what lies in it, so the position stops there.
    """
    reached = log_start
    for batch in sorted(merged, key=lambda b: b.start):
        if batch.start > reached:
            break
        reached = max(reached, batch.end)
    return reached


def batch_tables(tables: Sequence[str], touched: Iterable[str] | None, snapshots: dict[str, Any],
                 merged: dict[str, Sequence[Any]]) -> list[str]:
    """The tables a batch run names (pure): every table when the source could not tell which ones the
    batch touches (`touched` None), else those it touches and those whose newest snapshot is not yet in
    each of their merged layers. `snapshots`: a table's newest snapshot id (None: none yet); `merged`:
    per table, the snapshot id each layer (silver, history) last recorded merging (None: no record).

    Naming an unchanged table costs a planned event; missing a changed one fails the run before it
    writes (the batch step checks), and the sensor then runs the batch again naming every table."""
    if touched is None:
        return list(tables)
    touched = set(touched)
    return [t for t in tables if t in touched
            or (snapshots.get(t) is not None and any(m != snapshots[t] for m in merged.get(t, [None])))]
