"""The Spark session every run, check, CLI command, benchmark and test uses: a Spark Connect client.

See connect.py for where the server comes from (a configured `sc://` URL, else the
embedded local server, started on first use and shared by every later process).
"""

from __future__ import annotations

from collections.abc import Mapping

from ingest.lake.connect import MissingJarsError, SparkUnavailable, connect
from ingest.lake.connect import jars as delta_jars

__all__ = ["MissingJarsError", "SparkUnavailable", "delta_jars", "spark_session"]


def spark_session(remote: str | None = None, server_conf: Mapping[str, str] | None = None):
    """A Connect session to `remote` (or INGEST_SPARK_REMOTE), else to the local server. `server_conf`
    goes on the local server's command line when this call starts it; its Hadoop settings
    (`spark.hadoop.*`, e.g. S3A's) are also set on this session, since a server that is already up
    (or remote) did not start with them: Spark hands a session's settings to the file systems it opens."""
    session = connect(remote, dict(server_conf or {}))
    for key, value in (server_conf or {}).items():
        if key.startswith("spark.hadoop."):
            session.conf.set(key[len("spark.hadoop."):], value)
    return session
