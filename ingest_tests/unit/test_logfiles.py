"""Logs the project's processes write to their standard output roll over by size (ingest/logfiles.py)."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from ingest.localdev.supervise import Supervisor, parse_unit
from ingest.logfiles import roll_over


def test_a_log_above_its_size_moves_to_dot_1_and_the_oldest_beyond_the_kept_ones_is_dropped(tmp_path):
    log = tmp_path / "x.log"
    assert roll_over(log, 10, 2) is False  # no log yet
    log.write_text("0123456789")
    assert roll_over(log, 10, 2) is False and log.read_text() == "0123456789"  # at the size, not above it
    for text in ("first-----!", "second----!", "third-----!"):
        log.write_text(text)
        assert roll_over(log, 10, 2) is True
    assert log.read_bytes() == b""
    assert (tmp_path / "x.log.1").read_text() == "third-----!" and (tmp_path / "x.log.2").read_text() == "second----!"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.log", "x.log.1", "x.log.2"]


def test_a_writer_appending_through_its_own_descriptor_writes_on_at_the_start_of_the_emptied_log(tmp_path):
    log = tmp_path / "x.log"
    with open(log, "ab", buffering=0) as writer:  # as a supervised process holds its log
        writer.write(b"old line\n" * 4)
        assert roll_over(log, 8, 1)
        writer.write(b"new line\n")
    assert log.read_bytes() == b"new line\n"  # no hole of zeros where the old lines were
    assert (tmp_path / "x.log.1").read_bytes() == b"old line\n" * 4


TALKER = ("import sys, time\nfor i in range(10**6):\n"
          "    sys.stdout.write(f'line {i:08d} ' + 'x' * 80 + '\\n'); sys.stdout.flush(); time.sleep(0.002)\n")


def run_supervisor_for(seconds: float, supervisor: Supervisor) -> None:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stopper = threading.Timer(seconds, supervisor.stop)
    stopper.start()
    try:
        supervisor.run()
    finally:
        stopper.cancel()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def assert_rolled_in_order(log: Path, size: int) -> None:
    """Two rolled files and the live one, each of whole numbered lines, the numbers rising from the
    oldest file to the live one, and no more files kept than asked."""
    files = [log.with_name(log.name + ".2"), log.with_name(log.name + ".1"), log]  # oldest first
    assert all(f.exists() for f in files) and not log.with_name(log.name + ".3").exists()
    numbers = []
    for f in files:
        lines = f.read_text().splitlines()
        assert lines and all(line.startswith("line ") and line.endswith("x" * 80) for line in lines), f
        numbers.append([int(line.split()[1]) for line in lines])
    assert numbers[0][-1] < numbers[1][0] and numbers[1][-1] < numbers[2][0], [(n[0], n[-1]) for n in numbers]
    assert all(len(f.read_bytes()) < 4 * size for f in files[:2])  # rolled near the size, not left to grow


def test_the_supervisor_rolls_a_running_units_log_over_keeping_the_newest_lines(tmp_path):
    """A unit that keeps writing numbered lines: its log rolls over while it runs, the rolled files hold
    whole lines, the newest in `.1`, and no more files are kept than asked."""
    script = tmp_path / "talk.py"
    script.write_text(TALKER)
    unit_file = tmp_path / "talker.service"
    unit_file.write_text(f"[Service]\nExecStart={sys.executable} {script}\n")
    state = tmp_path / "state"
    run_supervisor_for(3.0, Supervisor([parse_unit(unit_file, dict(os.environ))], state, dict(os.environ),
                                       stop_timeout=5, log_bytes=4096, log_files=2, roll_check_seconds=0.1))
    assert_rolled_in_order(state / "talker.log", 4096)


def test_the_supervisor_rolls_the_log_of_a_process_it_did_not_start(tmp_path):
    """bin/demo's writers and databases append to their logs (`>>`) and the supervisor is given them with
    `--roll`: such a log rolls over as a unit's does."""
    script = tmp_path / "talk.py"
    script.write_text(TALKER)
    writer_log = tmp_path / "demo-writer.log"
    with open(writer_log, "ab") as out:
        writer = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT)
    idle = tmp_path / "idle.service"  # a unit that writes nothing
    idle.write_text(f"[Service]\nExecStart={sys.executable} -c \"import time; time.sleep(60)\"\n")
    try:
        run_supervisor_for(3.0, Supervisor([parse_unit(idle, dict(os.environ))], tmp_path / "state",
                                           dict(os.environ), stop_timeout=5, log_bytes=4096, log_files=2,
                                           roll_check_seconds=0.1, other_logs=(writer_log,)))
    finally:
        writer.terminate()
        writer.wait()
    assert_rolled_in_order(writer_log, 4096)
