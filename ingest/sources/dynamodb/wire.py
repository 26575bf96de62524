"""Scan and GetRecords pages over DynamoDB's JSON protocol, parsed by `json.loads`.

botocore turns a response into Python by walking the operation's shape model, one attribute
value at a time, in Python; for a page of items that is most of a Scan's or GetRecords' cost on
the client. The two calls that carry items are sent here as botocore sends them (the client's
endpoint, its credentials, botocore's SigV4 signer and HTTP session, the response's CRC32 checked)
and their answers parsed by the C JSON parser. Every other call is the boto3 client's own.

What differs from boto3's answer: items stay in DynamoDB's JSON form with binary values as base64
text, which `deserialize.from_item` reads as it reads boto3's bytes; `ApproximateCreationDateTime`
stays epoch seconds. A failed call raises botocore's `ClientError` with the service's error code,
so retries (`client.call`) and the named errors (a trimmed shard, an expired iterator) work as they
do with the boto3 client.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

TARGET_PREFIX = {"dynamodb": "DynamoDB_20120810", "dynamodbstreams": "DynamoDBStreams_20120810"}
SIGNING_NAME = "dynamodb"
"""DynamoDB Streams signs as DynamoDB."""
CRC_MISMATCH = "CRC32CheckFailed"
"""The code of an answer whose body does not match its x-amz-crc32 header (botocore retries those)."""


def error_code_of(status: int, body: bytes) -> tuple[str, str]:
    """(code, message) of a failed call's answer (pure): the service's `__type` after its `#`, or the
    HTTP status when the body is not the service's JSON (a proxy's 502 page)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return str(status), body[:200].decode("utf-8", "replace")
    if not isinstance(parsed, dict) or "__type" not in parsed:
        return str(status), str(parsed)[:200]
    return str(parsed["__type"]).rsplit("#", 1)[-1], str(parsed.get("message") or parsed.get("Message") or "")


def crc32_matches(headers: Any, body: bytes) -> bool:
    """Whether the body matches DynamoDB's x-amz-crc32 header; an answer without one matches (pure)."""
    expected = headers.get("x-amz-crc32")
    return expected is None or int(expected) == zlib.crc32(body) & 0xFFFFFFFF


class JsonPages:
    """A boto3 `dynamodb` or `dynamodbstreams` client whose `scan` and `get_records` go over the JSON
    protocol directly (see the module's docstring); every other attribute is the client's."""

    def __init__(self, client: Any, credentials: Any, service: str):
        self._client = client
        self._credentials = credentials
        self._prefix = TARGET_PREFIX[service]
        # The client's own HTTP session: its pool, TLS settings, proxies and socket options. A session of
        # our own lacked botocore's TCP_NODELAY, and Nagle's algorithm held each request's body until the
        # server's delayed ACK: 40 ms more per call, most of a GetRecords page's time on DynamoDB Local.
        self._http = client._endpoint.http_session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def scan(self, **kwargs: Any) -> dict[str, Any]:
        return self._post("Scan", kwargs)

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        return self._post("GetRecords", kwargs)

    def _post(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.exceptions import ClientError

        if self._credentials is None:
            from botocore.exceptions import NoCredentialsError

            raise NoCredentialsError()
        meta = self._client.meta
        request = AWSRequest(method="POST", url=meta.endpoint_url, data=json.dumps(params).encode(), headers={
            "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"{self._prefix}.{operation}"})
        SigV4Auth(self._credentials, SIGNING_NAME, meta.region_name).add_auth(request)
        response = self._http.send(request.prepare())
        body = response.content
        if response.status_code == 200 and not crc32_matches(response.headers, body):
            code, message = CRC_MISMATCH, "the answer's body does not match its x-amz-crc32 header"
        elif response.status_code == 200:
            return json.loads(body)
        else:
            code, message = error_code_of(response.status_code, body)
        raise ClientError({"Error": {"Code": code, "Message": message},
                           "ResponseMetadata": {"HTTPStatusCode": response.status_code}}, operation)
