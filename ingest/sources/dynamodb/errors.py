"""Named errors of the DynamoDB source; each message names the table and the fix."""

from __future__ import annotations

from ingest.sources.dynamodb.positions import StreamGap

__all__ = ["DynamoDBSourceError", "StreamGap", "StreamSettingsError", "TableNotFound", "SourceUnavailable"]


class DynamoDBSourceError(RuntimeError):
    pass


class StreamSettingsError(DynamoDBSourceError):
    """The table has no stream, or one without new images."""


class TableNotFound(DynamoDBSourceError):
    pass


class SourceUnavailable(DynamoDBSourceError):
    """Transient errors went on past the retry budget."""


def resnapshot_fix(source: str, table: str) -> str:
    return (f"Fix: re-snapshot the table (materialize {source}/{table}/snapshot, or `ingest resnapshot {source} "
            f"{table}`); its change batches then continue from the new snapshot's stream positions")


def stream_replaced(source: str, table: str, now: str, was: str, where: str) -> StreamGap:
    """The table's stream is no longer the one `where` (the last batch, silver's last batch) ended on."""
    return StreamGap(
        f"source {source}, table {table}: the table's stream is now {now}, not {was} where {where} ended (the "
        f"stream was replaced: disabled and enabled again, or the table re-created); changes in between are "
        f"lost. {resnapshot_fix(source, table)}")
