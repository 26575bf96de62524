"""Spark Connect sessions that later processes reuse, leased one process at a time.

Why: every Dagster run is a new process, and a new Connect session loads each Delta table it
touches again on the server (about a second per table here, most of it in the first MERGE), which
was a quarter of a one-table change batch. A run that takes a session an earlier run left finds
those tables warm.

The danger is what a session shares: its confs, among them the txn id and `userMetadata` that a
MERGE commits with (lake/write.py `session_txn`). An operation still running in a session when its
holder died could commit with the next holder's txn id, and Delta would then skip the next holder's
real commit as already made. So a session is reused only when its last holder released it with
nothing running in it (`interruptAll()` interrupted nothing): a holder that is killed, or leaves
anything running, never marks its session clean, and the next holder of that slot starts a new one.

A slot is a lock file held (flock) for the whole life of the process that leased it, with a small
JSON file naming the slot's session and whether it is clean. Slots live per server (its URL and, for
the embedded one, its PID); when every slot is held the process gets a session of its own, as
before.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SLOTS = 8


@dataclass
class Lease:
    """One process's hold on a slot: its session id, and the open lock file that holds the slot."""

    folder: Path
    slot: int
    session_id: str
    reused: bool
    lock: Any
    discarded: bool = False

    @property
    def record(self) -> Path:
        return self.folder / f"slot-{self.slot}.json"

    def mark(self, clean: bool) -> None:
        self.record.write_text(json.dumps({"session_id": self.session_id, "clean": clean and not self.discarded}))

    def renew(self) -> None:
        """A new session for this slot (the server no longer has the one it named)."""
        self.session_id, self.reused = str(uuid.uuid4()), False
        self.mark(False)

    def discard(self) -> None:
        """Never hand this session to another process (a tool other than ours used it)."""
        self.discarded = True
        self.mark(False)


def slots_folder(base: Path, url: str, server_pid: int | None) -> Path:
    """Where the slots of the server at `url` live: a folder per server (a restarted embedded server has
    a new PID, and none of the old sessions)."""
    key = hashlib.sha1(f"{url}|{server_pid or ''}".encode()).hexdigest()[:16]
    return base / "sessions" / key


def acquire(folder: Path, slots: int = SLOTS) -> Lease | None:
    """The first free slot of `folder`, its session reused if its last holder left it clean, else a new
    session id; None when every slot is held. The slot stays held until this process ends."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    for slot in range(slots):
        lock = open(folder / f"slot-{slot}.lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        try:
            last = json.loads((folder / f"slot-{slot}.json").read_text())
        except (OSError, ValueError):
            last = {}
        reused = bool(last.get("clean")) and bool(last.get("session_id"))
        lease = Lease(folder, slot, last["session_id"] if reused else str(uuid.uuid4()), reused, lock)
        lease.mark(False)  # held now: a holder that dies leaves it so, and its session is never reused
        return lease
    return None


def release(lease: Lease, session: Any) -> bool:
    """Mark the slot's session clean if nothing runs in it, and return whether it was. Called as the
    holding process ends (atexit); the flock goes with the process."""
    try:
        clean = not lease.discarded and not session.interruptAll()
    except Exception:  # noqa: BLE001 - a closed channel or a lost server: nothing to hand on
        clean = False
    lease.mark(clean)
    return clean


def url_with_session(url: str, session_id: str) -> str:
    """`url` with the Connect parameter that names the session (pure)."""
    return f"{url}{';' if ';' in url else '/;'}session_id={session_id}"


def disabled() -> bool:
    """INGEST_SPARK_SESSION_REUSE=0 gives every process a new session, as a Connect client does by default."""
    return os.environ.get("INGEST_SPARK_SESSION_REUSE", "1") == "0"
