"""A throwaway MariaDB server for the demo and the tests, without systemd.

Binlog settings are the ones CDC needs: ROW format, FULL row image and FULL row
metadata (without FULL metadata the binlog has no column names, and unsigned,
ENUM, SET and BLOB columns decode wrongly). The server is stopped by its PID.

    python -m ingest.localdev.mariadb start --datadir .local/mariadb --port 3407
    python -m ingest.localdev.mariadb stop --datadir .local/mariadb
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pymysql

from ingest.localdev.processes import alive

# The least privileges the ingest user needs: SELECT for snapshots,
# REPLICATION SLAVE to read the binlog, REPLICATION CLIENT (BINLOG MONITOR in
# MariaDB) for SHOW MASTER STATUS / SHOW BINARY LOGS.
INGEST_GRANTS = "SELECT, REPLICATION SLAVE, REPLICATION CLIENT"


def _binary(name: str) -> str:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(f"{name} not found: run bin/setup (it installs mariadb-server)")


@dataclass
class MariaDBServer:
    datadir: Path
    port: int
    root_password: str = "root"
    extra_args: tuple[str, ...] = ()

    @property
    def socket(self) -> Path:
        return self.datadir / "mysqld.sock"

    @property
    def pid_file(self) -> Path:
        return self.datadir / "mariadbd.pid"

    @property
    def tmpdir(self) -> Path:
        """The server's own temporary folder, beside its datadir (inside, it would list as a database). A
        server starting, and mariadb-install-db's bootstrap, delete every `#sql*` file in their tmpdir:
        in a shared /tmp that was other servers' temporary tables, and three bootstraps at once failed
        3 times in 18 ("Error on delete of '/tmp/#sql-temptable-....MAI'"), none in 24 with their own."""
        return self.datadir.with_name(self.datadir.name + "-tmp")

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if alive(pid) else None

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (initialising the datadir if new); a running one is kept."""
        if self.pid() is not None:
            return
        self.datadir = Path(self.datadir).resolve()
        fresh = not (self.datadir / "mysql").exists()
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(exist_ok=True)
        user_args = ["--user=root"] if os.geteuid() == 0 else []
        if fresh:
            done = subprocess.run(
                [_binary("mariadb-install-db"), "--no-defaults", f"--datadir={self.datadir}",
                 f"--tmpdir={self.tmpdir}", "--auth-root-authentication-method=normal", "--skip-test-db",
                 *user_args], capture_output=True, text=True)
            if done.returncode:
                said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
                raise RuntimeError(f"mariadb-install-db could not set up {self.datadir} (exit {done.returncode}): "
                                   + " | ".join(said[:4]) + f". Fix: delete {self.datadir} and start again")
        args = [
            _binary("mariadbd"), "--no-defaults", f"--datadir={self.datadir}", f"--tmpdir={self.tmpdir}",
            f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.socket}",
            f"--pid-file={self.pid_file}", "--log-bin=mysql-bin", "--binlog-format=ROW",
            "--binlog-row-image=FULL", "--binlog-row-metadata=FULL", "--server-id=1",
            "--log-error=" + str(self.datadir / "error.log"),
            "--innodb-buffer-pool-size=256M", "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0", "--skip-name-resolve", "--max-connections=200",
            *user_args, *self.extra_args,
        ]
        log = open(self.datadir / "stdout.log", "ab")
        subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                conn = self._root_connect(fresh)
                break
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        else:
            raise TimeoutError(f"MariaDB on port {self.port} did not start; see {self.datadir}/error.log")
        with conn, conn.cursor() as cur:
            if fresh:
                cur.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (self.root_password,))
                cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
                cur.execute("ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY %s", (self.root_password,))
                cur.execute("GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")

    def _root_connect(self, fresh: bool):
        # A fresh datadir's root has no password yet and is reachable by socket only.
        if fresh:
            try:
                return pymysql.connect(unix_socket=str(self.socket), user="root", password="", autocommit=True)
            except pymysql.err.OperationalError as exc:
                if exc.args[0] != 1045:  # access denied: the password was set already
                    raise
        return self.connect()

    def connect(self, user: str = "root", password: str | None = None, database: str | None = None):
        return pymysql.connect(
            host="127.0.0.1", port=self.port, user=user,
            password=self.root_password if password is None else password,
            database=database, autocommit=True,
        )

    def create_ingest_user(self, user: str, password: str) -> None:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS %s@'127.0.0.1' IDENTIFIED BY %s", (user, password))
            cur.execute("ALTER USER %s@'127.0.0.1' IDENTIFIED BY %s", (user, password))
            cur.execute(f"GRANT {INGEST_GRANTS} ON *.* TO %s@'127.0.0.1'", (user,))

    def stop(self, timeout: float = 30.0) -> None:
        """Stop by PID (SIGTERM, then SIGKILL after `timeout`)."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(pid):  # gone, or a zombie child of ours: it shut down
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.localdev.mariadb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--datadir", required=True, type=Path)
    parser.add_argument("--port", type=int, default=3407)
    parser.add_argument("--root-password", default=os.environ.get("INGEST_MARIADB_ROOT_PASSWORD", "root"))
    args = parser.parse_args(argv)
    server = MariaDBServer(args.datadir, args.port, args.root_password)
    if args.action == "start":
        server.start()
        print(f"MariaDB running on 127.0.0.1:{args.port}, pid {server.pid()}, datadir {args.datadir}")
    elif args.action == "stop":
        server.stop()
    else:
        pid = server.pid()
        print(f"running, pid {pid}" if pid else "not running")
        return 0 if pid else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
