"""Bronze: the change log of each table, one append per change batch.

Columns: the row image (after the change; for a delete, before it), then
`_op`, `_pos`, `_ts` (commit time), `_txid` (GTID, or DynamoDB's event id),
`_batch` (partition key), `_before` (the image before an update, as JSON) and
`_origin` (`ttl` for DynamoDB's TTL expiry deletes), and, only in batches that have one, `_unchanged`:
the (lake) names of columns a change did not send because it left them as they were (PostgreSQL's
TOASTed values), which hold NULL in that row and which silver keeps. Columns the source adds
are added (mergeSchema); columns it drops or renames keep what they held in
older rows. Silver can be rebuilt from bronze alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from ingest.changes import UNCHANGED, ChangeOp, ChangeRecord, SourceBatch
from ingest.images import image_json
from ingest.lake.columns import lake_name
from ingest.lake.commits import BronzeCommit
from ingest.lake.tables import spark_ident
from ingest.lake.write import append, stats_on
from ingest.transforms import TableTransforms

META_DDL = ("`_op` string, `_pos` decimal(38,0), `_ts` timestamp, `_txid` string, `_batch` string, "
            "`_before` string, `_origin` string")
META_COLUMNS = ("_op", "_pos", "_ts", "_txid", "_batch", "_before", "_origin", "_unchanged")
UNCHANGED_COLUMN = "_unchanged"


def bronze_ddl(columns: Sequence[tuple[str, str]], with_unchanged: bool = False) -> str:
    """The schema of one table's bronze rows as DDL: its columns (source names, Spark types), then META_DDL."""
    return ", ".join([*(f"{spark_ident(n)} {t}" for n, t in columns), META_DDL,
                      *([f"`{UNCHANGED_COLUMN}` array<string>"] if with_unchanged else [])])


def bronze_schema(columns: Sequence[tuple[str, str]], with_unchanged: bool = False):
    from pyspark.sql.types import StructType

    return StructType.fromDDL(bronze_ddl(columns, with_unchanged))


STATS_META = ("_op", "_pos", "_ts", "_txid", "_batch", "_origin")
"""Bronze's columns with Delta statistics: silver reads a batch by `_batch`, repairs and replays by
`_pos`; the source's columns and the before images (long JSON text) cost most of a batch's
statistics and serve no read of ours."""


BRONZE_PROPERTIES = stats_on(STATS_META)
"""Table properties of a bronze table its first append creates."""


def records_arrow(records: Sequence[ChangeRecord], columns: Sequence[tuple[str, str]], batch_key: str,
                  arrow_schema=None):
    """One table's changes as an Arrow table of bronze rows (in the driver, or on an executor that
    decoded them). `arrow_schema`: the bronze schema's Arrow form, when the caller has it already."""
    from pyspark.sql.pandas.types import to_arrow_schema

    unchanged = [[lake_name(n) for n, v in r.row.items() if v is UNCHANGED] for r in records]
    declared = arrow_schema is not None and UNCHANGED_COLUMN in arrow_schema.names  # an executor's DDL has it
    with_unchanged = any(unchanged) or declared
    if arrow_schema is None or (with_unchanged and not declared):
        arrow_schema = to_arrow_schema(bronze_schema(columns, with_unchanged), timezone="UTC")
    data: list[Any] = [[None if (v := r.row.get(n)) is UNCHANGED else v for r in records] for n, _ in columns]
    data += meta_columns([r.op.value for r in records], [r.pos for r in records], [r.committed_at for r in records],
                         [r.txid for r in records], batch_key, [image_json(r.before) for r in records],
                         [r.origin for r in records], unchanged if with_unchanged else None)
    return arrow_table(data, arrow_schema)


def meta_columns(ops: Sequence[str], positions: Sequence[int], committed_at: Sequence[Any], txids: Sequence[Any],
                 batch_key: str, befores: Sequence[str | None], origins: Sequence[str | None] | None = None,
                 unchanged: Sequence[Sequence[str] | None] | None = None) -> list[Sequence[Any]]:
    """Bronze's meta columns of some changes, in META_COLUMNS' order: `_unchanged` only when given (the
    lake names of the columns each change did not send, if any)."""
    n = len(ops)
    return [ops, [Decimal(p) for p in positions], committed_at, txids, [batch_key] * n, befores,
            [None] * n if origins is None else origins,
            *([[u or None for u in unchanged]] if unchanged is not None else [])]


def arrow_table(data: Sequence[Any], arrow_schema):
    """Columns (bronze's, then its meta columns) as an Arrow table: each a list of values or an Arrow
    array already in its type."""
    import pyarrow as pa

    arrays = [col if isinstance(col, pa.Array) else pa.array(col, type=arrow_schema.field(i).type)
              for i, col in enumerate(data)]
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


class BronzeRows:
    """One table's bronze rows built from changes whose values come in a table map's column order
    (events.EventChanges: op, `_pos`, values, values before), with no ChangeRecord per row: the path of
    a batch that executors decode, where those and a dict per row were over a third of decoding.
    `arrow` gives what `records_arrow` gives for the same changes as records (no `_unchanged`: the
    binlog sends every column)."""

    def __init__(self, columns: Sequence[tuple[str, str]], batch_key: str, arrow_schema) -> None:
        self.names = [n for n, _ in columns]
        self.batch_key, self.arrow_schema = batch_key, arrow_schema
        self.rows: list[tuple] = []
        self._places: dict[tuple[str, ...], list[int] | None] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, names: tuple[str, ...], changes: Sequence[tuple[ChangeOp, int, list, list | None]],
            committed_at: dt.datetime | None, txid: str | None) -> None:
        """The changes of one event; `names`: their values' columns, a subset of bronze's."""
        if names not in self._places:  # once per table map: where its columns go among bronze's (None: in order)
            self._places[names] = None if list(names) == self.names else [self.names.index(n) for n in names]
        place = self._places[names]
        width, batch, append = len(self.names), self.batch_key, self.rows.append
        for op, pos, values, before in changes:
            if place is not None:
                spread: list[Any] = [None] * width
                for i, value in zip(place, values):
                    spread[i] = value
                values = spread
            before_json = None if before is None else image_json(dict(zip(names, before)))
            append((*values, op.value, pos, committed_at, txid, batch, before_json, None))

    def arrow(self):
        """The rows added since the last call, as an Arrow table of bronze rows."""
        rows, self.rows = self.rows, []
        return arrow_table(list(zip(*rows)) if rows else [[] for _ in self.arrow_schema], self.arrow_schema)


def records_df(spark, records: Sequence[ChangeRecord], columns: Sequence[tuple[str, str]], batch_key: str,
               transforms: TableTransforms | None = None):
    """A DataFrame of one table's changes in one batch, through Arrow, its column transforms applied
    before the rows leave this process."""
    table = records_arrow(records, columns, batch_key)
    if transforms:
        table, columns = transforms.apply(table), transforms.columns(columns)
    schema = bronze_schema(columns, UNCHANGED_COLUMN in table.column_names)
    return spark.createDataFrame(table, schema=schema)  # with the schema: Connect refuses an empty table without


@dataclass(frozen=True)
class BronzeWrite:
    """One table's share of a change batch, appended with the batch's positions in the same commit."""

    source: str
    table: str
    batch_key: str
    records: Sequence[ChangeRecord]
    columns: Sequence[tuple[str, str]]
    positions: dict[str, Any]
    """start, end, last GTID and the like: committed with the rows."""
    extra: dict[str, Any]
    """Figures for the UI only (lag, headroom)."""
    frame: Callable[[Any], Any] | None = None
    """For a batch too large to hold here: the changes as a DataFrame that Spark's executors read from
    the source (given the session), in place of `records`."""
    summary: BatchSummary | None = None
    """With `frame`: what the source knows of those changes without reading them (its TRUNCATEs, its
    newest commit), committed with them; the row count comes from the commit (see BatchSummary)."""
    transforms: TableTransforms | None = None
    """The table's column transforms (hash, mask, ...), applied before anything is written."""

    @property
    def changed(self) -> bool:
        """Whether the batch has changes of this table (a table without gets no commit)."""
        return bool(self.records) or self.frame is not None

    def apply(self, spark, path: str, log: Callable[[str], None]) -> dict[str, Any]:
        if self.frame is not None:
            return append_frame(spark, path, self, log) | dict(self.extra)
        return append_changes(spark, path, self.source, self.table, self.batch_key, self.records, self.columns,
                              self.positions, log, self.transforms) | dict(self.extra)


class ChangeBatch(dict):
    """One BronzeWrite per table of a batch; `skipped` names the tables left out of it, with why."""

    def __init__(self, writes: Mapping[str, BronzeWrite], skipped: Mapping[str, str],
                 positions: Mapping[str, Any] | None = None) -> None:
        super().__init__(writes)
        self.skipped = dict(skipped)
        self._positions = positions

    @property
    def positions(self) -> Mapping[str, Any]:
        """The batch's start, end and the like (every write of it carries them too)."""
        if self._positions is not None:
            return self._positions
        return next(iter(self.values())).positions


def bronze_writes(source: str, batch: SourceBatch, frames: Mapping[str, Callable[[Any], Any]] | None = None,
                  transforms: Mapping[str, TableTransforms] | None = None) -> ChangeBatch:
    """A source's change batch as one bronze append per table it holds; `frames`: the tables whose
    changes Spark's executors read (see BronzeWrite.frame); `transforms`: tables' column transforms."""
    frames, transforms = frames or {}, transforms or {}

    def planned(changes) -> BatchSummary:
        return BatchSummary(None, changes.truncates, _epoch(changes.newest), _epoch(changes.oldest))

    return ChangeBatch({table: BronzeWrite(source, table, batch.key, changes.records, changes.columns,
                                           batch.positions, batch.extra, frames.get(table),
                                           planned(changes) if table in frames and changes.sliced else None,
                                           transforms.get(table))
                        for table, changes in batch.tables.items()}, batch.skipped, batch.positions)


REPLAY_CHECK_AGE = dt.timedelta(days=7)
"""Changes older than this may belong to a batch whose txn id has expired (the shortest txn retention
maintenance allows is 7 days): their append first leaves out rows bronze already holds."""


def _not_yet_held(spark, path: str, df, records: Sequence[ChangeRecord]):
    """`df` without the rows whose `_pos` bronze already holds, for a batch old enough that Delta may
    have forgotten its txn id (a re-run after the txn retention). Newer batches append as they are:
    their txn id is still known, and the check would cost a read of bronze every batch."""
    from ingest.lake.deltalog import is_delta_table

    times = [r.committed_at for r in records if r.committed_at is not None]
    if not times or min(times) > dt.datetime.now(dt.timezone.utc) - REPLAY_CHECK_AGE or not is_delta_table(path):
        return df
    lo, hi = min(r.pos for r in records), max(r.pos for r in records)
    held = (spark.read.format("delta").load(path)
            .where(f"_pos BETWEEN CAST({int(lo)} AS DECIMAL(38,0)) AND CAST({int(hi)} AS DECIMAL(38,0))")
            .select("_pos").distinct())
    return df.join(held, "_pos", "left_anti").select(*df.columns)


def append_frame(spark, path: str, write: BronzeWrite, log: Callable[[str], None]) -> dict[str, Any]:
    """Append a batch's changes that executors read (`write.frame`), with its positions in the same
    commit; a repeat adds nothing (its txn id). Counted from the commit: the rows never reach here."""
    log(f"bronze {write.source}/{write.table} batch {write.batch_key}: appending the changes read by executors")
    record = BronzeCommit(write.source, write.table, write.batch_key, write.positions,
                          write.summary.to_metadata() if write.summary else None)
    try:
        frame = write.frame(spark)
        if write.transforms:
            frame = write.transforms.frame(frame)
        outcome = append(frame, path, record.metadata(), record.txn, merge_schema=True,
                         properties=BRONZE_PROPERTIES)
    except Exception as exc:
        from ingest.lake.datasource import executor_error

        raise (executor_error(exc) or exc) from exc
    log(f"bronze {write.source}/{write.table} batch {write.batch_key}: "
        + (f"committed {outcome.rows} changes" if outcome.committed else "already committed: nothing written"))
    return {"rows": outcome.rows, "committed": outcome.committed, "delta_version": outcome.version,
            **write.positions}


@dataclass(frozen=True)
class BatchSummary:
    """What silver's merge of one batch asks of its changes: how many rows are not TRUNCATEs, the
    TRUNCATEs' positions, and when the newest and the oldest change committed in the source (epoch
    seconds; the oldest is None in commits of earlier versions). `changes` None: not counted before
    the commit (changes executors read): the commit's rows less the TRUNCATEs (`counted`)."""

    changes: int | None
    truncates: tuple[int, ...]
    newest_epoch: int | None
    oldest_epoch: int | None = None

    def to_metadata(self) -> dict[str, Any]:
        return {"changes": self.changes, "truncates": [str(p) for p in self.truncates],
                "newest_epoch": self.newest_epoch, "oldest_epoch": self.oldest_epoch}

    @classmethod
    def from_metadata(cls, data: Mapping[str, Any]) -> BatchSummary:
        changes = data["changes"]
        return cls(None if changes is None else int(changes), tuple(int(p) for p in data["truncates"]),
                   data.get("newest_epoch"), data.get("oldest_epoch"))

    def counted(self, metrics: Mapping[str, str]) -> BatchSummary | None:
        """With the row count, if not known, from the operation metrics of the bronze commit that wrote
        these changes; None when they do not say (Delta's metrics turned off): silver counts then."""
        if self.changes is not None:
            return self
        if "numOutputRows" not in metrics:
            return None
        return replace(self, changes=int(metrics["numOutputRows"]) - len(self.truncates))


def summarize(records: Sequence[ChangeRecord]) -> BatchSummary:
    """A batch's summary from its records in hand (pure)."""
    times = [t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)  # a naive commit time is UTC, as in `_ts`
             for t in (r.committed_at for r in records) if t is not None]
    return BatchSummary(sum(r.op != ChangeOp.TRUNCATE for r in records),
                        tuple(int(r.pos) for r in records if r.op == ChangeOp.TRUNCATE),
                        _epoch(max(times, default=None)), _epoch(min(times, default=None)))


def _epoch(at: dt.datetime | None) -> int | None:
    """Epoch seconds, floored as Spark's unix_timestamp floors `_ts` (pure)."""
    return int(at.timestamp()) if at is not None else None


def append_changes(spark, path: str, source: str, table: str, batch_key: str, records: Sequence[ChangeRecord],
                   columns: Sequence[tuple[str, str]], positions: dict[str, Any],
                   log: Callable[[str], None], transforms: TableTransforms | None = None) -> dict[str, Any]:
    """Append one batch's changes with its positions in the same commit; a repeat adds nothing (its txn id,
    or for a batch older than the txn retention, the `_pos` bronze already holds)."""
    log(f"bronze {source}/{table} batch {batch_key}: appending {len(records)} changes")
    df = _not_yet_held(spark, path, records_df(spark, records, columns, batch_key, transforms), records)
    record = BronzeCommit(source, table, batch_key, positions, summarize(records).to_metadata())
    outcome = append(df, path, record.metadata(), record.txn, merge_schema=True, properties=BRONZE_PROPERTIES)
    counts: dict[str, int] = {}
    for r in records:
        counts[r.op.value] = counts.get(r.op.value, 0) + 1
    said = (f"committed {len(records)} changes" if outcome.rows >= len(records) else
            f"committed {outcome.rows} of {len(records)} changes (bronze held the others: a re-run)")
    log(f"bronze {source}/{table} batch {batch_key}: "
        + (said if outcome.committed else "already committed: nothing written"))
    return {"rows": len(records), **{f"rows_{op}": n for op, n in sorted(counts.items())},
            "committed": outcome.committed, "delta_version": outcome.version, **positions}
