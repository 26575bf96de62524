"""Bounded retries of transient errors, and which MySQL errors count as transient."""

import pytest
from botocore.exceptions import ClientError

from ingest.retry import retrying
from ingest.sources.dynamodb.client import call


def test_mysql_connection_errors_are_transient_and_others_are_not():
    import pymysql

    from ingest.sources.mysql.errors import SourceUnreachable, is_transient

    assert is_transient(pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"))
    assert is_transient(SourceUnreachable("refused", code=2003))
    assert not is_transient(SourceUnreachable("denied", code=1045))
    assert not is_transient(pymysql.err.OperationalError(1236, "purged"))
    assert not is_transient(ValueError("x"))
    # as a Spark job reports a chunk read that failed in an executor
    spark_text = ("Job aborted due to stage failure: ... org.apache.spark.api.python.PythonException: Traceback "
                  "(most recent call last): ... pymysql.err.OperationalError: (2013, 'Lost connection to MySQL "
                  "server during query')")
    assert is_transient(RuntimeError(spark_text))
    assert not is_transient(RuntimeError(spark_text.replace("2013", "1054")))


def test_retrying_stops_at_the_bound_and_raises_the_sources_own_error():
    calls = []

    def flaky():
        calls.append(1)
        raise ConnectionError("down")

    with pytest.raises(RuntimeError, match="gave up after 3") as exc:
        retrying(flaky, lambda e: isinstance(e, ConnectionError), lambda e, n: RuntimeError(f"gave up after {n}"),
                 attempts=3, sleep=lambda s: None)
    assert len(calls) == 3 and isinstance(exc.value.__cause__, ConnectionError)
    results = iter([ConnectionError("down"), "ok"])

    def once_down():
        value = next(results)
        if isinstance(value, Exception):
            raise value
        return value

    assert retrying(once_down, lambda e: isinstance(e, ConnectionError), lambda e, n: e, sleep=lambda s: None) == "ok"


def test_http_500_answers_are_retried_and_a_client_error_is_not():
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


def test_delta_commit_races_are_write_conflicts_and_other_errors_are_not():
    from ingest.lake.write import is_write_conflict

    assert is_write_conflict(RuntimeError("[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added"))
    assert is_write_conflict(RuntimeError("io.delta.exceptions.ProtocolChangedException: [DELTA_PROTOCOL_CHANGED] "
                                          "The protocol version of the Delta table has been changed"))
    assert not is_write_conflict(RuntimeError("[DELTA_MISSING_COLUMN] Cannot find id in table columns"))


def test_a_run_worker_identity_tells_a_dead_process_and_a_reused_pid():
    import socket
    import subprocess

    from ingest.localdev.processes import process_alive, process_identity

    me = process_identity()
    assert process_alive(me) is True
    child = subprocess.Popen(["sleep", "30"])
    identity = process_identity(child.pid)
    assert process_alive(identity) is True
    child.kill()
    child.wait()
    assert process_alive(identity) is False
    host, pid, _ = me.rsplit(":", 2)
    assert process_alive(f"{host}:{pid}:1") is False  # same PID, another start time: a reused PID
    assert process_alive(f"not-{socket.gethostname()}:{pid}:") is None  # another host: cannot tell
