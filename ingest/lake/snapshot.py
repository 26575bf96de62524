"""The one commit protocol of every snapshot: waves of work units, resumable, with txn ids.

A source plans a snapshot as work units (MySQL's and PostgreSQL's primary-key chunks,
DynamoDB's Scan segments) and reads a group of them into a DataFrame. The lake commits
each group, a wave, as one Delta append whose `userMetadata` is a `SnapshotCommit`: the
snapshot's identity and log start, the wave's number, and the source's own progress
(how far through its units the snapshot is). The first wave overwrites the table; each
wave's txn id (`snapshot:<source>.<table>:<id>`, wave number) makes a repeated wave a
no-op. A run that dies resumes after the newest committed wave (`resume_point`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from ingest.lake.commits import Txn, unfinished_snapshot
from ingest.lake.deltalog import last_commit, our_commits
from ingest.transforms import TableTransforms

U = TypeVar("U")


@dataclass(frozen=True)
class SnapshotCommit:
    """What one snapshot wave's commit records (its `userMetadata`)."""

    source: str
    table: str
    snapshot_id: str
    fingerprint: str
    """The table's shape: waves of different shapes never mix (a resume checks it)."""
    key_columns: tuple[str, ...]
    log_start: Any
    """Where change batches for this table must start (the source's position, as metadata)."""
    log_start_pos: int | str
    """The same as a `_pos` value: older changes lose the ordered merge against the snapshot's rows."""
    wave: int = 0
    complete: bool = False
    progress: dict[str, Any] = field(default_factory=dict)
    """The source's own resume state after this wave (chunks done and the last key, segments done)."""

    @property
    def txn(self) -> Txn:
        return Txn(f"snapshot:{self.source}.{self.table}:{self.snapshot_id}", self.wave)

    def metadata(self) -> dict[str, Any]:
        return {"kind": "snapshot", "source": self.source, "table": self.table, "snapshot_id": self.snapshot_id,
                "wave": self.wave, "complete": self.complete, "fingerprint": self.fingerprint,
                "key_columns": list(self.key_columns), "log_start": self.log_start,
                "log_start_pos": self.log_start_pos, **self.progress}


def resume_point(path: str, fingerprint: str, usable: Callable[[dict], bool] = lambda _: True) -> dict | None:
    """The newest wave's commit metadata of an unfinished snapshot of the same shape at `path` that
    `usable` accepts, or None: start afresh."""
    last = last_commit(path, kind="snapshot")
    resume = unfinished_snapshot(last.metadata if last else None, fingerprint)
    return resume if resume and usable(resume) else None


@dataclass
class Waves(Generic[U]):
    """A snapshot's remaining work: its units grouped per commit, and what reads and records each group."""

    run: SnapshotCommit
    """The snapshot's identity; `wave` is the number of the first wave still to commit."""
    groups: Sequence[Sequence[U]]
    read: Callable[[Sequence[U]], Any]
    """A wave's rows as a DataFrame (read lazily, on Spark's executors)."""
    progress: Callable[[Sequence[U]], dict[str, Any]]
    """The source's resume state once this wave is committed."""
    said: Callable[[Sequence[U], int], str] = lambda wave, rows: f"{rows} rows"
    """A progress line after a wave, given the rows committed so far in this run."""
    write: Callable[[int, Callable[[], Any]], Any] = lambda wave, commit: commit()
    """Runs a wave's commit: a source may retry it on a dropped connection, or check the table's shape."""
    transforms: TableTransforms | None = None
    """The table's column transforms (hash, mask, ...), applied to every wave before it is written."""
    rows: int = 0
    committed: list[int] = field(default_factory=list)


SNAPSHOT_ROW_GROUP_BYTES = 4 * 2**20
"""A snapshot wave's Parquet row groups: a task writes one file for its chunks and holds a row group's
pages in memory until it is full. At the server's 16 MiB they lived long enough on a 10M-row snapshot
for the JVM to move them to its old generation, whose garbage then grew with the table (the peak of a
10M-row snapshot about 70 MiB higher than with 4 MiB row groups; the README's former "Snapshot memory"
section, in git). A snapshot is read once, whole, by the silver merge; silver keeps the larger row groups for its readers."""


def snapshot_parquet(stats_columns: Sequence[str]) -> dict[str, str]:
    """A snapshot wave's Parquet writer settings (Hadoop-style keys, for its write only): row groups of
    SNAPSHOT_ROW_GROUP_BYTES, and Parquet's own statistics (each page's and row group's min and max, and
    the sizes) only for `stats_columns`, the columns Delta keeps statistics on: the key and `_pos`, which
    a reader may filter on. Each statistic compares every value as it is written, strings and decimals
    byte by byte: 10M rows of seven columns wrote in 5.6-5.7 s without them against 6.3-6.4 s."""
    from ingest.lake.columns import lake_name

    return {"parquet.block.size": str(SNAPSHOT_ROW_GROUP_BYTES),
            "parquet.column.statistics.enabled": "false", "parquet.size.statistics.enabled": "false",
            **{f"parquet.column.statistics.enabled#{lake_name(c)}": "true" for c in stats_columns}}


def commit_waves(path: str, work: Waves[U], log: Callable[[str], None]) -> Waves[U]:
    """Commit every remaining wave of a snapshot into the Delta table at `path`, in order."""
    from ingest.lake.merge import POS
    from ingest.lake.write import append, stats_on

    stats_columns = [*work.run.key_columns, POS]
    properties, parquet = stats_on(stats_columns), snapshot_parquet(stats_columns)
    for offset, group in enumerate(work.groups):
        record = replace(work.run, wave=work.run.wave + offset, complete=offset == len(work.groups) - 1,
                         progress=work.progress(group))
        df = work.read(group)
        if work.transforms:
            df = work.transforms.frame(df)
        first = record.wave == 0
        try:
            outcome = work.write(record.wave, lambda: append(df, path, record.metadata(), record.txn,
                                                             overwrite=first, overwrite_schema=first,
                                                             properties=properties, parquet=parquet))
        except Exception as exc:
            from ingest.lake.datasource import executor_error

            raise (executor_error(exc) or exc) from exc
        work.rows += outcome.rows
        work.committed.append(record.wave)
        log(f"snapshot {work.run.table}: {work.said(group, work.rows)}")
    return work


def snapshot_table_rows(spark, path: str, snapshot_id: str) -> int:
    """The rows of the table the snapshot `snapshot_id` wrote: from its waves' commits, or counted by a
    Spark job (the table's size, not its log's) when the log no longer reaches its first wave."""
    found = snapshot_positions(path, snapshot_id)
    return spark.read.format("delta").load(path).count() if found is None else found[0]


def snapshot_positions(path: str, snapshot_id: str) -> tuple[int, int | None, int | None] | None:
    """(rows, lowest `_pos`, highest `_pos`) of the snapshot `snapshot_id` at `path`, from the statistics
    of the files its waves' commits added (each wave records them for `_pos`), without a Spark job: Delta
    answers count, min and max by scanning the column (2 s for 10M rows). None when the log no longer
    reaches its first wave or a file has no `_pos` statistics."""
    import json

    from ingest.lake.deltalog import added_files
    from ingest.lake.merge import POS

    rows, lows, highs = 0, [], []
    for info in our_commits(path):
        meta = info.metadata
        if meta.get("kind") != "snapshot" or meta.get("snapshot_id") != snapshot_id:
            continue
        adds = added_files(path, info.version)
        if adds is None:
            return None
        for add in adds:
            stats = json.loads(add.get("stats") or "{}")
            if "numRecords" not in stats:
                return None
            rows += int(stats["numRecords"])
            if stats["numRecords"] > stats.get("nullCount", {}).get(POS, 0):
                if POS not in stats.get("minValues", {}) or POS not in stats.get("maxValues", {}):
                    return None
                lows.append(int(stats["minValues"][POS]))
                highs.append(int(stats["maxValues"][POS]))
        if meta.get("wave") == 0:
            return rows, min(lows, default=None), max(highs, default=None)
    return None
