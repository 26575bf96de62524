"""Stopping a process this project started, by its process group."""

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
