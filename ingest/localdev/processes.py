"""Stopping a process this project started (by its process group), and telling whether a PID still runs."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
    """Send `sig` to the process group `proc` leads (started with start_new_session=True), then
    SIGKILL it if it has not ended within `timeout` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def alive(pid: int) -> bool:
    """Whether `pid` still runs. A zombie (a child of ours that ended but is not reaped yet) counts as
    gone: waiting on os.kill(pid, 0) for it to vanish would wait for the full timeout."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc here: it exists, as far as anyone can tell
        return True
