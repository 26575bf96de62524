"""Server CPU of small Delta commits by where G1 starts marking the old generation (issue 46).

The server's heap options (lake/connect.py HEAP_OPTIONS) fix the marking threshold. At 5 % of the
heap, the tables Delta keeps open on a busy server were above it all the time, and marking never
stopped. Each round starts a server per threshold (same options otherwise), appends and merges 5 rows
into a 1,000-row table 30 times each (bench/commit_zone.py's loop), and prints the server's CPU per
commit against the project's setting in the same round:

    .venv/bin/python bench/commit_gc.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.commit_zone import per_commit  # noqa: E402

ROUNDS = 3


def with_threshold(percent: int) -> tuple[str, ...]:
    from ingest.lake.connect import HEAP_OPTIONS

    return (*(o for o in HEAP_OPTIONS if not o.startswith("-XX:InitiatingHeapOccupancyPercent=")),
            f"-XX:InitiatingHeapOccupancyPercent={percent}")


def main() -> None:
    for _ in range(ROUNDS):
        ours = per_commit("UTC")
        for percent in (5, 45):
            other = per_commit("UTC", heap=with_threshold(percent))
            print(f"commit_cpu_marking_from_{percent}_percent: {other:.3f} CPU-s, project's setting {ours:.3f} "
                  f"CPU-s, ratio {other / ours:.2f}", flush=True)


if __name__ == "__main__":
    main()
