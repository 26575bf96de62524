"""The warm run worker's fork protocol, with a stand-in for the run body (no Dagster instance here):
a child per request, its PID and identity answered, a probe or a bad request answered without a
child, and the worker's end when the process that started it is gone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ingest.defs.launcher import WarmWorker, code_version, worker_key
from ingest.localdev.processes import process_alive


def _start(tmp_path: Path, parent: int | None = None) -> subprocess.Popen:
    """A worker serving on tmp_path/w.sock whose runs write their run id and PID into tmp_path."""
    script = textwrap.dedent(f"""
        import os, sys, time
        from ingest.defs import runworker

        def run(run_id, instance_ref):
            path = os.path.join({str(tmp_path)!r}, run_id)
            with open(path + ".part", "w") as f:  # renamed whole: the test reads it as soon as it exists
                f.write(f"{{os.getpid()}} {{instance_ref}}")
            os.replace(path + ".part", path)
            time.sleep(float(instance_ref))
            return 0

        runworker.serve({str(tmp_path / 'w.sock')!r}, {parent or 'os.getppid()'}, run)
    """)
    process = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while True:  # the socket's file exists from bind(); a connect before listen() is refused
        assert process.poll() is None and time.monotonic() < deadline, "the worker did not start"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(str(tmp_path / "w.sock"))
            return process
        except OSError:
            time.sleep(0.05)


def _ask(path: Path, line: str) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(path))
        conn.sendall(line.encode())
        return json.loads(conn.makefile("r").readline())


def test_each_request_gets_a_child_of_its_own_that_runs_it_and_is_reaped(tmp_path):
    worker = _start(tmp_path)
    try:
        answers = [WarmWorker("k", str(tmp_path / "w.sock"), worker).fork(f"run{i}", "0.2") for i in range(3)]
        pids = {a["pid"] for a in answers}
        assert len(pids) == 3 and worker.pid not in pids
        for i, answer in enumerate(answers):
            assert answer["identity"].split(":")[1] == str(answer["pid"])
            deadline = time.monotonic() + 10
            while not (tmp_path / f"run{i}").exists():
                assert time.monotonic() < deadline, f"run{i} never ran"
                time.sleep(0.05)
            assert (tmp_path / f"run{i}").read_text().split()[0] == str(answer["pid"])
        time.sleep(1.5)  # the children ended; the worker's loop reaps them within a second
        for answer in answers:
            assert process_alive(answer["identity"]) is False
            assert not Path(f"/proc/{answer['pid']}").exists(), "an ended run stays a zombie"
    finally:
        worker.terminate()
        worker.wait(10)
    assert not (tmp_path / "w.sock").exists(), "the worker leaves its socket behind"


def test_a_probe_and_a_bad_request_start_no_run_and_the_worker_keeps_serving(tmp_path):
    worker = _start(tmp_path)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(tmp_path / "w.sock"))  # what the launcher does while the worker loads
        assert "error" in _ask(tmp_path / "w.sock", "not json\n")
        assert "error" in _ask(tmp_path / "w.sock", json.dumps({"run_id": "x"}) + "\n")
        assert "pid" in _ask(tmp_path / "w.sock", json.dumps({"run_id": "ok", "instance_ref": "0"}) + "\n")
        deadline = time.monotonic() + 10
        while not (tmp_path / "ok").exists():
            assert time.monotonic() < deadline, "the good request never ran"
            time.sleep(0.05)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name != "w.sock") == ["ok"]
    finally:
        worker.terminate()
        worker.wait(10)


def test_the_worker_ends_with_its_parent_and_leaves_running_runs_alone(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    worker = _start(tmp_path, parent=parent.pid)
    try:
        answer = WarmWorker("k", str(tmp_path / "w.sock"), worker).fork("long", "5")
        parent.kill()
        parent.wait(10)
        worker.wait(10)  # it notices within a second
        assert process_alive(answer["identity"]), "a running run must outlive the worker"
    finally:
        os.kill(answer["pid"], signal.SIGKILL)
        if worker.poll() is None:
            worker.kill()


def test_worker_key_changes_with_the_code_location_version():
    one = worker_key("/py", "ingest.defs.definitions", "defs", "/w", "version-1")
    assert one == worker_key("/py", "ingest.defs.definitions", "defs", "/w", "version-1")
    assert one != worker_key("/py", "ingest.defs.definitions", "defs", "/w", "version-2")
    assert len(one) == 16


def test_code_version_follows_the_job_the_package_and_the_sources_file_not_the_moment(tmp_path):
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources: {}\n")
    base = code_version("job-1", "ingest.defs.definitions", str(sources))
    assert base == code_version("job-1", "ingest.defs.definitions", str(sources))  # a daemon's code server refresh
    assert base != code_version("job-2", "ingest.defs.definitions", str(sources))  # the asset graph changed
    sources.write_text("sources: {a: 1}\n")
    assert base != code_version("job-1", "ingest.defs.definitions", str(sources))  # a setting changed
