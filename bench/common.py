"""What every benchmark shares: the result line, the machine's description, RSS sampling."""

from __future__ import annotations

import os
import platform
import subprocess
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ingest.config import SnapshotSettings
from ingest.localdev.processes import free_port  # noqa: F401 - the benchmarks' ports come from here

SNAPSHOT = {name: getattr(SnapshotSettings(), name) for name in ("chunk_size", "parallelism", "chunks_per_commit")}
"""The sources file's snapshot defaults, which every snapshot benchmark uses (the JSON says what was measured)."""

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = BENCH_DIR.parent


@dataclass
class Result:
    """One benchmark's figures, all measured in the same run."""

    name: str
    ours: float
    baseline_name: str
    baseline: float
    unit: str
    higher_is_better: bool = True
    target: float | None = None
    """The least acceptable ratio (or, when lower is better, the most), from the benchmarks issue."""
    limit: float | None = None
    """An absolute target for `ours` instead (at most this, in `unit`)."""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else float("nan")

    @property
    def meets_target(self) -> bool | None:
        if self.limit is not None:
            return self.ours <= self.limit
        if self.target is None:
            return None
        return self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target

    def line(self) -> str:
        text = (f"{self.name}: ours {fmt(self.ours)} {self.unit}, baseline {self.baseline_name} "
                f"{fmt(self.baseline)} {self.unit}, ratio {self.ratio:.2f}")
        if self.limit is not None:
            text += f"  [target ours <= {self.limit:g} {self.unit}: {'met' if self.meets_target else 'NOT met'}]"
        elif self.target is not None:
            sign = ">=" if self.higher_is_better else "<="
            text += f"  [target {sign} {self.target:g}: {'met' if self.meets_target else 'NOT met'}]"
        return text

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "meets_target": self.meets_target}


SNAPSHOT_ROUNDS = 3
"""Rounds of each snapshot path a comparison times (the medians count)."""


def alternating_rounds(runs: dict[str, Callable[[int], float]], log: Callable[[str], None],
                       rounds: int = SNAPSHOT_ROUNDS) -> dict[str, list[float]]:
    """The seconds of each of `runs` (a name: one run, given the round's number, returning its seconds),
    `rounds` times each, the order reversed every other round. Two paths that read and write the same
    bytes differ by less than the spread between runs, and the first large job on a server is the slow
    one (a 10M-row PostgreSQL snapshot: 20-22 s first, 17-18 s after): none may always go first."""
    names = list(runs)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(rounds):
        for name in names if round_no % 2 == 0 else names[::-1]:
            seconds[name].append(runs[name](round_no))
            log(f"{name} {seconds[name][-1]:.1f} s")
    return seconds


def fmt(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.3g}"


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model and the versions that shape the figures."""
    from importlib.metadata import version

    def first(path: str, prefix: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    def out(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip() or "?"
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    mem_kb = first("/proc/meminfo", "MemTotal").split()[0]
    return {
        "cores": os.cpu_count(),
        "cpu": first("/proc/cpuinfo", "model name"),
        "memory_gib": round(int(mem_kb) / 2**20, 1) if mem_kb.isdigit() else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        "mariadb": out(_mariadbd(), "--version"),
        "packages": {p: version(p) for p in ("pyspark", "delta-spark", "dagster", "mysql-replication", "PyMySQL",
                                            "pyarrow", "boto3", "moto")},
    }


def _mariadbd() -> str:
    from ingest.localdev.mariadb import _binary

    return _binary("mariadbd")


def _java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
        return (done.stderr or done.stdout).splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "?"


def process_rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def jvm_live_heap_bytes(pid: int) -> int | None:
    """What a JVM's heap holds after a full GC (`jcmd <pid> GC.run`, then `GC.heap_info`'s "used"):
    the objects still referenced, without the garbage and free space that its RSS also counts.
    None when jcmd is missing or the JVM does not answer."""
    import re

    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = re.search(r"heap\s+total \d+K, used (\d+)K", info)
    return int(used.group(1)) * 1024 if used else None


# kcmp(2)'s number per machine, and its KCMP_VM: "do these two processes share one address space?"
_SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1


def shares_memory(pid: int, other: int) -> bool:
    """Whether two processes share one address space. A child made by vfork or posix_spawn does until it
    execs (the JVM starts its commands that way), and /proc shows it with every resident page of its
    parent: a tree's sum would count the JVM twice. False where kcmp is not there to ask."""
    if _SYS_KCMP is None:
        return False
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(_SYS_KCMP, pid, other, _KCMP_VM, 0, 0) == 0


def tree_rss_bytes(root: int) -> int:
    """The resident memory of a process and all its descendants (driver, JVM, Python workers), each
    address space once: a child that still shares its parent's (about to exec a command) adds nothing."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            pages = int(Path(entry.path, "statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        pid = int(entry.name)
        children.setdefault(ppid, []).append(pid)
        rss[pid] = pages * page
    total = rss.get(root, 0)
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid in children.get(parent, []):
            if not shares_memory(pid, parent):
                total += rss.get(pid, 0)
            todo.append(pid)
    return total


class PeakRss:
    """Samples the RSS of a process tree (or with `tree=False` the process alone) every `interval`
    seconds on a thread; `.peak` in bytes."""

    def __init__(self, pid: int, interval: float = 0.2, tree: bool = True) -> None:
        self.pid, self.interval, self.peak, self.tree = pid, interval, 0, tree
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pid) if self.tree else process_rss_bytes(self.pid))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Dagster:
    """The code server and the daemon as deploy/systemd's units run them (the production layout: the
    code location is its own gRPC server, which the daemon reaches through deploy/workspace.yaml). A
    daemon over the project's python_module workspace replaces its code server every minute (about
    4 CPU-s a minute), which a deployment does not pay."""

    UNITS = ("ingest-code-server", "ingest-daemon")

    def __init__(self, env: dict[str, str], work: Path) -> None:
        from ingest.localdev.supervise import UNITS, parse_unit, read_env_file
        from ingest.paths import PROJECT_ROOT

        env.update({**{k: v for k, v in read_env_file(PROJECT_ROOT / "deploy" / "ingest.env").items() if k not in env},
                    "INGEST_HOME": str(PROJECT_ROOT), "INGEST_CODE_SERVER_HOST": "127.0.0.1",
                    "INGEST_CODE_SERVER_PORT": str(free_port()), "INGEST_DAGSTER_LOG_LEVEL": "warning"})
        self.logs = {name: work / f"{name}.log" for name in self.UNITS}
        self.processes = [
            subprocess.Popen(parse_unit(UNITS / f"{name}.service", env).command, cwd=PROJECT_ROOT, env=env,
                             stdin=subprocess.DEVNULL, stdout=open(self.logs[name], "w"),
                             stderr=subprocess.STDOUT, start_new_session=True)
            for name in self.UNITS]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def ended(self) -> bool:
        return any(p.poll() is not None for p in self.processes)

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name}\n{path.read_text()[-chars:]}" for name, path in self.logs.items())

    def stop(self) -> None:
        import signal

        from ingest.localdev.processes import stop_group

        for proc in reversed(self.processes):
            stop_group(proc, signal.SIGTERM, timeout=60)
