"""Stopping a process this project started (by its process group), telling whether a PID still runs,
and the throwaway servers' common start and stop (moto, DynamoDB Local)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


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


# Which process runs a batch, and whether it still exists: how a sensor tells a dead run from a slow one.
# Dagster's default run launcher cannot check a run worker's health; when the worker dies with the code
# server that watched it (a reboot, the OOM killer taking both), nothing marks the run failed and it stays
# STARTED. A batch step records where it runs; the process start time (/proc/<pid>/stat, clock ticks
# since boot) tells the worker from a later process that reused its PID.


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]  # field 22, starttime
    except (OSError, IndexError):
        return None


def process_identity(pid: int | None = None) -> str:
    """`host:pid:start` of this process (or of `pid`); start is empty where there is no /proc."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or ''}"


def process_alive(identity: str) -> bool | None:
    """Whether the process `identity` names still runs; None when it ran on another host (cannot tell)."""
    host, pid_text, start = identity.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    pid = int(pid_text)
    return alive(pid) and (not start or _start_ticks(pid) == start)


# For a JVM that lives minutes and runs little code hot (a test's cluster executors, a killed and
# restarted server, an emulator): C1 alone compiles what runs in a fraction of the CPU that C2's
# optimizing compiler takes, which such a JVM never earns back. Measured on the cluster tier
# (ingest_tests/cluster, alone): its executors took 408 CPU-s with the defaults, 196 with these; the
# module 630 s, 515 s. Not for the long-lived servers a deployment runs.
# With C1 alone HotSpot reserves 48 MiB for compiled code, not the 240 MiB it reserves for C1 and C2: a
# Connect server filled that in about three minutes of the cluster test, stopped compiling, and a
# scheduler thread that needed a method handle then died ("Out of space in CodeCache for adapters"),
# leaving a merge's stage waiting for ever. The reservation is address space; only what is used is
# committed.
SHORT_LIVED_JIT = ("-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m")
SHORT_LIVED_JVM = (*SHORT_LIVED_JIT, "-XX:+UseSerialGC")

# moto and DynamoDB Local check no signature; any credentials will do (DynamoDB Local: letters and digits)
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": "us-east-1"}


LOWEST_CHOSEN_PORT = 20_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a server about to start: a random one below the kernel's
    ephemeral range where there is room. A port the kernel hands out for a bind to 0 is also what it
    hands any process for an outgoing connection, so it could be taken in the seconds before the
    server binds it (a test's `dagster dev` found its webserver port in use, with Spark, Dagster and
    DynamoDB Local connecting all around); below that range only a server's own bind takes a port."""
    try:
        ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768  # Linux's default; elsewhere the bind to 0 below
    chooser = random.SystemRandom()
    for _ in range(100 if ephemeral_low > LOWEST_CHOSEN_PORT else 0):
        port = chooser.randrange(LOWEST_CHOSEN_PORT, ephemeral_low)
        if not _port_taken(host, port):
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_taken(host: str, port: int) -> bool:
    """Whether something listens on the port (connections of a stopped server in TIME_WAIT do not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            return False
        except OSError:
            return True


@dataclass
class LoopbackServer:
    """A server this project starts as a child process on loopback and stops by its PID."""

    port: int
    host: str = "127.0.0.1"
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def start(self, timeout: float = 60.0):
        name = type(self).__name__
        if _port_taken(self.host, self.port):  # else whatever listens there would pass for the server
            raise RuntimeError(f"{name}: port {self.port} on {self.host} is taken. Fix: stop what listens there, "
                               "or pick another port")
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.process.returncode} as it started on port {self.port}. "
                                   f"Fix: run its command by hand to see why: {' '.join(self.command())}")
            if self.ready():
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{name} did not answer on {self.endpoint_url} within {timeout:.0f} s")

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process, signal.SIGTERM, timeout=10)
        self.process = None

    def serve(self, what: str) -> None:
        """Start, say where, and run until Ctrl-C or SIGTERM (a module's `python -m` entry point; a
        script that started it in the background stops it, and with it the server, by its PID)."""
        def interrupt(*_):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, interrupt)
        self.start()
        print(f"{what} on {self.endpoint_url} (pid {self.process.pid}); Ctrl-C stops it", flush=True)
        try:
            self.process.wait()
        except KeyboardInterrupt:
            self.stop()
