"""A Spark standalone cluster on this machine, from pyspark's own jars: a master and workers, each its
own JVM, so that a Spark Connect server submitted to the master (`--master spark://...`) runs its
tasks in executors that are other processes, as on a real cluster (issue 47's cluster tier).

    python -m ingest.localdev.cluster --workers 2   # prints the master's URL; Ctrl-C stops it
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ingest.localdev.processes import free_port, stop_group


@dataclass
class StandaloneCluster:
    folder: Path
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    java_options: tuple[str, ...] = ()
    """Extra options for the master's and workers' JVMs (SPARK_DAEMON_JAVA_OPTS), not their executors'."""
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spark_class(self, *args: str, log: str) -> subprocess.Popen:
        import pyspark

        home = Path(pyspark.__file__).parent
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_WORKER_DIR": str(self.folder / "work"), "SPARK_LOG_DIR": str(self.folder)}
        if self.java_options:
            env["SPARK_DAEMON_JAVA_OPTS"] = " ".join(self.java_options)
        env.pop("SPARK_REMOTE", None)
        with open(self.folder / log, "ab") as out:
            return subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.processes.append(self._spark_class(
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
            "--webui-port", str(self.ui_port), log="master.log"))
        self.processes += [self._worker(i) for i in range(self.workers)]
        self.wait_for_workers(timeout)
        return self

    def _worker(self, i: int) -> subprocess.Popen:
        return self._spark_class(
            "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores",
            str(self.cores_per_worker), "--memory", self.memory_per_worker, "--webui-port", str(free_port()),
            "--work-dir", str(self.folder / f"work-{i}"), log=f"worker-{i}.log")

    def restart_dead_workers(self, timeout: float = 90.0) -> None:
        """Start again each worker that died (as its host's supervisor would), and wait until the master
        counts them alive."""
        for i, worker in enumerate(self.processes[1:], start=1):  # after the master
            if worker.poll() is not None:
                self.processes[i] = self._worker(i - 1)
        self.wait_for_workers(timeout)

    def wait_for_workers(self, timeout: float = 90.0) -> None:
        """Until the master counts every worker alive."""
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                self.stop()
                raise RuntimeError(f"the standalone cluster at {self.url} did not get {self.workers} workers within "
                                   f"{timeout:g} s; logs in {self.folder}")
            time.sleep(0.5)

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as reply:
                return sum(w.get("state") == "ALIVE" for w in json.load(reply).get("workers", []))
        except (OSError, ValueError):
            return 0

    def stop(self) -> None:
        for proc in reversed(self.processes):
            stop_group(proc, signal.SIGTERM, timeout=20)
        self.processes.clear()


def worker_python(folder: Path, with_project: bool = True) -> Path:
    """A Python for Spark's workers as a cluster's hosts would have it: a virtualenv with the project
    installed from a wheel built from this tree (not the tree itself). Its other packages are this
    environment's, through a .pth line: the editable install of the tree there is not processed, since
    only a site directory's own .pth files are, so `import ingest` finds the wheel. `with_project`
    False: the same without the wheel (a host someone forgot). Made once per folder."""
    import sys
    import sysconfig

    from ingest.paths import PROJECT_ROOT

    venv = folder / ("worker-venv" if with_project else "worker-venv-bare")
    python = venv / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "ingest-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if with_project:
        dist = folder / "dist"
        # with this environment's setuptools (a test extra): nothing is downloaded at run time
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                        "--wheel-dir", str(dist), str(PROJECT_ROOT)], check=True, cwd=folder)
        (wheel,) = dist.glob("ingest-*.whl")
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                        "--target", str(site), str(wheel)], check=True)
    return python


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m ingest.localdev.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--folder", type=Path, default=None, help="logs and work folders (default: a temp folder)")
    args = parser.parse_args(argv)
    cluster = StandaloneCluster(args.folder or Path(tempfile.mkdtemp(prefix="ingest-cluster-")), args.workers).start()
    print(f"{cluster.url} (master UI http://127.0.0.1:{cluster.ui_port}, logs in {cluster.folder}); Ctrl-C stops it",
          flush=True)
    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the cluster as Ctrl-C does

    try:
        signal.signal(signal.SIGTERM, interrupt)
        while all(p.poll() is None for p in cluster.processes):
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main())
