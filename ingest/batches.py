"""What a sensor does with a change batch that is not complete: run it again, wait, or stop (pure).

A batch is complete when the batch log holds it (ingest/lake/batchlog.py). The
sensor never plans past an incomplete batch: its changes would otherwise never
reach silver. It runs it again after a backoff that doubles with each failure,
and after `max_attempts` failed runs it stops the source and says which batch,
why, and how to run it by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


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
