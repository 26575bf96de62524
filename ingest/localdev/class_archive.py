"""Make the embedded Spark server's class archive (lake/connect.py `class_archive`), once per Java and jars.

A server started with `-XX:ArchiveClassesAtExit` does what every server does first (starts, writes a
small Delta table, reads it, merges into it) and stops; at its exit the JVM writes the classes it
loaded into the archive, which later servers map. bin/setup runs this; it is quick when the archive
for this Java and these jars exists. Where the JVM writes none (it has no base archive of its own) or
one that a JVM cannot map (cut short by a full disk), none is kept, and servers start as before.

    python -m ingest.localdev.class_archive
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path


def warm_up(spark, folder: Path) -> None:
    """What a server's first runs load: a Delta table written, read and merged into."""
    table = str(folder / "table")
    spark.range(1000).selectExpr("id", "CAST(id AS string) AS s", "CAST(id AS DECIMAL(38,0)) AS _pos") \
        .write.format("delta").save(table)
    spark.read.format("delta").load(table).where("id < 10").collect()
    spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT 5L AS id, 'x' AS s, 6BD AS _pos) u ON t.id <=> u.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


def whole(archive: Path) -> bool:
    """Whether a JVM can map `archive`: one cut short (a full disk, a dump cut off) kills Java 17's JVM
    that maps it with SIGBUS, and Java 25's says it was truncated and goes on without it, while a whole
    one that is not for this class path is only refused."""
    import subprocess

    from ingest.lake.connect import java_binary

    run = subprocess.run([str(java_binary()), f"-XX:SharedArchiveFile={archive}", "-XX:-CreateCoredumpOnCrash",
                          "-XX:ErrorFile=/dev/null", "-version"], capture_output=True)
    return run.returncode == 0 and b"truncated" not in run.stdout + run.stderr


def remove_left_partials(folder: Path) -> list[Path]:
    """Remove the archives being written in `folder` by processes that have ended (a set-up killed while
    its server dumped, some 200 MiB each); one still being written stays. Returns those removed."""
    from ingest.lake.connect import CLASS_ARCHIVE_PREFIX
    from ingest.localdev.processes import alive

    removed = []
    for left in folder.glob(f"{CLASS_ARCHIVE_PREFIX}*.partial"):
        pid = left.name.split(".")[-2]
        if pid.isdigit() and not alive(int(pid)):
            left.unlink(missing_ok=True)
            removed.append(left)
    return removed


def make(log=print) -> Path | None:
    """The archive for this Java and these jars, made if missing; None where the JVM made none, or one
    cut short."""
    from ingest.lake import connect
    from ingest.lake.spark import spark_session

    archive = connect.class_archive()
    if archive is not None:
        return archive
    stem = connect.class_archive_stem()
    # this process's own: two set-ups at once in one checkout each write theirs, and the later rename wins
    partial = stem.with_name(f"{stem.name}.{os.getpid()}.partial")
    remove_left_partials(stem.parent)
    folder = Path(tempfile.mkdtemp(prefix="ingest-class-archive-"))
    options = f"{connect.SERVER_CONF['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={partial}"
    try:
        state = connect.start_local(folder / "spark", {"spark.driver.extraJavaOptions": options})
        try:
            spark = spark_session(state.url)
            warm_up(spark, folder)
            spark.stop()
        finally:
            # the JVM writes the archive as it exits (a few seconds for some 200 MiB): time enough for that
            connect.stop_local(folder / "spark", timeout=300)
        if not partial.exists() or not whole(partial):
            log(f"no class archive: the JVM wrote {'a damaged one' if partial.exists() else 'none'} (see "
                f"{folder / 'spark' / connect.SERVER_OUT}); servers start without one")
            return None
        for stale in stem.parent.glob(f"{connect.CLASS_ARCHIVE_PREFIX}*.jsa"):
            stale.unlink()
        archive = connect.class_archive_path(stem, partial.stat().st_size)
        partial.rename(archive)
        shutil.rmtree(folder, ignore_errors=True)
        return archive
    finally:
        partial.unlink(missing_ok=True)


def main() -> int:
    made = make(lambda line: print(line, file=sys.stderr))
    if made is not None:
        print(made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
