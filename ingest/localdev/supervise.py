"""Run the long-lived processes of a deployment as deploy/systemd's units do, restarting any that ends.

The production layout (docs/deployment.md) is one systemd unit per process: the Dagster code server,
the webserver and the daemon (and the Spark Connect server when it is the embedded one). bin/demo
runs the same commands, read from the same unit files (`ExecStartPre=`, `ExecStart=`, `Restart=`,
`RestartSec=`, `${VAR}` from the environment), under this supervisor: a code server that dies (a
crash, the OOM killer) is started again, and the daemon and the webserver find it again at their next call, where
`dagster dev` leaves it dead and every sensor tick failing.

Each process writes to `<unit>.log` in the state folder, which rolls over by size (logfiles.roll_over:
the newest rolled files kept), checked every ROLL_CHECK_SECONDS; so does every `--roll` file, the log of
a process started elsewhere (bin/demo's databases and writers) that appends to it. Each process runs in
its own session, so one signal reaches it and everything it started. SIGTERM or SIGINT stops them all
(SIGTERM, then SIGKILL after `--stop-timeout`), whether or not the supervisor was started with job
control; a supervisor that is killed outright takes nothing down with it, which is why bin/demo stops it
with SIGTERM.

    python -m ingest.localdev.supervise [--units deploy/systemd] [--state DIR] [--roll FILE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ingest.logfiles import LOG_BYTES, LOG_FILES, roll_over
from ingest.paths import PROJECT_ROOT, local_dir

UNITS = PROJECT_ROOT / "deploy" / "systemd"
# How often the units' logs are looked at for their size: a busy daemon writes well under 1 MiB a second.
ROLL_CHECK_SECONDS = 10.0


class UnitError(ValueError):
    """A unit file this supervisor cannot run; the message names the file and the fix."""


@dataclass(frozen=True)
class Unit:
    name: str
    """The unit file's name without `.service`."""
    command: list[str]
    restart_seconds: float


def expand(text: str, env: dict[str, str], where: str) -> str:
    """`${VAR}` and `$VAR` replaced from `env`, as systemd does in ExecStart (pure); an unset variable is
    an error that names it."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            raise UnitError(f"{where}: ${{{name}}} is not set. Fix: set it in the environment (deploy/ingest.env "
                            "lists every variable the units read)")
        return env[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


def parse_unit(path: Path, env: dict[str, str]) -> Unit:
    """The command and restart delay of a systemd service file (pure but for the read)."""
    settings: dict[str, str] = {}
    lines = path.read_text().replace("\\\n", " ").splitlines()
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    if "ExecStart" not in settings:
        raise UnitError(f"{path}: no ExecStart=. Fix: name the command the unit runs")
    command = shlex.split(expand(settings["ExecStart"], env, f"{path} ExecStart"))
    if "ExecStartPre" in settings:  # as systemd: the command starts only when this succeeds, else a restart is due
        pre = shlex.split(expand(settings["ExecStartPre"], env, f"{path} ExecStartPre"))
        command = ["/bin/sh", "-c", f"{shlex.join(pre)} && exec {shlex.join(command)}"]
    return Unit(path.stem, command, float(settings.get("RestartSec", "2").rstrip("s")))


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (systemd's EnvironmentFile format, no expansion; pure but for the read)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip().strip('"')
    return out


class Supervisor:
    def __init__(self, units: list[Unit], state: Path, env: dict[str, str], stop_timeout: float = 30.0,
                 log_bytes: int = LOG_BYTES, log_files: int = LOG_FILES,
                 roll_check_seconds: float = ROLL_CHECK_SECONDS, other_logs: tuple[Path, ...] = ()) -> None:
        self.units = units
        self.state = state
        self.env = env
        self.stop_timeout = stop_timeout
        self.log_bytes, self.log_files, self.roll_check_seconds = log_bytes, log_files, roll_check_seconds
        self.other_logs = other_logs
        self.running: dict[str, subprocess.Popen] = {}
        self.due: dict[str, float] = {}
        self.stopping = False

    def log(self, message: str) -> None:
        print(f"supervise: {message}", file=sys.stderr, flush=True)

    def start(self, unit: Unit) -> None:
        # appended to (O_APPEND, which the process inherits), so that it writes on at the start once rolled
        log = open(self.state / f"{unit.name}.log", "ab")
        proc = subprocess.Popen(unit.command, env=self.env, cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.running[unit.name] = proc
        (self.state / f"{unit.name}.pid").write_text(str(proc.pid))

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        self.state.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)  # set even when the shell left SIGINT ignored (no job control)
        for unit in self.units:
            self.start(unit)
        self.log(f"started {', '.join(self.units_started())}; logs in {self.state}")
        by_name = {u.name: u for u in self.units}
        rolled = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now - rolled >= self.roll_check_seconds:
                rolled = now
                for path in [self.state / f"{unit.name}.log" for unit in self.units] + list(self.other_logs):
                    roll_over(path, self.log_bytes, self.log_files)
            for name, proc in list(self.running.items()):
                if proc.poll() is not None and name not in self.due:
                    unit = by_name[name]
                    self.log(f"{name} (pid {proc.pid}) ended with {proc.returncode}; starting it again in "
                             f"{unit.restart_seconds:g} s (its log: {self.state / (name + '.log')})")
                    self.due[name] = now + unit.restart_seconds
            for name, when in list(self.due.items()):
                if now >= when and not self.stopping:
                    del self.due[name]
                    self.start(by_name[name])
            time.sleep(0.2)
        self.shutdown()
        return 0

    def units_started(self) -> list[str]:
        return [f"{name} (pid {proc.pid})" for name, proc in self.running.items()]

    def shutdown(self) -> None:
        """SIGTERM to every process group, then SIGKILL to those still there after the timeout."""
        for proc in self.running.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for proc in self.running.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)  # what is left of the group (children that ignored TERM)
            proc.wait()
        self.log("stopped " + ", ".join(self.running))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.localdev.supervise", description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=Path, default=UNITS, help="a folder of systemd .service files")
    parser.add_argument("--env-file", type=Path, default=PROJECT_ROOT / "deploy" / "ingest.env",
                        help="defaults for the variables the units read (the environment wins)")
    parser.add_argument("--state", type=Path, default=None, help="logs and PID files (default: .local/supervise)")
    parser.add_argument("--stop-timeout", type=float, default=30.0)
    parser.add_argument("--roll", type=Path, action="append", default=[], metavar="FILE",
                        help="another log to roll over as the units' roll; its writer must open it for appending")
    args = parser.parse_args(argv)
    env = {**read_env_file(args.env_file), "INGEST_HOME": str(PROJECT_ROOT), **os.environ}
    try:
        units = [parse_unit(p, env) for p in sorted(args.units.glob("*.service"))]
    except UnitError as exc:
        print(f"supervise: {exc}", file=sys.stderr)
        return 2
    if not units:
        print(f"supervise: no .service files in {args.units}", file=sys.stderr)
        return 2
    return Supervisor(units, args.state or local_dir() / "supervise", env, args.stop_timeout,
                      other_logs=tuple(args.roll)).run()


if __name__ == "__main__":
    sys.exit(main())
