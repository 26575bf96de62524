"""The warm run worker: a process that imports the code location once and forks a child per run.

Why: a run started the default way is a new Python process that imports Dagster, PySpark and the
code location and builds its definitions again: 1.9-3.0 s of process start and 2.9-3.5 s of code
load per batch under load (issue 46), about 4 CPU-seconds, paid by every source for every batch. A
child forked from this process starts with all of that done and runs the batch at once.

Each child is an ordinary Dagster run worker (`dagster api execute_run`'s body: events, logs, run
status, cancellation by SIGINT), so every batch is still one run with its partition and its
materializations. This process stays single-threaded and never opens a Spark session, an instance or
a database connection, so a fork copies no live connection or lock; children reseed what they must
not share (`random`) and run their own atexit handlers (the Spark session lease, see
lake/sessions.py) before they exit.

Started and supervised by `ingest.defs.launcher.WarmRunLauncher`, one per code location version:
it ends when the process that started it is gone (runs already forked go on to their end).

    python -m ingest.defs.runworker --socket PATH --module ingest.defs.definitions --attribute defs
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from collections.abc import Callable

PRELOAD = (
    # what a change batch imports lazily inside its step: imported once here instead of per run
    "pyspark.sql.connect.session", "pyspark.sql.connect.functions", "pyarrow", "pandas",
    "ingest.adapters.mysql", "ingest.adapters.postgres", "ingest.adapters.dynamodb",
    "ingest.lake.silver", "ingest.lake.history", "ingest.lake.bronze", "ingest.lake.batchlog",
    "ingest.lake.connect", "ingest.lake.spark", "ingest.lake.sessions",
    "ingest.sources.mysql.binlog", "ingest.sources.mysql.cdc", "ingest.sources.mysql.peek",
    "ingest.sources.postgres.cdc", "ingest.sources.dynamodb.streams",
    "dagster._cli.api", "dagster._core.execution.api",
    # the instance each run opens from its ref: storage modules and their migrations' checks
    "dagster._core.storage.event_log", "dagster._core.storage.runs", "dagster._core.storage.schedules",
    "dagster._core.storage.event_log.sqlite.sqlite_event_log", "dagster._core.storage.runs.sqlite",
    "dagster._core.storage.schedules.sqlite", "dagster._core.storage.local_compute_log_manager",
    "dagster_postgres", "alembic.migration", "alembic.script",
)


def preload(module: str, attribute: str | None, working_directory: str | None) -> None:
    """Import the code location and what its runs use, and build its repository once (children
    inherit it: each would otherwise resolve the asset graph again)."""
    import importlib
    import warnings

    if working_directory and working_directory not in sys.path:
        sys.path.insert(0, working_directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the code server shows the location's warnings already
        target = getattr(importlib.import_module(module), attribute or "defs", None)
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:  # an optional part this installation lacks: its runs import it themselves
                pass
    if hasattr(target, "get_repository_def"):
        target.get_repository_def()


def run_child(run_id: str, instance_ref: str) -> int:
    """The run worker's body, as `dagster api execute_run` runs it (dagster 1.13's private
    `_execute_run_command_body`: the pin in pyproject.toml keeps it)."""
    import random

    from dagster._cli.api import _execute_run_command_body
    from dagster._core.instance import DagsterInstance
    from dagster._core.instance.ref import InstanceRef
    from dagster._serdes import deserialize_value
    from dagster._utils.interrupts import capture_interrupts

    random.seed()  # forked children would otherwise draw the same numbers (binlog reader server ids)
    with capture_interrupts():
        with DagsterInstance.from_ref(deserialize_value(instance_ref, InstanceRef)) as instance:
            return _execute_run_command_body(run_id, instance, lambda _event: None, set_exit_code_on_failure=False)


def fork_run(request: dict, listener: socket.socket, run: Callable[[str, str], int] = run_child) -> int:
    """Fork a child that runs `request`'s run; the child's PID to the parent. The child never returns."""
    if not all(isinstance(request.get(k), str) for k in ("run_id", "instance_ref")):
        raise ValueError(f"a request names run_id and instance_ref, not {sorted(request)}")
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        listener.close()
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # cancel: Dagster's interrupt
        if os.environ.get("INGEST_PROFILE_DIR"):
            import cProfile

            profile = cProfile.Profile()
            code = profile.runcall(run, request["run_id"], request["instance_ref"])
            profile.dump_stats(os.path.join(os.environ["INGEST_PROFILE_DIR"], f"{request['run_id']}.prof"))
        else:
            code = run(request["run_id"], request["instance_ref"])
    except BaseException:  # noqa: BLE001 - the run's own failure is in its event log; say the rest
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # the Spark session lease is released here
        finally:
            os._exit(code or 0)


def reap() -> None:
    """Collect the children that ended (they would stay zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(socket_path: str, parent_pid: int, run: Callable[[str, str], int] = run_child) -> None:
    """Answer fork requests on `socket_path` until SIGTERM or until `parent_pid` is gone.

    A request is one JSON line `{"run_id", "instance_ref"}`; the answer one JSON line `{"pid", "identity"}` or
    `{"error"}`."""
    from ingest.localdev.processes import alive, process_identity

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)  # an address in use: another worker serves it; the launcher asks that one
    listener.listen(16)
    listener.settimeout(1.0)
    me = os.getpid()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        while not stopping and alive(parent_pid):
            reap()
            try:
                conn, _ = listener.accept()
            except (socket.timeout, InterruptedError):
                continue
            with conn:
                conn.settimeout(30)
                try:
                    line = conn.makefile("r").readline()
                    if not line:
                        continue  # a probe of whether this worker answers
                    pid = fork_run(json.loads(line), listener, run)
                    answer = {"pid": pid, "identity": process_identity(pid)}
                except Exception as exc:  # noqa: BLE001 - a bad request: say so, keep serving
                    answer = {"error": f"{type(exc).__name__}: {exc}"}
                try:
                    conn.sendall((json.dumps(answer) + "\n").encode())
                except OSError:
                    pass  # the launcher gave up on the answer; its run stays as the child made it
    finally:
        if os.getpid() == me:
            listener.close()
            try:
                os.unlink(socket_path)
            except FileNotFoundError:
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.defs.runworker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--module", required=True)
    parser.add_argument("--attribute", default=None)
    parser.add_argument("--working-directory", default=None)
    parser.add_argument("--parent", type=int, default=os.getppid(), help="end when this PID is gone")
    args = parser.parse_args(argv)
    preload(args.module, args.attribute, args.working_directory)
    serve(args.socket, args.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
