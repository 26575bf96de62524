"""`ingest check` for a MySQL/MariaDB source: what would stop it, found before anything runs.

Connection, binlog settings, grants, anonymous users that shadow the ingest user,
and per table: existence, primary key and column types. Every finding names the
thing and the fix. The parsing is pure; `check_source` does the I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ingest.sources.findings import FAIL, OK, WARN, Finding, failed  # noqa: F401 (failed: re-exported)

_GRANT = re.compile(r"^GRANT (.+?) ON (\S+) TO ", re.IGNORECASE)


def _unquote(name: str) -> str:
    return name.replace("`", "").replace('"', "")


def missing_grants(grant_lines: Iterable[str], database: str) -> list[str]:
    """The privileges the ingest user lacks, from its SHOW GRANTS lines (pure).

    Needs SELECT on the database (or on *.*), REPLICATION SLAVE to read the binlog, and REPLICATION
    CLIENT (MariaDB: BINLOG MONITOR) for SHOW MASTER STATUS; ALL PRIVILEGES and SUPER cover them."""
    global_privs: set[str] = set()
    db_privs: set[str] = set()
    for line in grant_lines:
        match = _GRANT.match(line.strip())
        if not match:
            continue
        privs = {p.strip().upper() for p in re.sub(r"\(.*?\)", "", match.group(1)).split(",")}
        scope = _unquote(match.group(2))
        if scope == "*.*":
            global_privs |= privs
        elif scope in (f"{database}.*",):
            db_privs |= privs
    everything = "ALL PRIVILEGES" in global_privs or "ALL" in global_privs
    missing = []
    if not (everything or "SELECT" in global_privs or {"SELECT", "ALL PRIVILEGES", "ALL"} & db_privs):
        missing.append(f"SELECT ON {database}.*")
    if not (everything or "REPLICATION SLAVE" in global_privs):
        missing.append("REPLICATION SLAVE ON *.*")
    if not (everything or {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"} & global_privs):
        missing.append("REPLICATION CLIENT (MariaDB: BINLOG MONITOR) ON *.*")
    return missing


def shadowing_anonymous(user: str, current_user: str, anonymous_hosts: Sequence[str]) -> str | None:
    """Why logins as `user` may land on an anonymous account, or None (pure).

    `current_user` is CURRENT_USER() of this session: `@localhost` means the server matched an
    anonymous user. Otherwise anonymous accounts that exist still shadow `user@'%'` for logins from
    their hosts (the more specific host wins)."""
    if current_user.split("@")[0] == "" and user:
        return (f"logins from here are matched to the anonymous account {current_user!r}, not to {user!r}: anonymous "
                f"users take precedence for logins from their host. Fix: DROP USER '{current_user.split('@')[0]}'"
                f"@'{current_user.split('@')[-1]}' (mariadb-install-db creates them)")
    if anonymous_hosts:
        drops = "; ".join(f"DROP USER ''@'{h}'" for h in anonymous_hosts)
        return (f"anonymous accounts exist for {', '.join(anonymous_hosts)}: a login as {user!r} from those hosts "
                f"is matched to them and fails with 'Access denied'. Fix: {drops}")
    return None


def anonymous_login(host: str, port: int, user: str) -> str | None:
    """After an 'Access denied': whether an anonymous account takes this host's logins (it then wins
    over `user`@'%' whatever the password), with the DROP USER that fixes it."""
    import pymysql

    # PyMySQL replaces an empty user name with the OS user's: set it after construction
    conn = pymysql.connect(host=host, port=port, user="-", password="", connect_timeout=5, defer_connect=True)
    conn.user = ""
    try:
        conn.connect()
    except pymysql.err.MySQLError:
        return None
    with conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        account = cur.fetchone()[0]
    return shadowing_anonymous(user, account, []) if account.startswith("@") else None


def column_findings(table: str, columns, excluded: Iterable[str]) -> list[Finding]:
    """Columns outside the type contract, each with the config line that leaves it out (pure)."""
    from ingest.sources.mysql.errors import UnsupportedColumnType
    from ingest.sources.mysql.types import column_type

    out = []
    for column in columns:
        if column.name in excluded:
            continue
        try:
            column_type(column, table)
        except UnsupportedColumnType as exc:
            out.append(Finding(FAIL, f"{table}.{column.name}", str(exc)))
    return out


def check_source(name: str, source, tables: Sequence[str]) -> list[Finding]:
    """Every finding for one MySQL source and its selected tables (connects to the server)."""
    import pymysql

    from ingest.config import MissingSecret
    from ingest.sources.mysql.binlog import REQUIRED_SETTINGS, binlog_expiry_seconds, wrong_binlog_settings
    from ingest.sources.mysql.errors import MySQLSourceError, NoPrimaryKey, TableNotFound
    from ingest.sources.mysql.schema import connection_params, describe_tables, list_tables
    from ingest.sources.mysql.types import MySQLColumn
    from ingest.transforms import TransformError
    from ingest.sources.mysql.filters import RowFilterError, check_filter, images_inside

    subject = f"source {name}"
    try:
        conn = connection_params(source).connect()
    except MissingSecret as exc:
        return [Finding(FAIL, subject, str(exc))]
    except MySQLSourceError as exc:
        message = str(exc)
        if getattr(exc, "code", None) == 1045:
            message += ". " + (anonymous_login(source.host, source.port, source.user) or (
                "If the user exists with this password, an anonymous account (''@'localhost', created by "
                "mariadb-install-db) may take precedence for logins from this host: DROP USER ''@'localhost'"))
        return [Finding(FAIL, subject, message)]
    findings: list[Finding] = []
    with conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION(), CURRENT_USER()")
        version, current = cur.fetchone()
        findings.append(Finding(OK, subject, f"connected to {source.host}:{source.port} ({version}) as {current}"))
        try:
            cur.execute("SELECT Host FROM mysql.user WHERE User = ''")
            anonymous = sorted(r[0] for r in cur.fetchall())
        except pymysql.err.MySQLError:
            anonymous = []  # no SELECT on mysql.user: CURRENT_USER() alone tells
        shadow = shadowing_anonymous(source.user, current, anonymous)
        if shadow:
            findings.append(Finding(WARN if current.split("@")[0] else FAIL, subject, shadow))

        bad = wrong_binlog_settings(conn)
        if bad:
            findings.append(Finding(FAIL, subject, "the binlog cannot feed CDC (" + ", ".join(
                f"{k}={v}" for k, v in bad.items()) + "). Fix: " + ", ".join(
                f"{k}={REQUIRED_SETTINGS[k]}" for k in bad) + " (--log-bin at startup; SET GLOBAL for the others)"))
        else:
            findings.append(Finding(OK, subject, "binlog: ROW format, FULL row image, FULL row metadata"))
        expiry = binlog_expiry_seconds(conn)
        findings.append(Finding(OK, subject, "binlog expiry: " + (
            "no expiry set (purged only by hand)" if not expiry else f"{expiry} s")))

        cur.execute("SHOW GRANTS")
        missing = missing_grants([r[0] for r in cur.fetchall()], source.database)
        if missing:
            findings.append(Finding(FAIL, subject, f"{current} lacks {', '.join(missing)}. Fix: GRANT "
                                    f"{', '.join(m.split(' ON ')[0].split(' (')[0] for m in missing)} ... TO {current} "
                                    "(SELECT on the database, the replication privileges on *.*)"))
        else:
            findings.append(Finding(OK, subject, "grants: SELECT, REPLICATION SLAVE, REPLICATION CLIENT"))

        existing = set(list_tables(conn, source.database))
        described = describe_tables(conn, source.database, [t for t in tables if t in existing],
                                    source.tables.excluded_columns)
        for table in tables:
            ref = f"{source.database}.{table}"
            if table not in existing:
                findings.append(Finding(FAIL, ref, f"table {ref} does not exist (or the ingest user cannot see it). "
                                                   "Fix: correct the name in tables.include, or grant SELECT on it"))
                continue
            excluded = source.tables.excluded_columns(table)
            schema = described[table]
            if isinstance(schema, (NoPrimaryKey, TableNotFound)):
                findings.append(Finding(FAIL, ref, str(schema)))
                continue
            if isinstance(schema, MySQLSourceError):  # a column type: listed column by column
                cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (source.database, table))
                columns = [MySQLColumn(r[0], r[1].lower(), r[2]) for r in cur.fetchall()]
                findings.extend(column_findings(table, columns, excluded))
                continue
            note = f", leaving out {', '.join(schema.excluded)}" if schema.excluded else ""
            try:  # what the snapshot and the batches check before reading the table
                transforms = source.transforms(table).check(schema.lake_columns(), schema.primary_key,
                                                            f"tables.columns.{table}.transform")
            except (TransformError, MissingSecret) as exc:
                findings.append(Finding(FAIL, ref, str(exc)))
                continue
            note += f", transforming {', '.join(transforms.by_column())}" if transforms else ""
            if row_filter := source.tables.row_filter(table):
                try:  # planned as the snapshot plans it, and judged as a batch judges a change (no image)
                    check_filter(conn, source.database, table, schema.columns, row_filter, schema.excluded)
                    images_inside(conn, source.database, table, schema.columns, row_filter, [])
                except RowFilterError as exc:
                    findings.append(Finding(FAIL, ref, str(exc)))
                    continue
                note += f", rows where {row_filter.where}"
            findings.append(Finding(OK, ref, f"{len(schema.columns)} columns, primary key "
                                             f"({', '.join(schema.primary_key)}){note}"))
    return findings
