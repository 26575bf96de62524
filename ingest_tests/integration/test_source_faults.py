"""A DynamoDB endpoint that goes away: retried within bounds, then a clear error; a restart in between is survived."""

import threading
import time

import boto3
import pytest

from ingest.localdev.moto import MotoServer
from ingest.sources.dynamodb.client import ClientSettings, call
from ingest.sources.dynamodb.errors import SourceUnavailable
from ingest_tests.conftest import free_port


def client(port: int):
    return ClientSettings("us-east-1", f"http://127.0.0.1:{port}", "local", "local", max_attempts=1).dynamodb()


def test_an_endpoint_that_stays_down_fails_clearly_after_the_retries():
    port = free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(SourceUnavailable) as exc:
        call(client(port).list_tables, "ListTables", attempts=3, base_delay=0.05)
    assert "still failing after 3 attempts" in str(exc.value) and "Fix:" in str(exc.value)
    assert time.monotonic() - started < 30


def test_a_restart_within_the_retry_window_is_survived():
    port = free_port()
    server = MotoServer(port).start()
    try:
        boto3.client("dynamodb", endpoint_url=server.endpoint_url, region_name="us-east-1",
                     aws_access_key_id="local", aws_secret_access_key="local").list_tables()
        server.stop()
        restarted = threading.Timer(1.0, server.start)
        restarted.start()
        result = call(client(port).list_tables, "ListTables", attempts=8, base_delay=0.3)
        restarted.join()
        assert result["TableNames"] == []
    finally:
        server.stop()


def test_http_500_answers_are_retried_and_a_client_error_is_not():
    from botocore.exceptions import ClientError

    answers = iter([500, 503, 200])
    seen = []

    def flaky(**kwargs):
        status = next(answers)
        seen.append(status)
        if status != 200:
            raise ClientError({"Error": {"Code": str(status), "Message": "Internal Server Error"},
                               "ResponseMetadata": {"HTTPStatusCode": status}}, "Scan")
        return {"ok": True}

    assert call(flaky, "Scan", sleep=lambda s: None) == {"ok": True} and seen == [500, 503, 200]
    with pytest.raises(ClientError):
        call(lambda: (_ for _ in ()).throw(ClientError({"Error": {"Code": "ValidationException"}}, "Scan")), "Scan",
             sleep=lambda s: None)
