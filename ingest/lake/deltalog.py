"""Reading our commits straight from a Delta table's `_delta_log`, without Spark: the one reader of what a
table has committed (commits, last_commit, latest, table_version).

The sensors decide where the next change batch starts from what the lake has
committed (DESIGN principle 1), every few seconds, in the daemon's process:
starting a JVM there for `DESCRIBE HISTORY` would cost seconds and hundreds of
MiB. A commit's `commitInfo` (with our `userMetadata`) is a line of its
`_delta_log/<version>.json` file, which Delta keeps for the log retention
(30 days by default) even after a checkpoint: the newest commits, the ones
asked about, are always there as JSON.

Local folders and S3 (`s3://` or `s3a://`, through boto3 with the lake's S3
settings from the environment) are read the same way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from itertools import islice
from dataclasses import dataclass
from typing import Any, Protocol

from ingest.lake.commits import CommitInfo, decode_user_metadata

LOG_DIR = "_delta_log"


def version_file(version: int) -> str:
    return f"{version:020d}.json"


class LogStore(Protocol):
    def read(self, name: str) -> bytes | None:
        """A file of the log folder, None when it does not exist."""

    def newest_version(self) -> int | None:
        """The newest commit version, None when the table has no log."""

    def tail(self, relative: str, size: int) -> bytes | None:
        """The last `size` bytes of the table's data file `relative` (as an `add` action names it), None
        when it does not exist."""


@dataclass(frozen=True)
class LocalLogStore:
    folder: str

    def read(self, name: str) -> bytes | None:
        try:
            with open(os.path.join(self.folder, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def tail(self, relative: str, size: int) -> bytes | None:
        """The last `size` bytes (the whole file when it is smaller) of the table's file `relative` (a
        path in the table's folder, as an `add` action names it), None when it does not exist."""
        try:
            with open(os.path.join(os.path.dirname(self.folder), relative), "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - size))
                return f.read()
        except FileNotFoundError:
            return None

    def newest_version(self) -> int | None:
        # From the last checkpoint on, probe files one by one instead of listing a folder that
        # holds a file per commit for the whole log retention.
        start = _checkpoint_version(self.read("_last_checkpoint"))
        if start is None:
            if not os.path.isdir(self.folder):
                return None
            found = [int(n[:20]) for n in os.listdir(self.folder) if n.endswith(".json") and n[:20].isdigit()]
            if not found:
                return None
            start = max(found)
        version = start
        while os.path.exists(os.path.join(self.folder, version_file(version + 1))):
            version += 1
        return version if os.path.exists(os.path.join(self.folder, version_file(version))) else None


class LakeUnavailable(RuntimeError):
    """The lake's storage refused or did not answer: nothing was read or written."""


# S3 error codes that mean the lake's credentials may not do this, not that an object is missing
REFUSED_CODES = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                           "InvalidToken", "AllAccessDisabled", "AccountProblem", "403"})


def without_userinfo(url: str) -> str:
    """`url` without a `user:password@` part, which no message of ours may print (pure)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def s3_refusal(exc: BaseException, bucket: str, key: str, endpoint: str | None) -> LakeUnavailable | None:
    """The error a user can act on for botocore's `exc` on `s3://bucket/key`, naming the part and the
    fix, or None when `exc` is not one of storage refusing or not answering (pure)."""
    from botocore.exceptions import ClientError, ConnectionError as BotoConnectionError, NoCredentialsError

    where = f"the lake's S3 endpoint {without_userinfo(endpoint) if endpoint else '(AWS default)'}"
    if isinstance(exc, BotoConnectionError):
        return LakeUnavailable(
            f"{where} does not answer ({type(exc).__name__}) reading s3://{bucket}/{key}. Nothing was written. Fix: "
            "start the S3 server, or correct INGEST_S3_ENDPOINT_URL; the run can then be retried and goes on from "
            "the lake's last commit")
    if isinstance(exc, NoCredentialsError):
        return LakeUnavailable(
            f"{where}: no AWS credentials to read s3://{bucket}/{key}. Nothing was written. Fix: set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile or instance role) for the lake")
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            return LakeUnavailable(
                f"{where} has no bucket {bucket!r} (the lake root names it). Nothing was written. Fix: create the "
                "bucket, or correct INGEST_LAKE_ROOT")
        if code in REFUSED_CODES:
            return LakeUnavailable(
                f"{where} refused to read s3://{bucket}/{key} ({code}). Nothing was written. Fix: give the lake's "
                f"credentials read, write, list and delete on bucket {bucket!r}, or correct them")
    return None


@dataclass(frozen=True)
class S3LogStore:
    bucket: str
    prefix: str
    """`<table key>/_delta_log/`"""
    client: Any

    def read(self, name: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        except Exception as exc:
            self._refused(exc, self.prefix + name)
            raise

    def tail(self, relative: str, size: int) -> bytes | None:
        key = self.prefix.removesuffix(f"{LOG_DIR}/") + relative
        try:  # a suffix range: S3 answers with the whole object when it is smaller
            return self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=-{size}")["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        except Exception as exc:
            self._refused(exc, key)
            raise

    def newest_version(self) -> int | None:
        start = _checkpoint_version(self.read("_last_checkpoint"))
        # listed from the last checkpoint on: the folder holds a file per commit for the log retention
        after = {"StartAfter": self.prefix + f"{start:020d}"} if start is not None else {}
        newest = None
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=self.prefix, **after):
                for item in page.get("Contents", []):
                    name = item["Key"][len(self.prefix):]
                    if name.endswith(".json") and name[:20].isdigit():
                        newest = max(newest or 0, int(name[:20]))
        except Exception as exc:
            self._refused(exc, self.prefix)
            raise
        return newest if newest is not None else start

    def _refused(self, exc: BaseException, key: str) -> None:
        """Raise the refusal `exc` is, if it is one: a complete statement of it, without botocore's chain."""
        refusal = s3_refusal(exc, self.bucket, key, self.client.meta.endpoint_url)
        if refusal is not None:
            raise refusal from None


def _checkpoint_version(data: bytes | None) -> int | None:
    if not data:
        return None
    try:
        return int(json.loads(data)["version"])
    except (ValueError, KeyError, TypeError):
        return None


def s3_client():
    """boto3's S3 client with the lake's settings (INGEST_S3_ENDPOINT_URL, AWS_REGION, the AWS variables)."""
    import boto3

    return boto3.client("s3", endpoint_url=os.environ.get("INGEST_S3_ENDPOINT_URL") or None,
                        region_name=os.environ.get("AWS_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1")))


def log_store(table_path: str, client: Any = None) -> LogStore:
    """The `_delta_log` of the table at `table_path` (a folder, `s3://` or `s3a://`)."""
    for scheme in ("s3://", "s3a://"):
        if table_path.startswith(scheme):
            bucket, _, key = table_path[len(scheme):].partition("/")
            return S3LogStore(bucket, f"{key.rstrip('/')}/{LOG_DIR}/", client or s3_client())
    if "://" in table_path and not table_path.startswith("file://"):
        raise ValueError(f"cannot read the Delta log of {table_path!r}: only local folders and S3 are supported")
    return LocalLogStore(os.path.join(table_path.removeprefix("file://"), LOG_DIR))


def parse_commit(version: int, data: bytes) -> CommitInfo | None:
    """Our commit in one `<version>.json` (None: somebody else's, e.g. OPTIMIZE, or no commitInfo)."""
    import datetime as dt

    for line in data.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        info = action.get("commitInfo")
        if info is None:
            continue
        meta = decode_user_metadata(info.get("userMetadata"))
        if meta is None:
            return None
        stamp = info.get("timestamp")
        # Delta's DESCRIBE HISTORY gives local naive times; so does this, for the same comparisons.
        when = dt.datetime.fromtimestamp(stamp / 1000) if stamp is not None else None
        return CommitInfo(version, info.get("operation", ""), meta,
                          {k: str(v) for k, v in (info.get("operationMetrics") or {}).items()}, when)
    return None


def head_commit(table_path: str, client: Any = None) -> tuple[int, dict[str, str]] | None:
    """The newest version and its operation metrics, whoever committed it (None: no table)."""
    store = log_store(table_path, client)
    newest = store.newest_version()
    if newest is None:
        return None
    for line in (store.read(version_file(newest)) or b"").splitlines():
        info = json.loads(line).get("commitInfo") if line.strip() else None
        if info is not None:
            return newest, {k: str(v) for k, v in (info.get("operationMetrics") or {}).items()}
    return newest, {}


def newest_checksum(table_path: str, client: Any = None) -> dict[str, Any] | None:
    """The checksum file Delta writes with each commit (`<version>.crc`) of the table's newest version:
    its size, files and metadata without a scan of the log or the table. None when there is no table,
    or its newest version has no checksum (a writer that does not write one)."""
    store = log_store(table_path, client)
    newest = store.newest_version()
    data = None if newest is None else store.read(f"{newest:020d}.crc")
    try:
        checksum = json.loads(data) if data else None
    except ValueError:
        return None
    return checksum if isinstance(checksum, dict) else None


def table_size(table_path: str, client: Any = None) -> tuple[int, int] | None:
    """(bytes, files) of the table's newest version (see `newest_checksum`), or None."""
    checksum = newest_checksum(table_path, client)
    try:
        return (int(checksum["tableSizeBytes"]), int(checksum["numFiles"])) if checksum else None
    except (KeyError, TypeError, ValueError):
        return None


def file_spread(checksum: dict[str, Any]) -> float | None:
    """How many files a checksum's table holds its bytes in, each file counted by its share of them
    (pure): the table's size over the byte-weighted mean file size, from `fileSizeHistogram` (each bin's
    files taken at their mean size), else the file count. A table of 11 files of 10 MB and 90 of 10 KB
    (what merges add between compactions) counts 11.1, not 101. None without either."""
    histogram = checksum.get("fileSizeHistogram")
    try:
        bins = [(int(n), int(b)) for n, b in zip(histogram["fileCounts"], histogram["totalBytes"]) if int(n) > 0]
        squares = sum(b * b / n for n, b in bins)
        if squares > 0:
            return sum(b for _, b in bins) ** 2 / squares
    except (KeyError, TypeError, ValueError):
        pass
    try:
        return float(checksum["numFiles"])
    except (KeyError, TypeError, ValueError):
        return None


def table_file_spread(table_path: str, client: Any = None) -> float | None:
    """`file_spread` of the table's newest version (see `newest_checksum`), or None."""
    checksum = newest_checksum(table_path, client)
    return file_spread(checksum) if checksum else None


def table_properties(table_path: str, client: Any = None) -> dict[str, str] | None:
    """The newest version's table properties (see `newest_checksum`), or None when it has no checksum."""
    checksum = newest_checksum(table_path, client)
    configuration = ((checksum or {}).get("metadata") or {}).get("configuration")
    return {str(k): str(v) for k, v in configuration.items()} if isinstance(configuration, dict) else None


def is_delta_table(table_path: str, client: Any = None) -> bool:
    return log_store(table_path, client).newest_version() is not None


def our_commits(table_path: str, client: Any = None) -> Iterator[CommitInfo]:
    """Our commits on the table, newest first, read lazily (nothing when there is no table)."""
    store = log_store(table_path, client)
    newest = store.newest_version()
    if newest is None:
        return
    for version in range(newest, -1, -1):
        data = store.read(version_file(version))
        if data is None:
            return  # older JSON files are past the log retention
        info = parse_commit(version, data)
        if info is not None:
            yield info


def added_files(table_path: str, version: int, client: Any = None) -> list[dict[str, Any]] | None:
    """The `add` actions of commit `version` (None when its JSON is past the log retention)."""
    data = log_store(table_path, client).read(version_file(version))
    if data is None:
        return None
    return [action["add"] for line in data.splitlines() if line.strip()
            for action in [json.loads(line)] if "add" in action]


def commits(path: str, limit: int | None = None) -> list[CommitInfo]:
    """Our commits on the table at `path`, newest first ([] if there is no table), among its newest
    `limit` commits of ours (all: None)."""
    return list(islice(our_commits(path), limit))


def newest_commit(path: str, where: Callable[[dict[str, Any]], bool]) -> CommitInfo | None:
    """The newest of our commits whose metadata satisfies `where`, read from the newest back: what a
    batch looks for (its own commit, the newest merge) is nearly always among the last few."""
    return next((info for info in our_commits(path) if where(info.metadata)), None)


def last_commit(path: str, **match: Any) -> CommitInfo | None:
    """The newest of our commits whose metadata has all of `match`, from the Delta log."""
    return newest_commit(path, lambda meta: all(meta.get(k) == v for k, v in match.items()))


def latest(path: str) -> tuple[int, dict[str, str]] | None:
    """Version and operation metrics of the table's newest commit, ours or not (None: no table)."""
    return head_commit(path)


def table_version(path: str) -> int | None:
    head = latest(path)
    return None if head is None else head[0]
