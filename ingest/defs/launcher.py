"""A run launcher whose runs start warm: each run is a child forked from a process that has imported
the code location already (ingest/defs/runworker.py), instead of a new Python process that imports
Dagster, PySpark and the project again (about 4 CPU-seconds and 1-7 s per batch run).

Set in the instance's dagster.yaml (the shipped one does):

    run_launcher:
      module: ingest.defs.launcher
      class: WarmRunLauncher

Everything else is Dagster's: a run is created, launched, monitored and shown as before. What this
launcher adds to it:
- one warm worker per code location and launching process (daemon, webserver, CLI), started on the
  first launch and replaced when the location's code changes (see code_version);
- run monitoring that sees a dead run worker (`check_run_worker_health`), so a run whose worker was
  killed is marked failed and its sensor runs the batch again;
- cancellation by SIGINT to the run worker, which Dagster turns into a canceled run.
A location it cannot fork for (a code server on another host, a file it cannot import here) is
launched through its code server as the default launcher does, and so is every run when the warm
worker cannot start (an engine event on the run says why).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster._core.launcher.default_run_launcher import DefaultRunLauncher

WARM_TAG = "ingest/warm_worker"
"""On runs this launcher forked: the warm worker's key (the run worker itself is in ingest/worker)."""
STARTUP_SECONDS = 180
"""How long the first launch waits for a warm worker to import the code location."""


class WarmWorkerUnavailable(RuntimeError):
    """The warm worker did not start or did not answer."""


@dataclass
class WarmWorker:
    """One warm worker process and the socket it answers on."""

    key: str
    socket_path: str
    process: subprocess.Popen

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, run_id: str, instance_ref: str) -> dict:
        """Ask for a child that runs `run_id`; its `pid` and `identity` (localdev.processes)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(self.socket_path)
            conn.sendall((json.dumps({"run_id": run_id, "instance_ref": instance_ref}) + "\n").encode())
            answer = json.loads(conn.makefile("r").readline() or "{}")
        if "pid" not in answer:
            raise WarmWorkerUnavailable(f"the warm run worker refused run {run_id}: {answer.get('error', 'no answer')}")
        return answer

    def stop(self) -> None:
        """SIGTERM to the worker alone: runs it forked go on to their end."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def worker_key(executable: str, module: str, attribute: str | None, working_directory: str | None,
               version: str) -> str:
    """Which warm worker serves a run: one per code location version (see code_version) and per
    launching process."""
    text = f"{executable}|{module}|{attribute}|{working_directory}|{version}|{os.getpid()}"
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def code_version(job_snapshot_id: str, module: str, sources_file: str | None) -> str:
    """What a warm worker's definitions were built from: the job as the code server last loaded it
    (its snapshot id: the asset graph, with tables a pattern found in the database), the modules of
    the code location's package, and the sources file (settings the graph does not show, such as
    chunk sizes). Not the code server's id: dagster-daemon replaces its code server every minute
    (RELOAD_WORKSPACE_INTERVAL) with the same code, which would start a new warm worker each time."""
    import importlib.util

    parts = [job_snapshot_id]
    spec = importlib.util.find_spec(module.split(".")[0])
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(folder).rglob("*.py")):
            stat = path.stat()
            parts.append(f"{path}:{stat.st_mtime_ns}:{stat.st_size}")
    if sources_file and os.path.exists(sources_file):
        stat = os.stat(sources_file)
        parts.append(f"{sources_file}:{stat.st_mtime_ns}:{stat.st_size}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()


def socket_folder() -> Path:
    """Short (a UNIX socket path holds at most 107 bytes) and private to this user."""
    folder = Path(tempfile.gettempdir()) / f"ingest-runworkers-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def start_worker(key: str, executable: str, module: str, attribute: str | None, working_directory: str | None,
                 timeout: float = STARTUP_SECONDS) -> WarmWorker:
    """Start a warm worker and wait until it answers (it imports the code location first)."""
    path = str(socket_folder() / f"{key}.sock")
    if os.path.exists(path):
        os.unlink(path)  # left by a worker of an earlier process with this PID
    command = [executable, "-m", "ingest.defs.runworker", "--socket", path, "--module", module,
               "--parent", str(os.getpid())]
    command += ["--attribute", attribute] if attribute else []
    command += ["--working-directory", working_directory] if working_directory else []
    process = subprocess.Popen(command, cwd=working_directory or None, stdin=subprocess.DEVNULL)
    worker = WarmWorker(key, path, process)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not worker.alive():
            raise WarmWorkerUnavailable(f"the warm run worker exited with {process.returncode} while it loaded "
                                        f"{module} (its output is in this process's log)")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(path)
            return worker
        except OSError:
            time.sleep(0.05)
    worker.stop()
    raise WarmWorkerUnavailable(f"the warm run worker did not load {module} within {timeout:.0f} s")


class WarmRunLauncher(DefaultRunLauncher):
    """Launches each run as a child of a warm worker of its code location (see the module docstring);
    falls back to the code server's launch where it cannot."""

    def __init__(self, inst_data=None):
        super().__init__(inst_data=inst_data)
        self._lock = threading.Lock()
        self._workers: dict[str, WarmWorker] = {}
        """Per code location, its current warm worker."""

    def launch_run(self, context: LaunchRunContext) -> None:
        from dagster._serdes import serialize_value

        from ingest.defs.batches import WORKER_TAG

        run = context.dagster_run
        problem = None
        for _ in range(2):  # a worker that died since the last launch is replaced once
            try:
                worker = self._worker_for(context)
                if worker is None:
                    return super().launch_run(context)
                child = worker.fork(run.run_id, serialize_value(self._instance.get_ref()))
            except (WarmWorkerUnavailable, OSError, ValueError) as exc:
                problem = exc
                continue
            self._instance.add_run_tags(run.run_id, {WORKER_TAG: child["identity"], WARM_TAG: worker.key})
            self._run_ids.add(run.run_id)
            return None
        self._instance.report_engine_event(f"the warm run worker is unavailable ({problem}); launched through the "
                                           "code server instead", run, cls=self.__class__)
        return super().launch_run(context)

    def _worker_for(self, context: LaunchRunContext) -> WarmWorker | None:
        """The warm worker for the run's code location (started or replaced as needed), or None when it
        cannot be forked here."""
        from dagster._core.code_pointer import ModuleCodePointer

        run = context.dagster_run
        origin = run.job_code_origin
        remote = run.remote_job_origin
        if origin is None or remote is None or context.workspace is None:
            return None
        pointer = origin.repository_origin.code_pointer
        executable = origin.repository_origin.executable_path
        if not isinstance(pointer, ModuleCodePointer) or not executable or not os.path.exists(executable):
            return None
        name = remote.repository_origin.code_location_origin.location_name
        try:
            repository = context.workspace.get_code_location(name).get_repository(
                remote.repository_origin.repository_name)
            job_snapshot_id = repository.get_full_job(remote.job_name).computed_job_snapshot_id
        except Exception:  # noqa: BLE001 - not a code server location (or not loaded): the default launch
            return None
        from ingest.paths import PROJECT_ROOT

        version = code_version(job_snapshot_id, pointer.module,
                               os.environ.get("INGEST_SOURCES", str(PROJECT_ROOT / "sources.yaml")))
        key = worker_key(executable, pointer.module, pointer.fn_name, pointer.working_directory, version)
        with self._lock:
            current = self._workers.get(name)
            if current is not None and current.key == key and current.alive():
                return current
            if current is not None:
                current.stop()  # the location reloaded (new code), or the worker died
            self._workers[name] = start_worker(key, executable, pointer.module, pointer.fn_name,
                                               pointer.working_directory)
            return self._workers[name]

    def terminate(self, run_id: str) -> bool:
        from ingest.defs.batches import WORKER_TAG
        from ingest.localdev.processes import process_alive

        run = self._instance.get_run_by_id(run_id) if self.has_instance else None
        if run is None or run.is_finished or WARM_TAG not in run.tags or WORKER_TAG not in run.tags:
            return super().terminate(run_id)
        identity = run.tags[WORKER_TAG]
        self._instance.report_run_canceling(run)
        alive = process_alive(identity)
        if alive:
            os.kill(int(identity.rsplit(":", 2)[1]), signal.SIGINT)  # Dagster ends the run as canceled
            return True
        if alive is False:
            self._instance.report_run_canceled(run, f"its worker process ({identity}) is gone")
            return True
        return False  # on another host: nothing here can reach it

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        from ingest.defs.batches import WORKER_TAG
        from ingest.localdev.processes import process_alive

        identity = run.tags.get(WORKER_TAG)
        if WARM_TAG not in run.tags or identity is None:
            # launched through a code server, which marks the run failed when its worker dies
            return CheckRunHealthResult(WorkerStatus.RUNNING, "not a warm worker's run: not checked here")
        if process_alive(identity) is False:
            return CheckRunHealthResult(WorkerStatus.FAILED, f"its worker process ({identity}) is gone")
        return CheckRunHealthResult(WorkerStatus.RUNNING, "")

    def dispose(self) -> None:
        with self._lock:
            for worker in self._workers.values():
                worker.stop()
            self._workers.clear()
        super().dispose()

