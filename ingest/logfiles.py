"""Log files of long-lived processes: rolled over by size, the newest kept.

The embedded Spark server's own log rolls in log4j (lake/connect.py `log_config`); what a process writes
to its standard output and error (the supervised units' logs, ingest/localdev/supervise.py; the Spark
server's `server.out`) rolls here. Nothing is read at import time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# A log rolls over above this size, and this many rolled files are kept (`<name>.1` the newest): a
# process lives as long as the machine, and the tests' busy Spark server logged about 1 MiB a minute.
# So a log's files hold at most (1 + LOG_FILES) * LOG_BYTES.
LOG_BYTES = 64 * 2**20
LOG_FILES = 4


def roll_over(path: Path, max_bytes: int = LOG_BYTES, keep: int = LOG_FILES) -> bool:
    """When the file at `path` holds more than `max_bytes`: its lines move to `<path>.1`, the older rolled
    files one number up (the one past `keep` dropped), and `path` is emptied in place. True when it rolled.

    Emptied, not renamed, as logrotate's copytruncate: a process that writes to it through a descriptor
    it inherited, opened for appending, goes on writing at the new end without being told. What it
    writes between the copy and the emptying is lost."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    for i in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{i}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{i + 1}"))
    shutil.copyfile(path, path.with_name(f"{path.name}.1"))
    with open(path, "r+b") as f:
        f.truncate(0)
    return True
