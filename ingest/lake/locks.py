"""One writer per Delta table at a time on S3, with a lease lock in DynamoDB.

Why: Delta commits version N by creating `_delta_log/N.json` only if it does
not exist. HDFS and local disks do that atomically; S3 through S3A does not
(Delta's S3 log store is safe for one Spark driver only), so two runs (two
drivers) committing to one table at once can overwrite each other's commit,
and a batch would be lost without an error. Delta's answer is its DynamoDB
log store (`io.delta:delta-storage-s3-dynamodb`), which is not on the Maven
Central this project fetches from. This is the equivalent at our level: every
write to a table (the IO manager's `write`, which covers each Delta commit of
the project) runs holding that table's lock, a DynamoDB item taken with a
conditional put. The holder renews its lease while it writes; a crashed
holder's lock is taken over once its lease expires.

Limit: the lease must outlive any stall of the holder (a renewal every
lease/3 seconds). A process frozen longer than the lease (default 120 s)
could commit after another took over; that is the same window Delta's own
DynamoDB log store leaves to its TTL.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

KEY = "lock_key"


class LockTimeout(RuntimeError):
    pass


def ensure_table(dynamodb: Any, table: str) -> None:
    """Create the lock table (on demand billing) if it is missing."""
    try:
        dynamodb.describe_table(TableName=table)
        return
    except dynamodb.exceptions.ResourceNotFoundException:
        pass
    try:
        dynamodb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                              AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
                              KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}])
    except dynamodb.exceptions.ResourceInUseException:
        pass  # another process created it first
    dynamodb.get_waiter("table_exists").wait(TableName=table)


@contextmanager
def table_lock(dynamodb: Any, table: str, name: str, lease_seconds: float = 120.0,
               wait_seconds: float = 3600.0, poll_seconds: float = 1.0) -> Iterator[str]:
    """Hold the lock `name` (a Delta table's path) for the block; its owner id."""
    owner = uuid.uuid4().hex
    deadline = time.monotonic() + wait_seconds
    while not _try_take(dynamodb, table, name, owner, lease_seconds):
        if time.monotonic() > deadline:
            raise LockTimeout(f"waited {wait_seconds:.0f} s for the write lock of {name} (DynamoDB table {table}); "
                              f"another run is writing it. Fix: let it finish, or if it died, wait {lease_seconds:.0f} s "
                              "for its lease to lapse")
        time.sleep(poll_seconds)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(dynamodb, table, name, owner, lease_seconds, stop), daemon=True)
    renewer.start()
    try:
        yield owner
    finally:
        stop.set()
        renewer.join()
        try:
            dynamodb.delete_item(TableName=table, Key={KEY: {"S": name}}, ConditionExpression="holder = :me",
                                 ExpressionAttributeValues={":me": {"S": owner}})
        except dynamodb.exceptions.ConditionalCheckFailedException:
            pass  # our lease lapsed and someone took it: theirs now


def _try_take(dynamodb: Any, table: str, name: str, owner: str, lease_seconds: float) -> bool:
    now = time.time()
    try:
        dynamodb.put_item(
            TableName=table,
            Item={KEY: {"S": name}, "holder": {"S": owner}, "lease_until": {"N": str(now + lease_seconds)}},
            ConditionExpression=f"attribute_not_exists({KEY}) OR lease_until < :now",
            ExpressionAttributeValues={":now": {"N": str(now)}})
        return True
    except dynamodb.exceptions.ConditionalCheckFailedException:
        return False


def _renew(dynamodb: Any, table: str, name: str, owner: str, lease_seconds: float, stop: threading.Event) -> None:
    while not stop.wait(lease_seconds / 3):
        try:
            dynamodb.update_item(TableName=table, Key={KEY: {"S": name}}, UpdateExpression="SET lease_until = :t",
                                 ConditionExpression="holder = :me",
                                 ExpressionAttributeValues={":t": {"N": str(time.time() + lease_seconds)},
                                                            ":me": {"S": owner}})
        except Exception:  # noqa: BLE001 - a failed renewal is retried at the next tick
            continue
