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
from ingest.lake.deltalog import LogStore, last_commit, our_commits
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


SNAPSHOT_PAGE_ROWS = 1_000_000
"""A snapshot wave's Parquet pages end at Parquet's page size (1 MiB), not at the sessions' 5,000 rows
(connect.SESSION_CONF), which are there for the batch keys a merge pushes into silver's reader; the
silver merge reads a snapshot whole. 10M rows of the bench's table, alternating rounds: 9.81-10.31 s
against 10.17-10.69 s at 5,000 rows, the files 119 against 143 MiB (fewer pages to fill, compress and
describe)."""


def snapshot_parquet(stats_columns: Sequence[str]) -> dict[str, str]:
    """A snapshot wave's Parquet writer settings (Hadoop-style keys, for its write only): row groups of
    SNAPSHOT_ROW_GROUP_BYTES, pages of up to SNAPSHOT_PAGE_ROWS, and Parquet's own statistics (each
    page's and row group's min and max, and the sizes) only for `stats_columns`: the key, which a
    reader may filter on, and `_pos`, whose range snapshot_positions reads from the footers. Each
    statistic compares every value as it is written, strings and decimals byte by byte: 10M rows of
    seven columns wrote in 5.6-5.7 s without them against 6.3-6.4 s."""
    from ingest.lake.columns import lake_name

    return {"parquet.block.size": str(SNAPSHOT_ROW_GROUP_BYTES),
            "parquet.page.row.count.limit": str(SNAPSHOT_PAGE_ROWS),
            "parquet.column.statistics.enabled": "false", "parquet.size.statistics.enabled": "false",
            **{f"parquet.column.statistics.enabled#{lake_name(c)}": "true" for c in stats_columns}}


def commit_waves(path: str, work: Waves[U], log: Callable[[str], None]) -> Waves[U]:
    """Commit every remaining wave of a snapshot into the Delta table at `path`, in order."""
    from ingest.lake.merge import POS
    from ingest.lake.write import append, stats_on

    keys = list(work.run.key_columns)
    # Delta's statistics on the key alone: on `_pos` (a decimal(38,0), a BigDecimal compared per row)
    # they cost a 10M-row snapshot about 0.5 s, and Parquet's own give its range (snapshot_positions)
    properties, parquet = stats_on(keys), snapshot_parquet([*keys, POS])
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
    adds = snapshot_adds(path, snapshot_id)
    rows = None if adds is None else file_rows(adds)
    return spark.read.format("delta").load(path).count() if rows is None else rows


def snapshot_adds(path: str, snapshot_id: str, client: Any = None) -> list[dict[str, Any]] | None:
    """The `add` actions of the snapshot `snapshot_id`'s waves' commits at `path`, None when the log no
    longer reaches its first wave."""
    from ingest.lake.deltalog import added_files

    found: list[dict[str, Any]] = []
    for info in our_commits(path, client):
        meta = info.metadata
        if meta.get("kind") != "snapshot" or meta.get("snapshot_id") != snapshot_id:
            continue
        adds = added_files(path, info.version, client)
        if adds is None:
            return None
        found.extend(adds)
        if meta.get("wave") == 0:
            return found
    return None


def file_rows(adds: Sequence[dict[str, Any]]) -> int | None:
    """The rows the files of `adds` hold, from their statistics; None when a file has none (pure)."""
    import json

    stats = [json.loads(add.get("stats") or "{}") for add in adds]
    return None if any("numRecords" not in s for s in stats) else sum(int(s["numRecords"]) for s in stats)


def snapshot_positions(path: str, snapshot_id: str) -> tuple[int, int | None, int | None] | None:
    """(rows, lowest `_pos`, highest `_pos`) of the snapshot `snapshot_id` at `path` without a Spark job
    (Delta answers count, min and max by scanning the column: 2 s for 10M rows). The rows come from the
    statistics of the files its waves' commits added, the positions from each file's Parquet footer
    (Delta's statistics on `_pos` cost a 10M-row snapshot about 0.5 s; a table written before they were
    dropped has them, and they serve). None when the log no longer reaches its first wave or a file has
    no statistics."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from ingest.lake.deltalog import log_store
    from ingest.lake.merge import POS

    store = log_store(path)
    adds = snapshot_adds(path, snapshot_id, getattr(store, "client", None))
    rows = None if adds is None else file_rows(adds)
    if rows is None:
        return None
    ranges: list[tuple[int, int]] = []
    footers = []
    for add in adds:
        stats = json.loads(add["stats"])
        if POS in stats.get("minValues", {}) and POS in stats.get("maxValues", {}):
            ranges.append((int(stats["minValues"][POS]), int(stats["maxValues"][POS])))
        elif stats["numRecords"] > stats.get("nullCount", {}).get(POS, 0):
            footers.append(add["path"])
    # one ranged read a file, on S3 a GET each: several at once
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = list(pool.map(lambda name: parquet_ranges(store, name, POS), footers))
    if any(r is None for r in found):
        return None
    ranges.extend(r for groups in found for r in groups)
    return rows, min((lo for lo, _ in ranges), default=None), max((hi for _, hi in ranges), default=None)


FOOTER_READ = 64 * 1024
"""Bytes read from a Parquet file's end for its footer: a snapshot file's is a few KiB."""


def parquet_ranges(store: LogStore, relative: str, column: str,
                   read: int = FOOTER_READ) -> list[tuple[int, int]] | None:
    """The lowest and highest integer value of `column` in each row group of the table's Parquet file
    `relative` that holds one, from the footer's statistics (one ranged read of `read` bytes from the
    end, a second when the footer is larger); None when the file, the column or a row group's
    statistics are missing."""
    import struct
    from urllib.parse import unquote

    import pyarrow as pa
    import pyarrow.parquet as pq

    if "://" in relative:  # a file outside the table's folder (a shallow clone's)
        return None
    name = unquote(relative)  # an add action's path is URL-encoded
    tail = store.tail(name, read)
    if tail is None or len(tail) < 12 or tail[-4:] != b"PAR1":
        return None
    length = struct.unpack("<I", tail[-8:-4])[0] + 8
    if length > len(tail):
        tail = store.tail(name, length)
        if tail is None or len(tail) < length:
            return None
    # the footer alone, behind the magic that opens a Parquet file: pyarrow reads it from the end
    metadata = pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-length:]))
    index = next((i for i in range(metadata.num_columns) if metadata.schema.column(i).path == column), None)
    if index is None:
        return None
    ranges = []
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(index)
        stats = chunk.statistics if chunk.is_stats_set else None
        if stats is None:
            return None
        if stats.has_min_max:
            ranges.append((int(stats.min), int(stats.max)))
        elif stats.null_count != chunk.num_values:  # values without a min and max
            return None
    return ranges
