"""What tests wait for and read of a running deployment."""

import time
from pathlib import Path

SCHEDULES_STOPPED = {"maintenance": {"running": False}, "reconcile": {"running": False}}
"""Sources-file settings for a test whose daemon must launch only what the test asks for: left on, the
`lake_maintenance` and `reconcile_silver` schedules start runs at 03:30 and 04:00 UTC, whenever the suite
happens to be running then (a CI run's cluster test once found two runs of a job it had launched once)."""


def wait_for(probe, seconds: float, what: str, every: float = 0.2):
    """`probe()`'s first truthy answer, asked every `every` seconds for up to `seconds`; else TimeoutError
    naming `what`. A probe that queries the deployment (a Spark read of silver) is worth asking less often:
    its queries take the cores the deployment is being waited on to use."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    raise TimeoutError(f"waited {seconds:.0f} s for {what}")


def parent_pid(pid: int) -> int:
    """The parent PID of `pid`, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def ticks_after(instance, sensor: str, since: float) -> list:
    """The sensor's successful or skipped ticks after `since` (a UNIX time): it evaluated and its code
    location answered."""
    from dagster._core.scheduler.instigation import TickStatus

    for state in instance.all_instigator_state():
        if state.instigator_name == sensor:
            return [t for t in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=20)
                    if t.timestamp > since and t.status in (TickStatus.SKIPPED, TickStatus.SUCCESS)]
    return []


def server_log_files(state) -> dict:
    """Every file the Spark Connect server `state` logs to (its log, the log's rolled files, its process's
    own output) and their bytes."""
    return {path: path.read_bytes() for path in sorted(Path(state.log).parent.glob("server.*"))}
