"""The sources file: which databases and tables land in the lake.

    sources:
      shop:                        # source name: asset key prefix and lake folder
        kind: mysql
        host: 127.0.0.1
        port: 3407
        user: ingest
        password_env: SHOP_MYSQL_PASSWORD   # the secret stays in the environment
        database: shop
        tables:
          include: [customers, orders, "order_*"]
          exclude: ["*_tmp"]
        snapshot:
          chunk_size: 100000
          parallelism: 2

Every error names the file, the key and the fix. Secrets are never read from
the file: only the name of the environment variable that holds them, resolved
from the environment when a connection is opened (`secret`).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator,
)

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ConfigError(ValueError):
    """A sources file that cannot be used; the message names the file, the key and the fix."""


class MissingSecret(ConfigError):
    """An environment variable the sources file names for a secret is not set."""

    def __init__(self, env: str, message: str) -> None:
        super().__init__(message)
        self.env = env


def secret(env: str, holds: str) -> str:
    """The value of the environment variable `env`, which holds `holds` (for the error): the sources file
    names secrets, the environment has them."""
    value = os.environ.get(env)
    if value is None:
        raise MissingSecret(env, f"environment variable {env} is not set: it holds {holds}. Fix: export {env}=...")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SnapshotSettings(_Model):
    chunk_size: Annotated[int, Field(ge=1, le=10_000_000)] = 100_000
    """Rows per chunk. Each chunk is read in its own consistent-snapshot transaction."""
    parallelism: Annotated[int, Field(ge=1, le=64)] = 2
    """Chunks read at once: the most source connections a snapshot opens."""
    chunks_per_commit: Annotated[int, Field(ge=1, le=10_000)] = 128
    """Chunks per Delta commit. A failed snapshot resumes after the last committed one.

    Each commit (a wave) ends in a barrier: the wave's slowest chunk holds the next wave back,
    and the write starts and commits a job. 10M rows of 100k-row chunks read by JDBC (MariaDB,
    2 cores): 7 waves of 16 chunks took 61-63 s, one wave 46 s (an early reader); later, two waves
    of 64 and 36 chunks 16.1-18.2 s, one wave 14.6-15.1 s. 128 chunks is about 20 s of work per
    wave here, what a failure can cost again (64 was about 30 s when the reader was slower)."""


class FreshnessPolicySettings(_Model):
    fail_after_seconds: Annotated[int, Field(ge=60)]
    """Dagster shows a silver table (and the batch log) stale when it was last materialized longer ago."""
    warn_after_seconds: Annotated[int, Field(ge=60)] | None = None
    """Dagster warns when it was last materialized longer ago than this (less than fail_after_seconds)."""

    @model_validator(mode="after")
    def _warn_first(self) -> FreshnessPolicySettings:
        if self.warn_after_seconds is not None and self.warn_after_seconds >= self.fail_after_seconds:
            raise ValueError(f"warn_after_seconds ({self.warn_after_seconds}) must be less than fail_after_seconds "
                             f"({self.fail_after_seconds})")
        return self

    def policy(self):
        """Dagster's time-window FreshnessPolicy."""
        import datetime as dt

        from dagster import FreshnessPolicy

        warn = self.warn_after_seconds
        return FreshnessPolicy.time_window(fail_window=dt.timedelta(seconds=self.fail_after_seconds),
                                           warn_window=dt.timedelta(seconds=warn) if warn else None)


class BatchRetries(_Model):
    freshness_policy: FreshnessPolicySettings | None = None
    """Dagster's freshness policy for the source's silver tables and batch log (the UI's fresh/stale, and
    alerts on it). Dagster judges it by the last materialization: a table no batch changed within the
    window shows stale although it is current, so set it where tables change at least that often; the
    `freshness` check tells a quiet table from one that is behind."""
    max_batch_attempts: Annotated[int, Field(ge=1, le=100)] = 5
    """Runs of one change batch before the sensor stops the source and says so (it never skips a batch)."""
    retry_backoff_seconds: Annotated[int, Field(ge=0, le=86_400)] = 10
    """Wait before the first re-run of a failed batch; each further failure doubles it."""
    max_run_seconds: Annotated[int, Field(ge=60, le=7 * 86_400)] = 7200
    """A batch run still going after this long is failed by run monitoring (`dagster/max_runtime`) and
    runs again: the backstop for a worker that hangs, or that died where the sensor cannot see it."""
    watch_seconds: Annotated[float, Field(ge=0, le=4.5)] = 4.0
    """How long one sensor tick keeps watching, a few times a second, for the source to move or a
    running batch to end, so that the next batch starts within a fraction of a second of either
    instead of at the daemon's next tick (it starts one every 5 s at best). 0: one look per tick."""


class CdcSettings(BatchRetries):
    min_interval_seconds: Annotated[int, Field(ge=1, le=86_400)] = 1
    """Least seconds between the starts of two sensor ticks (the daemon starts one every 5 s at best;
    within a tick the sensor watches the binlog head for `watch_seconds`)."""
    max_batch_files: Annotated[int, Field(ge=1, le=1000)] = 1
    """Most binlog files one change batch spans; a longer backlog becomes several batches."""
    sensor_running: bool = True
    """Whether the sensor starts switched on."""
    max_lag_seconds: Annotated[int, Field(ge=1)] = 900
    """The freshness check fails when the source has changes silver lacks and silver last merged longer ago."""
    executor_min_bytes: Annotated[int, Field(ge=0)] = 2 * 2**20
    """A batch of at least this many binlog bytes is decoded on Spark's executors, slice by slice (a
    cluster scales it, and no row of it is held by the run's process); a smaller one is decoded by the
    run itself, which starts no Spark job for it. 0: every batch on the executors."""


class PostgresCdcSettings(CdcSettings):
    executor_min_bytes: Annotated[int, Field(ge=0)] = 2 * 2**20
    """A batch spanning at least this many bytes of WAL is only planned by the run, as it streams by (its
    columns, TRUNCATEs and newest commit), and Spark's executors read each table's changes from the slot,
    a column at a time: no change of it is held by the run's process, however large one transaction. A
    smaller one is read by the run itself, which starts no Spark job to read it. The two cost the same
    near 2 MiB (about 10,000 changes of ten columns); at 60 MiB the executors took 8.9 s against the
    run's 12.8 s. 0: every batch on the executors."""
    executor_readers: Annotated[int, Field(ge=1, le=16)] = 2
    """Executors that read one table's changes of such a batch at once, each the transactions whose id
    falls to it, from its own temporary copy of the slot (the server decodes the batch's WAL once for
    each). While a table is read it takes this many replication slots less one: raise
    max_replication_slots for it. Copies need PostgreSQL 12 or later. 1: one reader, on the slot itself."""


ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"


class HashSettings(_Model):
    salt_env: str = Field(pattern=ENV_NAME_RE)
    """Environment variable holding the salt (never the salt itself). Sources and tables hashed with the
    same salt give the same digest for the same value, so joins on hashed keys still work."""


class MaskSettings(_Model):
    keep_first: Annotated[int, Field(ge=0, le=1000)] = 0
    """Leading characters kept."""
    keep_last: Annotated[int, Field(ge=0, le=1000)] = 0
    """Trailing characters kept. A value no longer than both together is masked whole."""
    char: str = Field("*", min_length=1, max_length=1)
    """What every other character becomes."""


class ColumnTransform(_Model):
    """One of: `{hash: {salt_env: VAR}}`, `{mask: {keep_last: 4}}`, `{truncate: 20}`; `null` is written as
    the bare value null (see ingest/transforms.py)."""

    hash: HashSettings | None = None
    """SHA-256 of the salt and the value, as 64 hex digits (the column becomes text)."""
    mask: MaskSettings | None = None
    """Text with all but the kept characters replaced."""
    truncate: Annotated[int, Field(ge=1)] | None = None
    """Text cut to this many characters."""

    @model_validator(mode="after")
    def _one(self) -> ColumnTransform:
        chosen = [k for k in ("hash", "mask", "truncate") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError("a transform is exactly one of hash, mask, truncate or null "
                             f"(got {', '.join(chosen) or 'none'})")
        return self


def _null_transform(value: object) -> object:
    if isinstance(value, str):
        if value == "null":
            return None
        raise ValueError(f"{value!r} is not a transform: write one of {{hash: {{salt_env: VAR}}}}, "
                         "{mask: {keep_last: N}}, {truncate: N} or null")
    return value


Transform = Annotated[ColumnTransform | None, BeforeValidator(_null_transform)]
"""A column's transform; None is `null`."""


def resolve_transforms(table: str, spec: Mapping[str, ColumnTransform | None], where: str):
    """The table's transforms with their salts read from the environment (ingest/transforms.py)."""
    from ingest.transforms import HASH, MASK, NULL, TRUNCATE, Rule, TableTransforms

    rules = []
    for column, t in spec.items():
        if t is None:
            rules.append(Rule(column, NULL))
        elif t.hash is not None:
            salt = secret(t.hash.salt_env, f"the salt of {where}.{column}'s hash (table {table})")
            rules.append(Rule(column, HASH, salt=salt.encode()))
        elif t.mask is not None:
            rules.append(Rule(column, MASK, keep_first=t.mask.keep_first, keep_last=t.mask.keep_last,
                              char=t.mask.char))
        else:
            rules.append(Rule(column, TRUNCATE, length=t.truncate))
    return TableTransforms(table, tuple(rules))


class ColumnSelection(_Model):
    exclude: list[str] = []
    """Columns left out on both paths (snapshot and binlog), e.g. a GEOMETRY column nobody reads.
    A name the table does not have is ignored, so a later DROP COLUMN does not break the table."""
    transform: dict[str, Transform] = {}
    """Columns whose values are hashed, masked, truncated or nulled before anything is written, by
    column name: `{email: {hash: {salt_env: PII_SALT}}, phone: {mask: {keep_last: 4}}, notes: null}`."""

    @model_validator(mode="after")
    def _not_excluded(self) -> ColumnSelection:
        for column in self.transform:
            if column in self.exclude:
                raise ValueError(f"transform.{column}: the column is also excluded, so nothing of it lands. "
                                 "Fix: remove one of the two")
        if not self.exclude and not self.transform:
            raise ValueError("give exclude or transform")
        return self


class TableSelection(_Model):
    include: list[str] = Field(min_length=1)
    """Table names or glob patterns (`orders`, `order_*`). A plain name that does not exist is an error."""
    exclude: list[str] = []
    """Glob patterns removed from what `include` selects."""
    overrides: dict[str, SnapshotSettings] = {}
    """Per-table snapshot settings, by table name."""
    columns: dict[str, ColumnSelection] = {}
    """Per-table column selection, by table name: `{film: {exclude: [location]}}`."""
    history: list[str] = []
    """Tables (names or glob patterns) that also keep an SCD2 history: a `<source>/<table>/history` asset
    with one row per version of a key (see ingest/lake/history.py). The table needs a primary key."""

    where: dict[str, str] = {}
    """Row filters, by table name: a predicate in the source's own SQL over the table's columns, e.g.
    `{orders: "region = 'EU' AND NOT test"}`. Only rows it holds for land: the snapshot reads only those,
    and the source evaluates it on each change's images (see ingest/filters.py): a row an update moves out
    becomes a delete in silver, one it moves in an insert. Reconciliation compares only those rows.
    A postgres table with a filter needs REPLICA IDENTITY FULL."""

    deletion_vectors: list[str] = []
    """Tables (names or glob patterns) whose silver writes Delta deletion vectors: a small batch into a
    large table then writes its changed rows instead of rewriting every file a key falls in. Off by
    default: readers without the feature refuse such a table, delta-rs's `to_pyarrow_table()` among them
    (its SQL and Polars read it; see docs/design.md, "Reading the lake without Spark")."""

    without_change_feed: list[str] = []
    """Tables (names or glob patterns) whose silver and history do not record Delta's change data feed.
    The feed is on by default: readers take only what changed (dbt_project's incremental model reads it).
    Without it a merge that updates rows writes no before and after images: 0.6-0.9 CPU-s less per small
    batch and table (docs/performance.md). A table listed here after it was made stops at its next batch."""

    def keeps_history(self, table: str) -> bool:
        return any(fnmatch.fnmatchcase(table, p) for p in self.history)

    def layout(self, table: str):
        """How the table's silver and history are written (ingest/lake/merge.py `Layout`)."""
        from ingest.lake.merge import Layout

        return Layout(change_feed=not any(fnmatch.fnmatchcase(table, p) for p in self.without_change_feed),
                      deletion_vectors=any(fnmatch.fnmatchcase(table, p) for p in self.deletion_vectors))

    def excluded_columns(self, table: str) -> frozenset[str]:
        selection = self.columns.get(table)
        return frozenset(selection.exclude) if selection else frozenset()

    def transforms(self, table: str):
        """The table's column transforms, salts resolved (MissingSecret when a salt's variable is unset)."""
        selection = self.columns.get(table)
        return resolve_transforms(table, selection.transform if selection else {},
                                  f"tables.columns.{table}.transform")

    def row_filter(self, table: str):
        """The table's row filter (ingest/filters.py), or None."""
        from ingest.filters import RowFilter

        where = self.where.get(table)
        return RowFilter(table, where.strip()) if where else None

    @field_validator("where")
    @classmethod
    def _predicates(cls, value: dict[str, str]) -> dict[str, str]:
        for table, where in value.items():
            if not where.strip():
                raise ValueError(f"{table}: the filter is empty. Fix: give a predicate, or remove the table's entry")
            if ";" in where:
                raise ValueError(f"{table}: a filter is one predicate, without ';'. Fix: remove the ';'")
        return value

    @field_validator("include", "exclude", "history", "deletion_vectors", "without_change_feed")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern or not re.fullmatch(r"[A-Za-z0-9_*?\[\]$-]+", pattern):
                raise ValueError(f"{pattern!r} is not a table name or glob pattern")
        return value

    def literal_names(self) -> list[str]:
        return [p for p in self.include if not any(ch in p for ch in "*?[")]

    def is_static(self) -> bool:
        """True when the table list is known without asking the database."""
        return len(self.literal_names()) == len(self.include)

    def select(self, available: Iterable[str]) -> list[str]:
        available = list(available)
        chosen = [t for t in available if any(fnmatch.fnmatchcase(t, p) for p in self.include)]
        return sorted(t for t in chosen if not any(fnmatch.fnmatchcase(t, p) for p in self.exclude))

    def static_tables(self) -> list[str]:
        return self.select(self.literal_names())


class MySQLSource(_Model):
    kind: Literal["mysql"] = "mysql"
    """The source's kind: `mysql` covers MySQL and MariaDB."""
    host: str
    """Server host name or address."""
    port: Annotated[int, Field(ge=1, le=65535)] = 3306
    """Server TCP port."""
    user: str
    """The ingest user: SELECT, REPLICATION SLAVE and REPLICATION CLIENT are enough."""
    password_env: str
    """Name of the environment variable that holds the password (never the password itself)."""
    database: str
    """The schema (database) the tables live in."""
    tables: TableSelection
    """Which tables land in the lake."""
    snapshot: SnapshotSettings = SnapshotSettings()
    """Default snapshot settings for every table of the source."""
    cdc: CdcSettings = CdcSettings()
    """How the sensor cuts the binlog into change batches."""
    connect_timeout: Annotated[int, Field(ge=1, le=600)] = 10
    """Seconds to wait for a connection before failing."""

    @field_validator("password_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    def snapshot_settings(self, table: str) -> SnapshotSettings:
        return self.tables.overrides.get(table, self.snapshot)

    def keeps_history(self, table: str) -> bool:
        return self.tables.keeps_history(table)

    def layout(self, table: str):
        return self.tables.layout(table)

    def transforms(self, table: str):
        return self.tables.transforms(table)


class ScanSettings(_Model):
    segments: Annotated[int, Field(ge=1, le=1_000_000)] = 8
    """TotalSegments of the parallel Scan: the units a failed snapshot resumes by."""
    parallelism: Annotated[int, Field(ge=1, le=64)] = 2
    """Segments scanned at once (Spark tasks)."""
    segments_per_commit: Annotated[int, Field(ge=1, le=10_000)] = 4
    """Segments per Delta commit. A failed snapshot resumes after the last committed one."""
    consistent_read: bool = False
    """Strongly consistent Scan reads (twice the read capacity)."""
    page_size: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Scan `Limit` per page; unset lets DynamoDB fill 1 MB pages."""


class StreamSettings(BatchRetries):
    min_interval_seconds: Annotated[int, Field(ge=1, le=86_400)] = 1
    """Least seconds between the starts of two sensor ticks (the daemon starts one every 5 s at best;
    within a tick the sensor watches each table's stream for `watch_seconds`)."""
    max_records: Annotated[int, Field(ge=1, le=10_000_000)] = 100_000
    """Most stream records one change batch reads; a longer backlog becomes several batches."""
    page_limit: Annotated[int, Field(ge=1, le=1000)] = 1000
    """GetRecords `Limit` (DynamoDB allows at most 1000)."""
    sensor_running: bool = True
    """Whether the sensor starts switched on."""
    max_lag_seconds: Annotated[int, Field(ge=1)] = 900
    """The freshness check fails when the source has changes silver lacks and silver last merged longer ago."""


class DynamoDBFilter(_Model):
    """A DynamoDB table's row filter: a condition expression, as a Scan's FilterExpression takes it."""

    expression: str = Field(min_length=1)
    """E.g. `#s = :open AND total >= :least`."""
    names: dict[str, str] = {}
    """Attribute names for `#placeholders`, e.g. `{"#s": status}`."""
    values: dict[str, Any] = {}
    """Values for `:placeholders`: text, numbers, booleans, null, lists and mappings as written; a mapping
    of one DynamoDB type code for the others (`{SS: [a, b]}`, `{B: <base64>}`)."""

    @model_validator(mode="after")
    def _parses(self) -> DynamoDBFilter:
        from ingest.sources.dynamodb.conditions import ConditionError, condition

        try:
            condition(self.model_dump())
        except ConditionError as exc:
            raise ValueError(f"{self.expression!r}: {exc}. Fix: correct the expression, names or values") from None
        return self


DYNAMODB_TABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{2,62}$")


class DynamoDBSource(_Model):
    kind: Literal["dynamodb"]
    """The source's kind."""
    region: str = "us-east-1"
    """AWS region of the tables."""
    endpoint_url: str | None = None
    """A local or private endpoint (e.g. http://127.0.0.1:8000); unset means AWS's own."""
    access_key_id_env: str | None = None
    """Environment variable holding the access key id; unset uses boto3's default chain."""
    secret_access_key_env: str | None = None
    """Environment variable holding the secret access key; unset uses boto3's default chain."""
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    """Attempts per request in botocore's standard retry mode (throttling, 5xx, timeouts)."""
    tables: list[str] = Field(min_length=1)
    """DynamoDB table names; each needs a stream with NEW_IMAGE or NEW_AND_OLD_IMAGES."""
    attributes: dict[str, dict[str, str]] = {}
    """Declared attribute types by table, e.g. `{orders: {total: decimal(12,2), tags: array<string>}}`."""
    history: list[str] = []
    """Tables that also keep an SCD2 history: a `<source>/<table>/history` asset with one row per version
    of an item (see ingest/lake/history.py)."""
    deletion_vectors: list[str] = []
    """Tables whose silver writes Delta deletion vectors (see TableSelection.deletion_vectors)."""
    without_change_feed: list[str] = []
    """Tables whose silver and history do not record Delta's change data feed (see
    TableSelection.without_change_feed)."""
    transform: dict[str, dict[str, Transform]] = {}
    """Attributes hashed, masked, truncated or nulled before anything is written (in their columns and in
    `_item`), by table and attribute: `{carts: {email: {hash: {salt_env: PII_SALT}}}}` (see
    TableSelection.columns)."""
    where: dict[str, DynamoDBFilter] = {}
    """Row filters by table: a condition expression (`{carts: {expression: "#s = :open", names: {"#s":
    status}, values: {":open": open}}}`). Only items it holds for land: the snapshot's Scan filters with
    it, and each stream record's images are judged by it with DynamoDB's rules
    (ingest/sources/dynamodb/conditions.py): an item an update moves out becomes a delete in silver, one it
    moves in an insert."""
    snapshot: ScanSettings = ScanSettings()
    """How the parallel Scan runs."""
    cdc: StreamSettings = StreamSettings()
    """How the sensor cuts each stream into change batches."""

    @field_validator("tables")
    @classmethod
    def _table_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not DYNAMODB_TABLE_RE.match(name):
                raise ValueError(f"table {name!r} must match {DYNAMODB_TABLE_RE.pattern} (it becomes an asset key)")
        if len(set(value)) != len(value):
            raise ValueError("a table is listed twice")
        return value

    def keeps_history(self, table: str) -> bool:
        return table in self.history

    def layout(self, table: str):
        """How the table's silver and history are written (ingest/lake/merge.py `Layout`)."""
        from ingest.lake.merge import Layout

        return Layout(change_feed=table not in self.without_change_feed,
                      deletion_vectors=table in self.deletion_vectors)

    def row_filter(self, table: str) -> dict[str, Any] | None:
        """The table's row filter as written ({expression, names, values}; ingest/sources/dynamodb/conditions.py
        parses it), or None."""
        spec = self.where.get(table)
        return spec.model_dump() if spec else None

    def transforms(self, table: str):
        """The table's attribute transforms, salts resolved (see TableSelection.transforms)."""
        return resolve_transforms(table, self.transform.get(table, {}), f"transform.{table}")

    @field_validator("access_key_id_env", "secret_access_key_env")
    @classmethod
    def _env_names(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _declared(self) -> DynamoDBSource:
        from ingest.sources.dynamodb.types import ITEM_COLUMN, parse_type

        for field in ("history", "deletion_vectors", "without_change_feed", "transform", "where"):
            for table in getattr(self, field):
                if table not in self.tables:
                    raise ValueError(f"{field}: {table!r} is not one of the source's tables {self.tables}")
        for table, attrs in self.attributes.items():
            if table not in self.tables:
                raise ValueError(f"attributes.{table}: not one of the source's tables {self.tables}")
            for attr, text in attrs.items():
                if attr == ITEM_COLUMN or attr.startswith("_"):
                    raise ValueError(f"attributes.{table}.{attr}: names starting with '_' are the lake's own")
                try:
                    parse_type(text)
                except ValueError as exc:
                    raise ValueError(f"attributes.{table}.{attr}: {exc}") from None
        return self


class PostgresSource(_Model):
    kind: Literal["postgres"]
    """The source's kind: PostgreSQL 10 or later through logical replication (pgoutput)."""
    host: str
    """Server host name or address."""
    port: Annotated[int, Field(ge=1, le=65535)] = 5432
    """Server TCP port."""
    user: str
    """The ingest user: REPLICATION (slots) and SELECT on the tables are enough."""
    password_env: str
    """Name of the environment variable that holds the password (never the password itself)."""
    database: str
    """The database the tables live in (a slot decodes one database)."""
    db_schema: str = Field("public", alias="schema", pattern=r"^[A-Za-z_][A-Za-z0-9_$]*$")
    """The schema the tables live in."""
    publication: str = Field(pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    """The publication whose tables the slot streams: create it with CREATE PUBLICATION ... FOR TABLE ..."""
    slot: str | None = Field(None, pattern=r"^[a-z0-9_]{1,50}$")
    """The source's logical replication slot (default `ingest_<source>`), created by the first snapshot.
    The server keeps WAL until the slot is confirmed, which happens only after the lake logged the batch."""
    tables: TableSelection
    """Which tables land in the lake (names without the schema). `history` is not available for this kind yet."""
    snapshot: SnapshotSettings = SnapshotSettings()
    """Default snapshot settings for every table of the source."""
    cdc: PostgresCdcSettings = PostgresCdcSettings()
    """How often the sensor polls the WAL head, and which batches executors read (`max_batch_files` does
    not apply)."""
    connect_timeout: Annotated[int, Field(ge=1, le=600)] = 10
    """Seconds to wait for a connection before failing."""

    _env_name = field_validator("password_env")(MySQLSource._env_name.__func__)

    @model_validator(mode="after")
    def _no_history(self) -> PostgresSource:
        if self.tables.history:
            raise ValueError("tables.history: SCD2 history is not available for postgres sources yet (a TOASTed value "
                             "an update did not send would be NULL in a version). Remove it")
        for table, selection in self.tables.columns.items():
            if selection.exclude:  # never applied on this kind: say so rather than land the column
                raise ValueError(f"tables.columns.{table}.exclude: leaving columns out is not available for postgres "
                                 f"sources yet. Fix: remove it, and keep a column's values out with "
                                 f"tables.columns.{table}.transform: {{<column>: null}}")
        return self

    def slot_name(self, source: str) -> str:
        return self.slot or f"ingest_{source.lower()}"

    def qualified(self, table: str) -> str:
        return f"{self.db_schema}.{table}"

    def snapshot_settings(self, table: str) -> SnapshotSettings:
        return self.tables.overrides.get(table, self.snapshot)

    def keeps_history(self, table: str) -> bool:
        return False

    def layout(self, table: str):
        return self.tables.layout(table)

    def transforms(self, table: str):
        return self.tables.transforms(table)


def _source_kind(value: object) -> str:
    if isinstance(value, dict):
        return value.get("kind", "mysql")
    return getattr(value, "kind", "mysql")


Source = Annotated[
    Annotated[MySQLSource, Tag("mysql")] | Annotated[DynamoDBSource, Tag("dynamodb")]
    | Annotated[PostgresSource, Tag("postgres")],
    Discriminator(_source_kind, custom_error_type="source_kind",
                  custom_error_message="kind must be mysql, dynamodb or postgres"),
]


class DbtSettings(_Model):
    project_dir: Path = Path("dbt_project")
    """The dbt project whose models read the silver tables (relative to the sources file's folder)."""


class SparkSettings(_Model):
    remote: Annotated[str, Field(pattern=r"^sc://[^/\s]+")] | None = None
    """A running Spark Connect server every run uses (`sc://host:15002`); INGEST_SPARK_REMOTE overrides it.
    Unset: the embedded local server, started on first use."""


class Scheduled(_Model):
    running: bool = True
    """Whether the schedule starts switched on."""

    @field_validator("cron", check_fields=False)
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        from dagster._utils.schedules import is_valid_cron_string  # what the schedule will accept

        if value is not None and not is_valid_cron_string(value):
            raise ValueError(f"{value!r} is not a cron schedule. Fix: five fields such as '0 4 * * *', or null")
        return value


class MaintenanceSettings(Scheduled):
    cron: str | None = "30 3 * * *"
    """When the `lake_maintenance` schedule runs (compaction, vacuum, retention on every lake table);
    null: no schedule (the job still runs by hand)."""
    txn_retention_days: Annotated[int, Field(ge=7, le=3650)] = 30
    """How long Delta keeps a batch's idempotent txn id (and the log its commit metadata is in). At least 7:
    bronze checks the `_pos` it holds for changes older than that (lake/bronze.py, REPLAY_CHECK_AGE)."""
    vacuum_retain_hours: Annotated[int, Field(ge=0)] = 168
    """What VACUUM keeps of files no version newer than that many hours uses (time travel that far back).
    Below 168 (Delta's safety floor) readers and writers older than that can fail."""


class ReconcileSettings(Scheduled):
    cron: str | None = "0 4 * * *"
    """When the `reconcile_silver` schedule runs every silver table's `reconciliation` check (a full read
    of each source table: MySQL, PostgreSQL and DynamoDB); null: no schedule (run the job or a check by
    hand)."""


class SourcesConfig(_Model):
    sources: dict[str, Source]
    """Sources by name. The name prefixes asset keys and lake paths."""
    spark: SparkSettings | None = None
    """Where Spark runs (see SparkSettings)."""
    dbt: DbtSettings | None = None
    """When set, the dbt project's models load as assets downstream of the silver tables they read."""
    maintenance: MaintenanceSettings = MaintenanceSettings()
    """Compaction, vacuum and retention of the lake's tables (see lake/maintenance.py)."""
    reconcile: ReconcileSettings = ReconcileSettings()
    """When silver is compared with its source (the `reconciliation` checks)."""
    python_assets: list[Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*$")]] = []
    """Python modules whose Dagster assets load next to the sources' (your code downstream of silver,
    e.g. ingest.localdev.downstream, which reads silver with Polars)."""
    path: Path | None = Field(default=None, exclude=True)
    """The file this was read from (for error messages)."""

    @model_validator(mode="after")
    def _names(self) -> SourcesConfig:
        for name in self.sources:
            if not NAME_RE.match(name):
                raise ValueError(f"source name {name!r} must match {NAME_RE.pattern} (it becomes an asset key)")
        # VACUUM must never remove a file a running batch still reads: files OPTIMIZE replaced are kept
        # vacuum_retain_hours, and run monitoring fails a batch run after max_run_seconds.
        longest = max(((s.cdc.max_run_seconds, n) for n, s in self.sources.items()), default=None)
        if longest and self.maintenance.vacuum_retain_hours * 3600 < longest[0]:
            raise ValueError(
                f"maintenance.vacuum_retain_hours ({self.maintenance.vacuum_retain_hours}) is shorter than "
                f"sources.{longest[1]}.cdc.max_run_seconds ({longest[0]} s): VACUUM could remove files a running "
                f"batch still reads. Fix: vacuum_retain_hours of at least {-(-longest[0] // 3600)}, or a shorter "
                "max_run_seconds")
        return self


_SECRET_KEYS = {"password", "passwd", "secret", "aws_secret_access_key", "aws_session_token"}

_FIX_BY_ERROR = {
    "source_kind": "set kind to mysql, dynamodb or postgres",
    "extra_forbidden": "remove the key or check its spelling",
    "missing": "add the key",
}


def _where(loc: tuple) -> str:
    # a source's kind tag sits after its name in pydantic's location: not a key of the file
    if len(loc) > 2 and loc[0] == "sources" and loc[2] in ("mysql", "dynamodb", "postgres"):
        loc = loc[:2] + loc[3:]
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_config(path: str | Path) -> SourcesConfig:
    """Read and check a sources file; every problem raises ConfigError naming the file and key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such sources file. Fix: create it, or set INGEST_SOURCES to its path") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}). Fix: correct the syntax") from None
    return parse_config(raw, path)


def parse_config(raw: object, path: Path | str = "<sources>") -> SourcesConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping with a 'sources' key")
    for source_name, source in (raw.get("sources") or {}).items():
        if isinstance(source, dict):
            for key in _SECRET_KEYS & set(source):
                raise ConfigError(
                    f"{path}: sources.{source_name}.{key}: secrets are not read from the file. "
                    f"Fix: remove it, put the value in an environment variable and name that variable "
                    f"in sources.{source_name}.password_env"
                )
    try:
        return SourcesConfig.model_validate({**raw, "path": Path(path)})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            fix = _FIX_BY_ERROR.get(err["type"], "correct the value")
            problems.append(f"{path}: {_where(err['loc']) or '<top>'}: {err['msg']}. Fix: {fix}")
        raise ConfigError("\n".join(problems)) from None
