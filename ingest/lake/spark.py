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
    """A Connect session to `remote` (or INGEST_SPARK_REMOTE), else to the local server; `server_conf`
    (e.g. S3A settings) is used only when this call starts the local server."""
    return connect(remote, dict(server_conf or {}))
