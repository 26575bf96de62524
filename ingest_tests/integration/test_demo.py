"""bin/demo, the main job, as a user starts it: Dagster as the production layout runs it (deploy/systemd's
units under ingest/localdev/supervise.py), a killed code server and a killed daemon back by themselves (the sensor ticks
again within 60 s), the instance storage made before they start, and everything the
script started gone after SIGTERM, with no terminal and no job control."""

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from ingest.localdev.processes import alive, free_port

ROOT = Path(__file__).resolve().parents[2]


def started_by(marker: str) -> list[int]:
    """PIDs of the processes whose environment holds `marker` (every process the demo starts inherits it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def sensor_ticks_after(home: Path, sensor: str, since: float) -> list:
    """The sensor's successful or skipped ticks after `since`, read from the demo's instance ([] while the
    webserver and the daemon are still creating its SQLite storage: opening it then races them)."""
    from dagster import DagsterInstance

    from ingest_tests.probes import ticks_after

    try:
        instance = DagsterInstance.from_config(str(home))
    except Exception:  # noqa: BLE001 - alembic's "more than one head" while another process migrates
        return []
    with instance:
        return ticks_after(instance, sensor, since)


def _ignores(pid: int, sig: int) -> bool:
    """Whether process `pid` ignores `sig` (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    return False


def test_the_demo_restarts_a_killed_code_server_and_daemon_and_stops_everything_on_sigterm(tmp_path):
    import shutil
    import tempfile

    # PostgreSQL runs as its own OS user, which must reach the data folder: not under pytest's private one
    local = Path(tempfile.mkdtemp(prefix="ingest-demo-"))
    local.chmod(0o755)
    ports = {name: free_port() for name in ("mysql", "pg", "ddb", "dagster", "code")}
    demo = yaml.safe_load((ROOT / "sources.yaml").read_text())
    demo["sources"]["demo"]["port"] = ports["mysql"]
    demo["sources"]["demo_bank"]["port"] = ports["pg"]
    demo["sources"]["demo_carts"]["endpoint_url"] = f"http://127.0.0.1:{ports['ddb']}"
    demo["dbt"]["project_dir"] = str(ROOT / "dbt_project")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump(demo))
    marker = f"INGEST_LOCAL_DIR={local}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DEMO_", "DAGSTER_", "INGEST_"))},
           "INGEST_LOCAL_DIR": str(local), "INGEST_SOURCES": str(sources), "DEMO_MYSQL_PORT": str(ports["mysql"]),
           "DEMO_PG_PORT": str(ports["pg"]), "DEMO_DYNAMODB_PORT": str(ports["ddb"]),
           "DAGSTER_PORT": str(ports["dagster"]), "INGEST_CODE_SERVER_PORT": str(ports["code"]),
           "INGEST_SPARK_STATE_DIR": str(local / "spark-connect")}
    # no terminal, no job control, not a session leader: as a script or a CI job starts it
    proc = subprocess.Popen([str(ROOT / "bin" / "demo")], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=open(tmp_path / "demo.out", "wb"), stderr=subprocess.STDOUT)
    try:
        # a signal ignored when bash starts cannot be trapped (conftest's _sigterm_as_at_start says how it was)
        assert not _ignores(proc.pid, signal.SIGTERM), "bin/demo started with SIGTERM ignored: it cannot stop on it"
        deadline = time.monotonic() + 420
        while True:
            assert proc.poll() is None, (tmp_path / "demo.out").read_text()[-4000:]
            assert time.monotonic() < deadline, (tmp_path / "demo.out").read_text()[-4000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{ports['dagster']}/server_info", timeout=5)
                break
            except OSError:
                time.sleep(1)
        home = local / "dagster_home"
        # the daemon ticks the demo's sensors (they wait for the snapshots: a skipped tick)
        deadline = time.monotonic() + 120
        while not sensor_ticks_after(home, "demo_binlog_sensor", 0):
            assert time.monotonic() < deadline, (local / "supervise" / "ingest-daemon.log").read_text()[-4000:]
            time.sleep(2)

        # as the OOM killer would: the code server (and its child), then the daemon; each comes back by
        # itself and the sensor ticks again within 60 s of the kill
        for unit in ("ingest-code-server", "ingest-daemon"):
            pid_file = local / "supervise" / f"{unit}.pid"
            killed = int(pid_file.read_text())
            os.killpg(killed, signal.SIGKILL)
            at = time.time()
            deadline = time.monotonic() + 90
            while not sensor_ticks_after(home, "demo_binlog_sensor", at + 1):
                assert time.monotonic() < deadline, (local / "supervise" / "ingest-daemon.log").read_text()[-4000:]
                time.sleep(1)
            resumed = time.time() - at
            assert int(pid_file.read_text()) != killed
            print(f"the sensor ticked again {resumed:.1f} s after {unit} was killed")
            assert resumed < 60
        assert started_by(marker)  # the check below sees the demo's processes
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        try:
            proc.wait(300)  # every stop in it is bounded; a loaded machine makes them slow
            print(f"bin/demo stopped {time.monotonic() - stopping:.1f} s after SIGTERM")
        except subprocess.TimeoutExpired:
            pass  # asserted below, after the processes are gone; an error above is not hidden by this
        left = started_by(marker)
        for pid in left:  # do not leave them to the next test; the assertion says they were there
            os.kill(pid, signal.SIGKILL)
        # shown when the test fails: where bin/demo was, and what its supervised processes said
        print((tmp_path / "demo.out").read_text()[-3000:])
        for log in sorted((local / "supervise").glob("*.log")):
            print(f"--- {log.name}", log.read_text()[-1500:], sep="\n")
    shutil.rmtree(local, ignore_errors=True)
    assert proc.returncode is not None, f"bin/demo did not stop within 300 s of SIGTERM; it left {left}"
    assert proc.returncode == 143, (tmp_path / "demo.out").read_text()[-3000:]
    assert left == [], f"processes left after bin/demo stopped: {left}"
