"""The Spark that every run shares: a Spark Connect server, local by default or remote by config.

Why: a new JVM costs about 7 s and a cold Delta MERGE 10-15 s, and each
Dagster run is a new process. A long-lived server keeps the JVM, its class
loading and Delta's caches warm across runs, so a batch pays for its changes,
not for start-up (DESIGN, "Engine and scale").

Where the session comes from, first match wins:
  1. `INGEST_SPARK_REMOTE` or `spark.remote` in the sources file: `sc://host:port`,
     a server started by someone else (a cluster's driver with the same jars and
     this package installed for its Python workers). Nothing is started here.
  2. The embedded local server: started on first use with the jars in jvm/jars,
     its PID and port recorded in `<local state>/spark-connect/server.json`, and
     reused by every later run on this machine until `ingest spark stop`.

The project's session defaults (UTC, few shuffle partitions, Delta's SQL
extensions) go on the server's command line: a Connect client cannot set
static confs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ingest.localdev.processes import SHORT_LIVED_JIT, alive, free_port
from ingest.logfiles import LOG_BYTES, LOG_FILES, roll_over
from ingest.paths import local_dir

DRIVER_MEMORY = "2g"

# Every thread of the server (and of the executors it starts on a cluster) gets this much stack, not
# the JVM's 1 MiB. A merge that pushes its keys into the Parquet reader (merge.key_pushdown) hands each
# task a predicate one level deep per key, which the task deserializes recursively: on a fresh server,
# its code not yet compiled, 1,000 keys overflowed a 1 MiB stack in 2 of 9 first merges, and the
# StackOverflowError ends the server's SparkContext. A stack is reserved, not resident, until used.
THREAD_STACK_MIB = 4
THREAD_STACK_OPTION = f"-Xss{THREAD_STACK_MIB}m"

# The server's heap is sized by these settings, not by how long it has been busy. G1's defaults size
# the young generation, and grow the heap, to the allocation rate, which follows the rows a run reads:
# a 10M-row snapshot left the JVM 30-60 % larger than a 1M-row one, while what it held at the end was
# the same (about 90 MiB after a full GC). Measured on that snapshot (the README's former "Snapshot
# memory" section, in git):
# - the whole heap reserved at start (-Xms), so the young generation stays in the same regions;
# - a fixed young generation of 384 MiB, survivors of a quarter of it, kept 90 % full: a row group's
#   pages (the Parquet buffers a writer holds for a second or two) die young;
# - 4 MiB regions: Parquet's and zstd's 1 MiB buffers are ordinary objects, not humongous ones;
# - objects promoted after 4 collections, and old-generation marking from a fixed 25 % of the heap:
#   what a short run keeps in its survivors (the JVM's start-up state) reaches the old generation
#   early, and promoted garbage is reclaimed before it spreads over new regions. Not lower: the
#   tables Delta keeps open hold more than 5 % of the heap on a busy server, and marking from 5 %
#   then ran without end, 12 % of the server's CPU per small commit (issue 46: 2.22 against 1.95
#   CPU-s per append or MERGE of 5 rows, mean of six rounds; bench/commit_gc.py). Snapshot memory is
#   unchanged (snapshot_peak_rss_1M_rows 1.03: 1,126 against 1,094 MiB).
HEAP_OPTIONS = (
    f"-Xms{DRIVER_MEMORY}", "-Xmn384m", "-XX:SurvivorRatio=4", "-XX:TargetSurvivorRatio=90",
    "-XX:G1HeapRegionSize=4m", "-XX:MaxTenuringThreshold=4", "-XX:-G1UseAdaptiveIHOP",
    "-XX:InitiatingHeapOccupancyPercent=25", THREAD_STACK_OPTION,
)

# A server that lives minutes (a test's one-trial or cluster server): these heap settings, C1 alone.
SHORT_LIVED_SERVER_OPTIONS = " ".join((*HEAP_OPTIONS, *SHORT_LIVED_JIT))

# Delta keeps every table it has opened in a cache (its log, its last snapshot's state and the plans
# built on it), 10,000 tables by default and for an hour. Each of ours held about 3 MiB of the heap:
# the first batch of a 500-table source filled the 2 GiB heap at about 700 tables (snapshot, bronze
# and silver each count) and ran into back-to-back full GCs, from 1.2 s to 14 s a table. A bound of
# 128 keeps the tables batches touch often warm (a changed table uses two or three: bronze, silver,
# history) and evicts the least recently used, whose next use reads its log again (about 1 s).
DELTA_LOG_CACHE_SIZE = 128

# jvm/src's session extensions, in jvm/jars/ingest-spark.jar (bin/setup compiles it).
PROJECT_EXTENSIONS = "ingest.spark.Extensions"

# Why each default: UTC so TIMESTAMP values mean the same instant on every machine (DESIGN
# principle 5); few shuffle partitions because change batches are small and 200 empty tasks
# cost seconds; Arrow for Python <-> JVM transfer; the UI off (a port nobody reads).
SERVER_CONF: dict[str, str] = {
    # Delta's, and the project's optimizer rules (jvm/src: a merge's first pass reads only the pages
    # holding the batch's keys; a copy-on-write merge broadcasts a small batch, keeps its files' key
    # order and writes its unchanged rows straight from them; a TIMESTAMP cast to TIMESTAMP_NTZ in UTC
    # keeps its microseconds without a wall clock worked out per value); a server without them merges
    # the same rows, reading, shuffling and repacking more, and casts the same values for more CPU
    "spark.sql.extensions": f"io.delta.sql.DeltaSparkSessionExtension,{PROJECT_EXTENSIONS}",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.driver.memory": DRIVER_MEMORY,
    "spark.driver.extraJavaOptions": " ".join(HEAP_OPTIONS),
    "spark.executor.extraJavaOptions": THREAD_STACK_OPTION,  # a cluster's executors (see above)
    # Spark's memory pages (sorts, aggregations) are sized from the heap: 32 MiB here, each one a
    # humongous object to G1. Delta sorts a table's log in them every time it rebuilds a snapshot's
    # state (after each commit), a few KB of actions in two fresh 32 MiB pages.
    "spark.buffer.pageSize": "4m",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.delta.log.cacheSize": str(DELTA_LOG_CACHE_SIZE),
    "spark.databricks.delta.optimizeMetadataOnlyQueries.enabled": "true",
    # ADD COLUMN in the source reaches bronze (mergeSchema) and silver (MERGE) as a new Delta column.
    # No column mapping or type widening by default: tables stay at reader version 1, which every
    # Delta reader opens (see lake/columns.py for names and wider types).
    "spark.databricks.delta.schema.autoMerge.enabled": "true",
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
    # VACUUM lists a table's folder in this many Spark tasks: the default 10,000 made a VACUUM of a
    # small table take 55 s on 2 cores, 3.6 s with 8.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    # Parquet row groups of 16 MiB instead of 128: a file is read in as many tasks as it has row
    # groups, and OPTIMIZE leaves a 10M-row silver in one file of two row groups (one task). A
    # batch's merge into it, which reads the table's keys and, with deletion vectors, its touched
    # files, then used one of the cores (1,000 changes into 10M rows with deletion vectors: 5.5 s,
    # with 16 MiB row groups 4.1 s).
    "spark.hadoop.parquet.block.size": str(16 * 2**20),
}

SESSION_CONF: dict[str, str] = {
    # the type contract is in UTC; a cluster's server may default to another zone
    "spark.sql.session.timeZone": "UTC",
    # Parquet files in zstd without dictionary pages, on every table we write. Most of our columns are
    # unique or nearly (keys, `_pos`, times, before images), and the writer hashes every value into a
    # dictionary it then drops; zstd finds the repeats that dictionaries would have. Measured on the CDC
    # bench's changes (1M, into bronze and silver): 7-9 % less time a run than snappy with dictionaries,
    # with files less than half the size (bronze 22 against 53 MiB, silver 20 against 34). Session
    # settings, not the server's, so that a cluster's server writes the same files.
    "spark.sql.parquet.compression.codec": "zstd",
    "parquet.enable.dictionary": "false",
    # Parquet pages of 5,000 rows instead of 20,000. A deletion-vector merge of a few keys a file
    # pushes them into the reader (merge.key_pushdown), which then reads only the pages they fall in:
    # 1,000 updates into 100M rows read 5M rows instead of 20M in the merge's second pass (5.5-5.7
    # against 6.6-8.7 s). On a 10M-row silver the smaller pages cost nothing measurable: build, full
    # scan, key scan and merges the same, the files 3 % smaller (docs/performance.md).
    "parquet.page.row.count.limit": "5000",
    # A whole-stage method of more than 8,000 bytes of bytecode is never JIT-compiled by HotSpot, so
    # its rows run interpreted; past this limit Spark codegens the stage's expressions one by one
    # instead (Spark's docs advise 8000 on HotSpot). Reconciliation's range search (a CASE tree over
    # up to 1,023 key boundaries) made such a method: its 10M-row check took 24 s, 11 s with the limit.
    # The snapshot and CDC benchmarks' plans do not reach it (their server logs name no such method).
    "spark.sql.codegen.hugeMethodLimit": "8000",
    # A merge into a table that records the change data feed writes its output partitioned into data
    # and `_change_data` files; by default Spark sorts every row of a task by that partition first.
    # With writers open at once it does not: 1,000 updates at random keys into 10M rows took 13.3 s
    # against 15.3 s (1M rows: 2.8 against 3.6 s). Spark falls back to the sort as soon as the open
    # writers *reach* this number (FileFormatDataWriter), so the two partitions need 3: with 2, each
    # task sorted the rest of its rows from its first change row on (11.7 against 11.2 s at 10M rows).
    # Our tables have no other partitions.
    "spark.sql.maxConcurrentOutputFileWriters": "3",
    # A MERGE with an insert clause joins the rows of the files it rewrites to the batch by a full outer
    # join, which Spark cannot broadcast, so it sorted both sides: every row of a copy-on-write table the
    # batch touches. Once both sides are shuffled, adaptive execution instead builds a hash map of a side
    # whose partitions measured at most this much (as a rule the batch), and the table's rows go through
    # unsorted: 1,000 updates at random keys into 10M rows 12.9 s against 16.4 s. Measured, not
    # estimated, so a large batch keeps the sort; 64 MiB is the advisory partition size, which Spark's
    # documentation asks it to reach, and leaves a 2 GiB server room (docs/performance.md).
    "spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold": str(64 * 2**20),
}
"""Set on every session (Spark hands a session's Hadoop-style keys to the file writers)."""

STATE_FILE = "server.json"
START_TIMEOUT = 120.0


class SparkUnavailable(RuntimeError):
    """No Spark Connect server answers where one is expected; the message names it and the fix."""


class MissingJarsError(RuntimeError):
    pass


def lacks_class(error: BaseException | str, class_name: str) -> bool:
    """Whether a Spark error says its server could not load `class_name` (pure): on the driver Connect
    words it '(java.lang.ClassNotFoundException) <name>', in a task 'ClassNotFoundException: <name>'."""
    import re

    return re.search(r"ClassNotFoundException\)?:? +" + re.escape(class_name) + r"(?![\w.$])", str(error)) is not None


def in_a_task(error: BaseException | str) -> bool:
    """Whether a Spark error is a task's failure on an executor rather than the server's own (pure): its
    message says a task was lost, or its JVM stack runs through an executor's task runner."""
    import re

    return re.search(r"\bLost task [0-9.]+ in stage\b|\bTask [0-9]+ in stage [0-9.]+ failed\b|"
                     r"\bat org\.apache\.spark\.executor\.Executor\$TaskRunner\.", str(error)) is not None


@contextmanager
def jdbc_driver(driver: str, database: str) -> Iterator[None]:
    """Spark's error for a server, or its executors, without the JDBC driver `driver` (of `database`), as
    one that names the driver, where it is missing and the fix."""
    try:
        yield
    except Exception as exc:
        if not lacks_class(exc, driver):
            raise
        if in_a_task(exc):  # the server loaded it to plan the read; the executors that read could not
            raise MissingJarsError(
                f"the Spark cluster's executors have no {database} JDBC driver ({driver}), though its server "
                "has one: snapshots and reconciliation read the source on the executors. Fix: give the "
                "executors the jars of jvm/pom.xml too: the server's --jars or spark.jars ship them (a jar on "
                "spark.driver.extraClassPath reaches the server alone), or spark.executor.extraClassPath "
                "names them on every worker host") from exc
        raise MissingJarsError(
            f"the Spark server has no {database} JDBC driver ({driver}), which snapshots and reconciliation read "
            "the source with. Fix: start it with the jars of jvm/pom.xml (bin/setup fetches them into jvm/jars, "
            "which the local server loads; a cluster's server takes them with --jars or spark.jars)") from exc


@dataclass(frozen=True)
class ServerState:
    pid: int
    port: int
    log: str
    started_at: float

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def state_dir() -> Path:
    """Where the embedded server's PID, port and log live (override: INGEST_SPARK_STATE_DIR)."""
    return Path(os.environ.get("INGEST_SPARK_STATE_DIR", local_dir() / "spark-connect"))


def jars(folder: Path | None = None) -> list[str]:
    from ingest.paths import jars_dir

    folder = folder or jars_dir()
    found = sorted(str(p) for p in Path(folder).glob("*.jar"))
    if not any("delta-spark" in j for j in found):
        raise MissingJarsError(
            f"no Delta jar in {folder}: run bin/setup (it fetches the jars with Maven), "
            "or set INGEST_JARS_DIR to a folder holding delta-spark and delta-storage")
    return found


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def read_state(folder: Path | None = None) -> ServerState | None:
    """The embedded server recorded in `folder`, if its process is still there."""
    path = (folder or state_dir()) / STATE_FILE
    try:
        state = ServerState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return state if alive(state.pid) else None


def parse_properties(text: str, where: str) -> dict[str, str]:
    """Spark's properties format, as in spark-defaults.conf (pure): `key value` or `key=value` a line,
    `#` comments and blank lines skipped. `where` names the file in the error for a line without a
    value."""
    import re

    conf = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = re.split(r"\s*=\s*|\s+", line, maxsplit=1)
        if len(parts) != 2 or not parts[1]:
            raise SparkUnavailable(f"{where}, line {number}: a Spark setting needs a key and a value "
                                   f"('spark.executor.memory 2g'), not {parts[0]!r}. Fix the line or remove it")
        conf[parts[0]] = parts[1]
    return conf


def java_stack_bytes(options: str) -> int:
    """The thread stack a JVM started with these options gives its threads: the last -Xss or
    -XX:ThreadStackSize (both set the one flag, which counts KiB: HotSpot takes `=4k` as 4,096 KiB), else
    the JVM's 1 MiB (pure)."""
    size = 2**20
    for option in options.split():
        found = re.fullmatch(r"(-Xss|-XX:ThreadStackSize=)(\d+)([kKmMgG]?)", option)
        if found:
            size = int(found[2]) * 1024 ** " kmg".index(found[3].lower() or " ") * (1 if found[1] == "-Xss" else 1024)
    return size


def server_thread_stack(spark) -> int:
    """The smallest thread stack among the threads that plan and run the server's tasks: the driver's,
    and on a cluster its executors' (from the server's own settings, so a server started elsewhere
    answers for itself)."""
    stack = java_stack_bytes(spark.conf.get("spark.driver.extraJavaOptions", ""))
    if not spark.conf.get("spark.master", "local").startswith("local"):
        stack = min(stack, java_stack_bytes(spark.conf.get("spark.executor.extraJavaOptions", "")))
    return stack


def configured_conf(environ=os.environ) -> dict[str, str]:
    """The embedded server's settings from the file INGEST_SPARK_CONF names ({} when unset): what a
    supervised server on a cluster's driver needs besides the project's defaults, such as
    `spark.master`, the executors' memory and cores, and `spark.pyspark.python`, the Python of the
    worker hosts (with the project installed). They win over SERVER_CONF and INGEST_SPARK_MASTER."""
    path = environ.get("INGEST_SPARK_CONF")
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SparkUnavailable(f"INGEST_SPARK_CONF names {path}, which cannot be read ({exc.strerror}). Fix: "
                               "point it at a file of Spark settings (`key value` a line), or unset it") from None
    return parse_properties(text, path)


# Class data sharing: the server's JVM maps the classes an earlier server loaded, parsed and verified,
# from an archive bin/setup makes (localdev/class_archive.py), instead of reading them from the jars
# again. From a server's start to the end of its first small Delta write, MERGE and count, three rounds
# alternating: 43.6-51.9 CPU-s and 24.7-28.3 s with it, 50.7-68.2 CPU-s and 29.1-39.0 s without
# (docs/performance.md, thirty-sixth session). Every test module that starts a server, and a restart
# after a crash, pays that much less. The JVM checks the archive against its own build and class path
# and runs without it where either changed (a warning in server.out); the fingerprint in its name keeps
# one made for other jars or another Java from being offered at all. An archive cut short is another
# matter: the JVM maps it and dies of SIGBUS at start, so its name records its size, and one whose
# size differs is not offered.
CLASS_ARCHIVE_PREFIX = "server-classes-"


def java_binary(environ=os.environ) -> Path:
    """The java spark-submit runs: JAVA_HOME's, else the first on the PATH, links resolved."""
    import shutil

    found = (f"{environ['JAVA_HOME']}/bin/java" if environ.get("JAVA_HOME")
             else shutil.which("java", path=environ.get("PATH")) or "java")
    return Path(found).resolve()


def class_archive_stem(jar_folders: list[Path] | None = None, java: Path | None = None) -> Path:
    """The class archive's folder and name for this Java and these jars, less its size: the project's
    jars folder, and a fingerprint of the java binary and of every jar's name, size and time (Spark's
    own and the project's, the server's whole class path)."""
    import hashlib

    import pyspark

    from ingest.paths import jars_dir

    folders = jar_folders or [Path(pyspark.__file__).parent / "jars", jars_dir()]
    java = java or java_binary()
    digest = hashlib.sha1()
    for path in [java, *(j for folder in folders for j in sorted(Path(folder).glob("*.jar")))]:
        stat = path.stat() if path.exists() else None
        digest.update(f"{path}:{stat and stat.st_size}:{stat and stat.st_mtime_ns}\n".encode())
    return Path(folders[-1]) / f"{CLASS_ARCHIVE_PREFIX}{digest.hexdigest()[:16]}"


def class_archive_path(stem: Path, size: int) -> Path:
    """The archive's file: its stem and its size in bytes (pure)."""
    return stem.with_name(f"{stem.name}-{size}.jsa")


def class_archive(jar_folders: list[Path] | None = None, java: Path | None = None) -> Path | None:
    """The class archive made for this Java and these jars, whole (the size its name records); None
    where there is none."""
    stem = class_archive_stem(jar_folders, java)
    for path in stem.parent.glob(f"{stem.name}-*.jsa"):
        if path == class_archive_path(stem, path.stat().st_size):
            return path
    return None


def with_class_archive(conf: dict[str, str], archive: Path | None) -> dict[str, str]:
    """`conf` with the driver's JVM told to map `archive`, where there is one (pure)."""
    if archive is None:
        return conf
    options = f"{conf.get('spark.driver.extraJavaOptions', '')} -XX:SharedArchiveFile={archive}".strip()
    return {**conf, "spark.driver.extraJavaOptions": options}


def server_command(port: int, extra_conf: dict[str, str] | None = None) -> list[str]:
    """The embedded server's command line: the project's settings, `extra_conf` over them, and the class
    archive bin/setup made for this Java and these jars where there is one."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    conf = {**SERVER_CONF, "spark.pyspark.python": sys.executable, "spark.connect.grpc.binding.port": str(port),
            "spark.connect.grpc.binding.address": "127.0.0.1", **(extra_conf or {})}
    conf = with_class_archive(conf, class_archive())
    master = conf.pop("spark.master", None) or os.environ.get("INGEST_SPARK_MASTER", "local[*]")
    cmd = [str(spark_home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--master", master, "--jars", ",".join(jars())]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "spark-internal"]


# The embedded server's logging: Spark's defaults (log4j2-defaults.properties in its jars), less one
# line. parquet-java logs at INFO the predicate it filters each file by, and a merge that pushes its
# keys into the reader (lake/merge.py `key_pushdown`) names all of them there: about 20 KB for each file
# a merge reads, a few MiB for each 1,000-key merge into a 100M-row table.
QUIET_LOGGERS = {"org.apache.parquet.filter2.compat.FilterCompat": "warn",
                 "org.apache.parquet.CorruptStatistics": "error", "org.sparkproject.jetty": "warn"}


# The embedded server's log rolls over at this size, and the newest rolled files are kept (its INFO
# lines, every query's jobs and tasks, came to about 1 MiB a minute on the tests' busy server).
SERVER_LOG_BYTES = LOG_BYTES
SERVER_LOG_FILES = LOG_FILES
# What the server's process writes outside log4j (the JVM's own errors, its Python workers' stderr) goes
# to this file beside the log, rolled over (logfiles.roll_over) when a start finds it above SERVER_LOG_BYTES.
SERVER_OUT = "server.out"


def log_config(log: Path, levels: dict[str, str] | None = None, max_bytes: int = SERVER_LOG_BYTES,
               keep: int = SERVER_LOG_FILES) -> str:
    """The server's log4j2 configuration (pure): Spark's console format at INFO into the file `log`,
    rolled over at `max_bytes` into `log`.1 to `log`.<keep> (the newest first), QUIET_LOGGERS and
    `levels` (logger name: level) over them."""
    lines = ["rootLogger.level = info", "rootLogger.appenderRef.file.ref = file",
             "appender.file.type = RollingFile", "appender.file.name = file",
             f"appender.file.fileName = {log}", f"appender.file.filePattern = {log}.%i",
             "appender.file.layout.type = PatternLayout",
             "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
             "appender.file.policies.type = Policies", "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
             f"appender.file.policies.size.size = {max_bytes}B",
             "appender.file.strategy.type = DefaultRolloverStrategy", f"appender.file.strategy.max = {keep}",
             "appender.file.strategy.fileIndex = min"]
    for i, (name, level) in enumerate({**QUIET_LOGGERS, **(levels or {})}.items()):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"


def start_local(folder: Path | None = None, extra_conf: dict[str, str] | None = None,
                timeout: float = START_TIMEOUT, log_levels: dict[str, str] | None = None,
                log_bytes: int = SERVER_LOG_BYTES) -> ServerState:
    """The embedded server: the one recorded in `folder` if it is up, else a new one (one at a time:
    runs that start together wait for the first one's server instead of starting their own).
    `log_levels`: loggers whose level differs from `log_config`'s; `log_bytes`: where its log rolls over."""
    import fcntl

    import pyspark

    folder = folder or state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    extra_conf = {**configured_conf(), **(extra_conf or {})}
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(folder)
        if state is not None:
            _wait_listening(state, timeout)
            return state
        port = free_port()
        log = folder / "server.log"
        log_conf = folder / "log4j2.properties"
        log_conf.write_text(log_config(log, log_levels, log_bytes))
        out_file = folder / SERVER_OUT
        roll_over(out_file, log_bytes)
        with open(out_file, "ab") as out:
            proc = subprocess.Popen(server_command(port, extra_conf), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=server_env(
                                        os.environ, Path(pyspark.__file__).parent,
                                        extra_conf.get("spark.pyspark.python", sys.executable), log_conf),
                                    start_new_session=True)
        state = ServerState(proc.pid, port, str(log), time.time())
        (folder / STATE_FILE).write_text(json.dumps(asdict(state)))
        _wait_listening(state, timeout)
        return state


def server_env(environ, spark_home: Path, python: str = sys.executable,
               log_conf: Path | None = None) -> dict[str, str]:
    """The embedded server's environment (pure): this process's, without a Connect client's settings
    (a user's SPARK_REMOTE, or one a dbt run set: spark-submit refuses a server command with it,
    "Remote cannot be specified with master"). `python`: the Python of its workers (PYSPARK_PYTHON,
    which a Connect server's Python UDFs and data sources take before spark.pyspark.python).
    `log_conf`: its log4j2 configuration file (see `log_config`), unless the environment names one."""
    env = {**{k: v for k, v in environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")},
           "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python}
    if log_conf is not None:
        env.setdefault("LOG4J_CONFIGURATION_FILE", str(log_conf))
    return env


def _wait_listening(state: ServerState, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _listening(state.port):
        if not alive(state.pid):
            raise SparkUnavailable(f"the local Spark Connect server (pid {state.pid}) exited while starting; "
                                   f"see {state.log} and {SERVER_OUT} beside it")
        if time.monotonic() > deadline:
            raise SparkUnavailable(f"the local Spark Connect server (pid {state.pid}) did not listen on port "
                                   f"{state.port} within {timeout:.0f} s; see {state.log} and {SERVER_OUT} beside it")
        time.sleep(0.2)


def stop_local(folder: Path | None = None, timeout: float = 30.0) -> ServerState | None:
    """Stop the embedded server recorded in `folder` by its PID (None when none was running)."""
    folder = folder or state_dir()
    state = read_state(folder)
    (folder / STATE_FILE).unlink(missing_ok=True)
    if state is None:
        return None
    os.killpg(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(state.pid):
        os.killpg(state.pid, signal.SIGKILL)
    return state


def remote_url(configured: str | None = None) -> str | None:
    """The remote server to use, if one is configured (INGEST_SPARK_REMOTE wins over the sources file)."""
    return os.environ.get("INGEST_SPARK_REMOTE") or configured or None


_LEASED: dict[str, tuple[object, object]] = {}
"""Per server URL, this process's leased session and its lease (see lake/sessions.py)."""


def connect(url: str | None = None, extra_conf: dict[str, str] | None = None):
    """A Spark Connect session: to `url` (or the configured remote), else to the embedded local server,
    started if needed. Checks that the server's Spark is the client's.

    The session is a leased one (lake/sessions.py): one an earlier process left clean, whose tables
    the server has warm, when there is one; the same for every call in this process."""
    from ingest.lake import sessions

    url = url or remote_url()
    embedded = start_local(extra_conf=extra_conf) if url is None else None
    if embedded:
        url = embedded.url
    held = _LEASED.get(url)
    if held is not None and not held[1].is_stopped:
        return held[1]
    host, port = _host_port(url)
    try:  # the Connect client retries a refused connection for minutes; say it now
        socket.create_connection((host, port), timeout=10).close()
    except OSError as exc:
        raise SparkUnavailable(
            f"no Spark Connect server answers at {url} ({exc}). Fix: start it (`ingest spark start` for the local "
            "one), or point INGEST_SPARK_REMOTE / spark.remote in the sources file at a running server") from None
    lease = None
    if not sessions.disabled() and "session_id=" not in url:
        lease = sessions.acquire(sessions.slots_folder(state_dir(), url, embedded.pid if embedded else None))
    try:
        session, server_version = _open(url if lease is None else sessions.url_with_session(url, lease.session_id))
    except Exception as exc:
        if lease is None or not lease.reused:
            raise _unavailable(url, exc) from None
        # the server no longer has that session (it timed out, or the server restarted): a new one
        lease.renew()
        try:
            session, server_version = _open(sessions.url_with_session(url, lease.session_id))
        except Exception as again:
            raise _unavailable(url, again) from None
    check_versions(url, server_version, session.conf.get("spark.jars", ""))
    for key, value in SESSION_CONF.items():
        session.conf.set(key, value)
    if embedded:
        session.client.set_retry_policies([_while_alive(embedded.pid)])
    if lease is not None:
        import atexit

        session.release_session_on_close = False  # stop() must not end a session the next process takes
        atexit.register(sessions.release, lease, session)
        _LEASED[url] = (lease, session)
    return session


def _open(url: str):
    from pyspark.sql import SparkSession

    # create(), not getOrCreate(): that returns the process's active session whatever its server, so a
    # process holding a session to one server got that one again when it asked for another (a
    # benchmark comparing a cluster's server with the local one measured the local one twice)
    session = SparkSession.builder.remote(url).create()
    return session, session.version


def _unavailable(url: str, exc: BaseException) -> SparkUnavailable:
    """grpc's errors carry the cause; the fix is ours to say."""
    return SparkUnavailable(
        f"no Spark Connect server answers at {url} ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}). "
        "Fix: start it (`ingest spark start` for the local one), or point INGEST_SPARK_REMOTE / spark.remote "
        "in the sources file at a running server")


def discard_session(session) -> None:
    """Never hand `session` to another process: a tool other than ours used it (dbt may change its current
    database, confs and views)."""
    for lease, held in _LEASED.values():
        if held is session:
            lease.discard()


def _while_alive(pid: int):
    """Connect's default retries (at least 10 minutes, for a cluster's server that restarts), but only
    while the embedded server's process lives: nothing restarts it behind a running step, so a call to a
    dead one fails at once instead of after 10 minutes."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class WhileAlive(DefaultPolicy):
        def can_retry(self, e: BaseException) -> bool:
            return alive(pid) and super().can_retry(e)

    return WhileAlive()


def lost_server(exc: BaseException) -> bool:
    """Did a Spark call fail because its server stopped answering (killed, crashed, restarted)? (pure)"""
    text = f"{type(exc).__name__}: {exc}"
    return "StatusCode.UNAVAILABLE" in text or "RETRIES_EXCEEDED" in text


@contextmanager
def naming_a_lost_server(configured: str | None = None) -> Iterator[None]:
    """A step's Spark calls, whose server stopping mid-way fails the step with a message that names the
    server and says what was kept, instead of gRPC's."""
    try:
        yield
    except Exception as exc:
        if not lost_server(exc):
            raise
        remote = remote_url(configured)
        if remote:
            where, fix = (f"the Spark Connect server at {remote}",
                          "restart that server (or mend the network to it), then run the step again")
        else:
            where, fix = (f"the embedded local Spark Connect server (its state and server.log in {state_dir()})",
                          "none by hand: the next run starts the server again (server.log says why it stopped)")
        detail = next((line.strip() for line in str(exc).splitlines() if "details" in line), type(exc).__name__)
        raise SparkUnavailable(
            f"{where} stopped answering during this step ({detail}). What the step had not committed to Delta "
            f"was not written; a run of it again goes on from its last commit. Fix: {fix}") from exc


def _host_port(url: str) -> tuple[str, int]:
    """`sc://host:port/;params` -> (host, port); Spark Connect's default port is 15002 (pure)."""
    from urllib.parse import urlparse

    parsed = urlparse(url.replace("sc://", "http://", 1).split(";", 1)[0])
    if url[:5] != "sc://" or not parsed.hostname:
        raise SparkUnavailable(f"not a Spark Connect URL: {url!r} (want sc://host:port)")
    return parsed.hostname, parsed.port or 15002


def check_versions(url: str, server_version: str, server_jars: str) -> None:
    """Client and server must run the same Spark and Delta (pure): the Connect protocol follows Spark,
    and our commits, SQL and table features follow the Delta jar. A server whose jars are on its
    classpath (not in spark.jars) is taken as it is."""
    import re
    from importlib.metadata import version

    import pyspark

    delta = version("delta-spark")
    fix = (f"Fix: run a server of Spark {pyspark.__version__} with delta-spark {delta} (the jars bin/setup "
           "fetches into jvm/jars), or the client versions that match the server")
    if server_version.split(".")[:2] != pyspark.__version__.split(".")[:2]:
        raise SparkUnavailable(f"the Spark Connect server at {url} runs Spark {server_version}, this client "
                               f"pyspark {pyspark.__version__}. {fix}")
    found = re.search(r"delta-spark_[0-9.]+_[0-9.]+-([0-9][0-9.]*[0-9])\.jar", server_jars)
    if found and found.group(1) != delta:
        raise SparkUnavailable(f"the Spark Connect server at {url} has delta-spark {found.group(1)}, this client "
                               f"expects {delta}. {fix}")
