"""Whether Dagster's instance storage answers, said in words a user can act on (`ingest instance`).

The webserver and the daemon cannot work without the instance's storage (runs, event logs, sensor
state). When it is a PostgreSQL server that is down, Dagster's own error is a stack of SQLAlchemy and
psycopg2 frames; deploy/systemd's units run this check before each start (`ExecStartPre=`), so that the
journal names the server and the fix, and the unit starts again once the server is back.
"""

from __future__ import annotations

import logging
import os


class InstanceUnavailable(RuntimeError):
    """The Dagster instance does not load or its storage does not answer; the message names it and the fix."""


def storage_named(environ=os.environ) -> str:
    """The instance's storage as a user configured it, without credentials (pure): the PostgreSQL server
    deploy/dagster-postgres.yaml reads from the environment, else DAGSTER_HOME's dagster.yaml."""
    home = environ.get("DAGSTER_HOME", "(DAGSTER_HOME unset)")
    if environ.get("DAGSTER_PG_HOST"):
        return (f"PostgreSQL at {environ['DAGSTER_PG_HOST']}:{environ.get('DAGSTER_PG_PORT', '5432')}, database "
                f"{environ.get('DAGSTER_PG_DB', '?')} (DAGSTER_PG_*, {home}/dagster.yaml)")
    return f"the storage {home}/dagster.yaml names"


def reason(exc: BaseException) -> str:
    """The first line of the innermost error's message, the database driver's own where SQLAlchemy wrapped
    it (pure): dagster-postgres's says only that it retried, and SQLAlchemy's adds the statement and its
    parameters, which are not ours to print."""
    while (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {text[0].strip()}" if text else type(inner).__name__


def check_instance() -> str:
    """Open the instance and ask its storage one question; where it is, or InstanceUnavailable."""
    from dagster import DagsterInstance

    where = storage_named()
    fix = ("Fix: start it, or correct DAGSTER_PG_HOST, DAGSTER_PG_PORT, DAGSTER_PG_DB, DAGSTER_PG_USER and "
           "DAGSTER_PG_PASSWORD (deploy/ingest.env); what it holds is kept, and the webserver and daemon start "
           "once it answers" if "PostgreSQL" in where else
           "Fix: correct DAGSTER_HOME or its dagster.yaml (deploy/dagster.yaml is the shipped one)")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # dagster-postgres warns on the root logger at each of its retries: said once below
    try:
        with DagsterInstance.get() as instance:
            instance.get_runs_count()
    except Exception as exc:
        raise InstanceUnavailable(f"the Dagster instance's storage ({where}) does not answer: {reason(exc)}. "
                                  f"{fix}") from None
    finally:
        root.setLevel(level)
    return where
