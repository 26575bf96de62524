"""Bounded retries of transient source errors, shared by every source.

Only errors a source's classifier calls transient are retried, with capped,
jittered exponential backoff; anything else is raised at once. After the last
attempt `give_up` turns the error into the source's own clear one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def retrying(fn: Callable[[], T], is_transient: Callable[[BaseException], bool],
             give_up: Callable[[BaseException, int], BaseException], *, attempts: int = 6,
             base_delay: float = 0.2, max_delay: float = 5.0,
             sleep: Callable[[float], Any] = time.sleep) -> T:
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified right below
            if not is_transient(exc):
                raise
            if attempt == attempts:
                raise give_up(exc, attempts) from exc
            sleep(min(base_delay * 2 ** (attempt - 1), max_delay) * (0.5 + random.random() / 2))
    raise AssertionError("unreachable")
