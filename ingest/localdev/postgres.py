"""A throwaway PostgreSQL (Debian's `postgresql` package) for the tests and the demo.

`initdb` on a data folder of its own, then `postgres` in the foreground on loopback, stopped by its
PID (a fast shutdown). Logical decoding is on (`wal_level=logical`). PostgreSQL refuses to run as
root: run by root, the server runs as the `postgres` user, under a folder that user owns (a test's
tmp folder is root's alone).

    python -m ingest.localdev.postgres --port 5433
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ingest.localdev.processes import LoopbackServer, stop_group

OS_USER = "postgres"


def pg_binary(name: str) -> str:
    """A PostgreSQL program: Debian keeps them in /usr/lib/postgresql/<version>/bin, off the PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    path = found[-1] if found else shutil.which(name)
    if not path:
        raise FileNotFoundError(f"PostgreSQL's {name} not found. Fix: run bin/setup (it installs postgresql)")
    return path


@dataclass
class PostgresServer(LoopbackServer):
    base: Path | None = None
    """The folder holding the data folder; None: a new temporary one."""
    user: str = "postgres"
    password: str = "postgres"
    settings: dict[str, str] = field(default_factory=dict)
    """Server settings over the defaults below (e.g. {"wal_level": "replica"})."""
    temporary: bool = field(default=False, repr=False)
    """True when start made `base`: stop removes it."""

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", OS_USER, "--", *argv] if self.as_root else argv

    def command(self) -> list[str]:
        return self._as_owner([pg_binary("postgres"), "-D", str(self.datadir), "-p", str(self.port),
                               "-c", f"listen_addresses={self.host}", "-c", f"unix_socket_directories={self.base}",
                               "-c", "wal_level=logical", "-c", "max_replication_slots=10",
                               "-c", "max_wal_senders=10", "-c", "fsync=off",
                               *[a for k, v in self.settings.items() for a in ("-c", f"{k}={v}")]])

    def ready(self) -> bool:
        probe = subprocess.run([pg_binary("pg_isready"), "-q", "-h", self.host, "-p", str(self.port)],
                               capture_output=True)
        return probe.returncode == 0

    def start(self, timeout: float = 60.0) -> PostgresServer:
        if self.base is None:
            self.base, self.temporary = Path(tempfile.mkdtemp(prefix="ingest-pg-")), True
        self.base = Path(self.base).resolve()
        self.base.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            shutil.chown(self.base, OS_USER, OS_USER)
            reach = subprocess.run(["runuser", "-u", OS_USER, "--", "test", "-w", str(self.base)], capture_output=True)
            if reach.returncode != 0:
                raise RuntimeError(f"{self.base}: the {OS_USER} user, which runs the server (PostgreSQL refuses root), "
                                   "cannot reach it: a parent folder is closed to other users. Fix: open the parents "
                                   "(chmod o+x), or put the data elsewhere (--base, e.g. under /tmp)")
        if not (self.datadir / "PG_VERSION").exists():
            pwfile = self.base / "initdb.pw"
            pwfile.write_text(self.password)
            if self.as_root:
                shutil.chown(pwfile, OS_USER, OS_USER)
            init = subprocess.run(self._as_owner([
                pg_binary("initdb"), "-D", str(self.datadir), "-U", self.user, f"--pwfile={pwfile}",
                "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C"]), capture_output=True, text=True)
            pwfile.unlink()
            if init.returncode != 0:
                raise RuntimeError(f"initdb failed in {self.datadir}: {init.stderr[-2000:]}")
        return super().start(timeout)

    def stop(self) -> None:
        if self.process is not None:  # SIGINT: a fast shutdown (SIGTERM waits for every client to leave)
            stop_group(self.process, signal.SIGINT, timeout=20)
        self.process = None
        if self.temporary and self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)

    def psql(self, sql: str, database: str = "postgres") -> str:
        run = subprocess.run([pg_binary("psql"), "-h", self.host, "-p", str(self.port), "-U", self.user,
                              "-d", database, "-v", "ON_ERROR_STOP=1", "-Atc", sql],
                             capture_output=True, text=True, env={**os.environ, "PGPASSWORD": self.password})
        if run.returncode != 0:
            raise RuntimeError(f"psql on port {self.port}: {run.stderr.strip()}")
        return run.stdout

    def connect(self, database: str = "postgres", **settings):
        """A psycopg connection in autocommit as the server's superuser."""
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               dbname=database, autocommit=True, **settings)

    def create_database(self, name: str) -> str:
        self.psql(f'CREATE DATABASE "{name}"')
        return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=5433)
    parser.add_argument("--base", type=Path, default=None, help="folder for the data (default: a new temp folder)")
    args = parser.parse_args()
    PostgresServer(args.port, base=args.base).serve("PostgreSQL")


if __name__ == "__main__":
    main()
