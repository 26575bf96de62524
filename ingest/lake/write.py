"""Delta writes that commit rows and their source position together, idempotently."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ingest.lake.commits import Txn, encode_user_metadata, latest, table_version

# txnAppId / txnVersion / userMetadata for MERGE go through session confs, which
# every thread of the session shares: one commit at a time per process.
_SESSION_CONF_LOCK = threading.Lock()

_TXN_CONFS = (
    "spark.databricks.delta.write.txnAppId",
    "spark.databricks.delta.write.txnVersion",
    "spark.databricks.delta.commitInfo.userMetadata",
)


@dataclass(frozen=True)
class WriteOutcome:
    version: int | None
    """Table version after the write."""
    committed: bool
    """False when Delta skipped the write because the txn was already committed."""
    rows: int = 0
    """Rows the commit wrote (0 when skipped)."""

    @classmethod
    def after(cls, spark, path: str, before: int | None) -> WriteOutcome:
        head = latest(spark, path)
        if head is None or head[0] == before:
            return cls(before, False, 0)
        return cls(head[0], True, int(head[1].get("numOutputRows", head[1].get("numTargetRowsInserted", 0))))


@contextmanager
def session_txn(spark, metadata: dict[str, Any], txn: Txn) -> Iterator[None]:
    values = (txn.app_id, str(txn.version), encode_user_metadata(metadata, txn))
    with _SESSION_CONF_LOCK:
        for key, value in zip(_TXN_CONFS, values):
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in _TXN_CONFS:
                spark.conf.unset(key)


def append(df, path: str, metadata: dict[str, Any], txn: Txn, overwrite: bool = False,
           overwrite_schema: bool = False, merge_schema: bool = False) -> WriteOutcome:
    """Append (or overwrite with) `df` in one commit that carries `metadata`.

    Safe to repeat: a second call with the same txn adds nothing.
    """
    spark = df.sparkSession
    before = table_version(spark, path)
    writer = (
        df.write.format("delta")
        .mode("overwrite" if overwrite else "append")
        .option("txnAppId", txn.app_id)
        .option("txnVersion", txn.version)
        .option("userMetadata", encode_user_metadata(metadata, txn))
    )
    if overwrite_schema:
        writer = writer.option("overwriteSchema", "true")
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.save(path)
    return WriteOutcome.after(spark, path, before)
