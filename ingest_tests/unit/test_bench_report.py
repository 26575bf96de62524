"""The benchmark report: one line per benchmark in the issue's format, targets judged the right way round."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.common import PeakRss, Result, shares_memory, tree_rss_bytes


def test_a_line_names_ours_the_baseline_and_the_ratio_and_judges_the_target():
    faster = Result("snapshot_1M_vs_jdbc", 150_000, "spark_jdbc_to_delta", 100_000, "rows/s", target=1.0)
    assert faster.line() == ("snapshot_1M_vs_jdbc: ours 150,000 rows/s, baseline spark_jdbc_to_delta 100,000 rows/s, "
                             "ratio 1.50  [target >= 1: met]")
    slower = Result("cdc_1M_events", 7_000, "raw_read", 14_000, "row events/s", target=0.8)
    assert slower.ratio == 0.5 and not slower.meets_target and slower.line().endswith("[target >= 0.8: NOT met]")


def test_lower_is_better_figures_meet_a_target_by_staying_under_it():
    flat = Result("snapshot_peak_rss_1M_rows", 1_100, "same_at_100k_rows", 1_000, "MiB", higher_is_better=False,
                  target=1.2)
    grows = Result("snapshot_peak_rss_1M_rows", 3_000, "same_at_100k_rows", 1_000, "MiB", higher_is_better=False,
                   target=1.2)
    assert flat.meets_target and flat.line().endswith("[target <= 1.2: met]")
    assert not grows.meets_target
    assert Result("freshness_p50", 40.5, "raw_binlog_tail_p50", 0.0012, "s").line() == (
        "freshness_p50: ours 40.50 s, baseline raw_binlog_tail_p50 0.0012 s, ratio 33750.00")
    assert Result("x", 1, "y", 2, "u").to_json()["meets_target"] is None


def test_peak_rss_counts_a_child_process_that_holds_memory():
    # The child holds about 200 MiB (every page written) until told to exit; the process tree's
    # peak, sampled while it holds it, must include it. It says when it holds it: on a loaded
    # machine its start-up alone can take longer than a fixed wait.
    hold = "import sys; b = b'x' * (200 * 2**20); print('held', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"held"
        with PeakRss(os.getpid(), interval=0.05) as rss:
            time.sleep(0.5)
    finally:
        child.stdin.close()
        child.wait()
    assert rss.peak - tree_rss_bytes(os.getpid()) > 150 * 2**20


def test_a_child_sharing_its_parents_memory_is_not_counted_twice():
    # A child made by vfork or posix_spawn shares its parent's address space until it execs, and /proc
    # shows it with every resident page of the parent: the Spark server's JVM starts commands so, and a
    # sample taken then counted the JVM twice. Made here with clone(CLONE_VM): the child runs libc's
    # sleep(1) on a stack of its own and touches nothing of Python's.
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    held = b"x" * (200 * 2**20)  # noqa: F841 (resident while the child lives)
    before = tree_rss_bytes(os.getpid())
    stack = ctypes.create_string_buffer(256 * 1024)
    top = ctypes.c_void_p(ctypes.addressof(stack) + len(stack) - 256)
    libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    clone_vm = 0x100
    pid = libc.clone(ctypes.cast(libc.sleep, ctypes.c_void_p), top, clone_vm | signal.SIGCHLD, ctypes.c_void_p(1))
    assert pid > 0, os.strerror(ctypes.get_errno())
    try:
        assert shares_memory(pid, os.getpid())
        with_child = tree_rss_bytes(os.getpid())
    finally:
        os.waitpid(pid, 0)
    assert with_child - before < 50 * 2**20, (before, with_child)


def test_a_run_of_some_lines_keeps_the_latest_figures_of_the_others(tmp_path):
    import json

    from bench.run import merged

    out = tmp_path / "quick.json"
    assert merged(out, [{"name": "a", "ours": 1}]) == [{"name": "a", "ours": 1}]  # no earlier file
    out.write_text(json.dumps({"results": [{"name": "a", "ours": 0}, {"name": "b", "ours": 2}]}))
    assert merged(out, [{"name": "a", "ours": 1}]) == [{"name": "a", "ours": 1}, {"name": "b", "ours": 2}]


def test_the_performance_table_has_every_line_its_verdict_commit_and_machine(tmp_path):
    from bench.report import BEGIN, END, table, write_into

    met = {**Result("snapshot_1M_vs_jdbc", 150_000, "spark_jdbc_to_delta", 100_000, "rows/s", target=1.0).to_json(),
           "commit": "abc1234", "measured_at": "2026-11-27T20:00:00Z"}
    limit = Result("freshness_p50", 9.1, "raw_binlog_tail_p50", 0.001, "s", higher_is_better=False, limit=3).to_json()
    text = table([{"mode": "quick", "machine": {"cores": 2, "cpu": "EPYC"}, "results": [met, limit]}])
    rows = text.splitlines()
    assert rows[2] == ("| `freshness_p50` | quick | 9.10 s | raw_binlog_tail_p50 0.001 s | 9,100 | ours <= 3: NOT met "
                       "| ?, ? |")
    assert rows[3].endswith("| 1.50 | ratio >= 1: met | abc1234, 2026-11-27T20:00:00Z |")
    assert "- quick: 2 cores, EPYC" in text
    doc = tmp_path / "performance.md"
    doc.write_text(f"# P\n\n{BEGIN}\nold\n{END}\n\nprose\n")
    write_into(doc, text)
    assert "old" not in doc.read_text() and doc.read_text().endswith(f"{END}\n\nprose\n") and rows[3] in doc.read_text()
