"""boto3 clients for DynamoDB and DynamoDB Streams, and retries of transient errors.

`ClientSettings` is the plain, picklable form of the Dagster resource
(`ingest.defs.resources.DynamoDBResource`) that Spark executors rebuild
clients from. botocore retries each request itself (standard mode,
`max_attempts`); `call` adds a bounded outer retry for the listed transient
errors only, so a moto or AWS endpoint that restarts or answers 500 for a
while is survived, and anything else is raised at once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ingest.retry import retrying
from ingest.sources.dynamodb.errors import SourceUnavailable

TRANSIENT_CODES = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "LimitExceededException", "InternalServerError", "InternalFailure", "ServiceUnavailable",
    "500", "502", "503", "504", "CRC32CheckFailed",
})


@dataclass(frozen=True)
class ClientSettings:
    region: str
    endpoint_url: str | None
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None = None
    max_attempts: int = 5

    def _client(self, service: str):
        return _client(self, service)

    def _new_client(self, service: str):
        import boto3
        from botocore.config import Config

        from ingest.sources.dynamodb.wire import JsonPages

        session = boto3.session.Session(
            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token, region_name=self.region)
        # botocore's standard retry mode (throttling and 5xx, with backoff), as dagster-aws's resources use
        client = session.client(service, endpoint_url=self.endpoint_url,
                                config=Config(retries={"max_attempts": self.max_attempts, "mode": "standard"}))
        return JsonPages(client, session.get_credentials(), service)

    def resolved(self) -> ClientSettings:
        """With the driver's credentials filled in from boto3's default chain, so that executors
        (whose environment may predate them) use the same ones."""
        if self.access_key_id:
            return self
        import boto3

        found = boto3.session.Session().get_credentials()
        if found is None:
            return self
        frozen = found.get_frozen_credentials()
        return ClientSettings(self.region, self.endpoint_url, frozen.access_key, frozen.secret_key, frozen.token,
                              self.max_attempts)

    def dynamodb(self):
        return self._client("dynamodb")

    def streams(self):
        return self._client("dynamodbstreams")

    def __repr__(self) -> str:  # never print the secret
        return f"ClientSettings(region={self.region!r}, endpoint_url={self.endpoint_url!r})"


@functools.lru_cache(maxsize=32)
def _client(settings: ClientSettings, service: str):
    """One client per settings and service in a process: botocore loads the service's model for every new
    client (a few tenths of a second), which a Scan segment or a sensor tick paid each time. Clients are
    safe to share between threads."""
    return settings._new_client(service)


class StreamsApi(Protocol):
    """The part of boto3's `dynamodbstreams` client the reader uses (a recorded one stands in for tests)."""

    def describe_stream(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_records(self, **kwargs: Any) -> dict[str, Any]: ...


def error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def is_transient(exc: BaseException) -> bool:
    from botocore.exceptions import ConnectionError as BotoConnectionError, HTTPClientError

    if isinstance(exc, (BotoConnectionError, HTTPClientError)):  # timeouts, refused, reset
        return True
    return error_code(exc) in TRANSIENT_CODES


def call(fn: Callable[..., Any], what: str, *, attempts: int = 6, base_delay: float = 0.2,
         sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> Any:
    """`fn(**kwargs)`, retrying the transient errors with capped exponential backoff and jitter."""
    def give_up(exc: BaseException, tries: int) -> SourceUnavailable:
        return SourceUnavailable(f"{what}: still failing after {tries} attempts ({error_code(exc) or type(exc).__name__}: "
                                 f"{exc}). Fix: check the endpoint and its throttling; the next run resumes from "
                                 "the last committed position")

    return retrying(lambda: fn(**kwargs), is_transient, give_up, attempts=attempts, base_delay=base_delay,
                    sleep=sleep)


def client_settings(source) -> ClientSettings:
    """Settings of a DynamoDB source of the sources file, secrets read from the environment
    named by the source; unset names leave boto3's default credential chain in charge."""
    from ingest.config import secret

    def credential(env: str | None) -> str | None:
        return None if env is None else secret(env, f"AWS credentials of the DynamoDB source in {source.region}")

    return ClientSettings(source.region, source.endpoint_url, credential(source.access_key_id_env),
                          credential(source.secret_access_key_env), None, source.max_attempts)
