"""CPU seconds of a deployment's processes, by role, from /proc: what a steady load costs per batch.

A process's CPU is its own (utime + stime) plus that of the children it waited for (cutime +
cstime): a run worker that ended is counted in the process that reaped it (the warm worker, the code
server). Sampled at the start and the end of a window; the difference is the window's CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

TICKS = os.sysconf("SC_CLK_TCK")

ROLES = (
    # (role, what its command line holds): the first match names a process
    ("spark server", "SparkConnectServer"),
    ("run workers", "ingest.defs.runworker"),
    ("run workers", "dagster api execute_run"),
    ("run workers", "multiprocessing.spawn"),  # a run the code server spawned (the default launcher)
    ("code server", "dagster api grpc"),
    ("code server", "dagster code-server"),
    ("daemon", "dagster-daemon"),
    ("webserver", "dagster-webserver"),
)


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent PID, CPU seconds of the process and its reaped children), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), sum(int(v) for v in fields[11:15]) / TICKS


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def role_of(cmdline: str) -> str:
    for role, needle in ROLES:
        if needle in cmdline:
            return role
    return "other"


def tree(roots: Iterable[int]) -> dict[int, float]:
    """CPU seconds of every process at or below `roots` (their reaped children included)."""
    return {pid: seconds for pid, (_, seconds) in _tree(roots).items()}


def _tree(roots: Iterable[int]) -> dict[int, tuple[int, float]]:
    """(parent PID, CPU seconds) of every process at or below `roots`."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    out, todo = {}, [r for r in roots if r in stats]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out[pid] = stats[pid]
        todo += children.get(pid, [])
    return out


def by_role(roots: Iterable[int]) -> dict[str, float]:
    """CPU seconds per role (ROLES) of the processes at or below `roots`.

    A run worker forked by the warm worker is a child of it and counts as "run workers"; a child of
    a process of another role (a run the code server spawned) counts as that role's. A process of
    no role counts as its nearest ancestor's helpers ("run workers' helpers": the `tail` and
    watch_orphans processes of Dagster's compute log capture)."""
    samples = _tree(roots)
    roles = {pid: role_of(_cmdline(pid)) for pid in samples}

    def named(pid: int) -> str:
        seen, at = set(), pid
        while at in samples and roles[at] == "other" and at not in seen:
            seen.add(at)
            at = samples[at][0]
        return roles[pid] if roles[pid] != "other" else (f"{roles[at]}' helpers" if at in roles else "other")

    out: dict[str, float] = {}
    for pid, (_, seconds) in samples.items():
        role = named(pid)
        out[role] = out.get(role, 0.0) + seconds
    return out


def difference(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per role, the CPU seconds spent between two samples (never negative: a process that ended
    unreaped between them leaves with its CPU)."""
    return {role: round(max(0.0, after.get(role, 0.0) - before.get(role, 0.0)), 3)
            for role in sorted(set(before) | set(after))}
