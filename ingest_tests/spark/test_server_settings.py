"""The running server took the embedded defaults from its command line (a setting spark-submit drops or
misreads would leave Delta's defaults in place without a word)."""

from ingest.lake.connect import DELTA_LOG_CACHE_SIZE


def test_the_server_bounds_the_delta_tables_it_keeps_in_memory(spark):
    assert spark.conf.get("spark.databricks.delta.delta.log.cacheSize") == str(DELTA_LOG_CACHE_SIZE)


def test_every_session_takes_the_project_session_settings(spark):
    """connect.SESSION_CONF (a cluster's server would not have them on its command line), among them
    the codegen limit that keeps reconciliation's range search JIT-compiled."""
    from ingest.lake.connect import SESSION_CONF

    assert {k: spark.conf.get(k) for k in SESSION_CONF} == SESSION_CONF


def test_the_server_tells_its_thread_stack_which_lets_a_merge_push_a_thousand_keys(spark):
    """A merge reads the server's own settings for the stack its task threads have (a pushed key list is
    a predicate one level deep per key); the server this project starts has enough for PUSH_MAX_KEYS."""
    from ingest.lake.connect import THREAD_STACK_MIB, server_thread_stack
    from ingest.lake.merge import PUSH_STACK_BYTES

    assert server_thread_stack(spark) == THREAD_STACK_MIB * 2**20 >= PUSH_STACK_BYTES


def test_silver_is_written_in_parquet_pages_of_at_most_the_set_rows(spark, tmp_path):
    """The page row limit reaches the files a merge and OPTIMIZE write (a pushed key list then reads only
    the pages its keys fall in), read back from the files' own page headers."""
    from ingest.lake.commits import Txn
    from ingest.lake.connect import SESSION_CONF
    from ingest.lake.maintenance import compact
    from ingest.lake.merge import Layout, ordered_merge
    from ingest_tests.parquet_pages import page_rows

    limit = int(SESSION_CONF["parquet.page.row.count.limit"])
    assert limit < 20_000  # parquet-java's default, which the setting exists to undercut
    path = tmp_path / "silver"
    rows = spark.range(3 * limit).selectExpr("CAST(id AS INT) AS id", "CAST(id AS STRING) AS v",
                                             "CAST(1 AS DECIMAL(38,0)) AS _pos", "false AS _deleted")
    ordered_merge(spark, str(path), rows, ["id"], {"kind": "silver"}, Txn("pages", 0),
                  layout=Layout(deletion_vectors=True), file_rows=limit * 3 // 2)
    merged = sorted(path.glob("*.parquet"))
    compact(spark, str(path))
    compacted = sorted(set(path.glob("*.parquet")) - set(merged))
    assert len(merged) >= 2 and len(compacted) == 1, (merged, compacted)
    for file in (*merged, *compacted):
        for column in range(4):
            pages = page_rows(file, column)
            assert max(pages) <= limit and len(pages) >= 2, (file.name, column, pages)
    assert sum(page_rows(compacted[0])) == 3 * limit


def test_the_embedded_servers_log_rolls_over_keeping_the_newest_files(tmp_path):
    """A server of its own, its log rolling over at 32 KiB: after enough queries the folder holds the log
    and SERVER_LOG_FILES rolled files, none much past the size, the newest first, and beside them the
    process's own output (SERVER_OUT); the queries' lines are in the log, not there."""
    from ingest.lake.connect import SERVER_LOG_FILES, SERVER_OUT, SHORT_LIVED_SERVER_OPTIONS, start_local, stop_local
    from ingest.lake.spark import spark_session
    from ingest_tests.probes import wait_for

    folder, size = tmp_path / "spark", 32 * 1024
    state = start_local(folder, {"spark.master": "local[1]",
                                 "spark.driver.extraJavaOptions": SHORT_LIVED_SERVER_OPTIONS}, log_bytes=size)
    try:
        spark = spark_session(state.url)
        rolled = [folder / f"server.log.{i}" for i in range(1, SERVER_LOG_FILES + 1)]

        def queried_until_rolled_past_the_kept_files() -> bool:
            for _ in range(20):  # each job logs its stages and tasks at INFO
                assert spark.range(100).selectExpr("sum(id)").first()[0] == 4950
            return rolled[-1].exists() and (folder / "server.log").stat().st_size > 0 and \
                rolled[-1].stat().st_mtime < rolled[0].stat().st_mtime
        wait_for(queried_until_rolled_past_the_kept_files, 300, f"the log to roll over {SERVER_LOG_FILES + 1} times")
        spark.stop()
    finally:
        stop_local(folder)
    assert sorted(p.name for p in folder.glob("server.log*")) == ["server.log", *(p.name for p in rolled)]
    assert all(size // 2 < p.stat().st_size <= size + 8192 for p in rolled), [p.stat().st_size for p in rolled]
    assert b"INFO DAGScheduler: Job " in (folder / "server.log").read_bytes()
    assert (folder / SERVER_OUT).exists() and b"DAGScheduler" not in (folder / SERVER_OUT).read_bytes()


def test_the_server_maps_the_class_archive_setup_made(spark_server):
    """bin/setup made the class archive for this Java and these jars (localdev/class_archive.py), and the
    tests' server, started with the tests' own JVM options, maps it rather than loading its classes from
    the jars (a JVM that refused it would run without a word but a warning)."""
    from pathlib import Path

    from ingest.lake.connect import class_archive

    archive = class_archive()
    assert archive is not None, "no class archive for this Java and these jars: run bin/setup"
    mapped = {line.split()[-1] for line in Path(f"/proc/{spark_server.pid}/maps").read_text().splitlines()
              if line.endswith(".jsa")}
    assert str(archive) in mapped, mapped


def test_an_archive_cut_short_is_told_from_a_whole_one_before_it_is_kept(tmp_path):
    """localdev/class_archive.py keeps what the JVM wrote only if a JVM can map it: one cut short (a full
    disk) would kill every server that maps it with SIGBUS at its start."""
    from ingest.lake.connect import class_archive
    from ingest.localdev.class_archive import whole

    archive = class_archive()
    assert archive is not None, "no class archive for this Java and these jars: run bin/setup"
    cut = tmp_path / "cut.jsa"
    with open(archive, "rb") as src:
        cut.write_bytes(src.read(archive.stat().st_size // 2))
    assert whole(archive) and not whole(cut)


def test_a_cast_to_timestamp_ntz_in_utc_gives_the_same_microseconds_without_a_wall_clock_per_value(spark):
    """The project's optimizer rule (jvm/src UtcTimestampCast): in the sessions' UTC a TIMESTAMP cast to
    TIMESTAMP_NTZ becomes a call that returns its microseconds, the values as Spark's own cast gives them
    (before 1582, year 1, year 9999, NULL); in another zone the cast stays, and moves the wall clock."""
    import datetime as dt

    micros = "array(0L, -1L, NULL, 1234567890123456L, -12253852800000000L, 253402300799999999L, -62135596800000000L)"
    # picked by row from a range, so that the optimizer does not fold the cast into a constant
    df = spark.sql(f"SELECT CAST(timestamp_micros(element_at({micros}, CAST(id + 1 AS int))) AS timestamp_ntz) AS t "
                   "FROM range(7)")
    enabled = "spark.ingest.utcTimestampCast.enabled"
    assert "static_invoke(java.lang.Math.addExact(timestamp_micros(" in df._explain_string(extended=True)
    got = [r.t for r in df.collect()]
    spark.conf.set(enabled, "false")
    try:
        assert "Math.addExact" not in df._explain_string(extended=True)
        assert [r.t for r in df.collect()] == got
    finally:
        spark.conf.unset(enabled)
    assert got[:4] == [dt.datetime(1970, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999999), None,
                       dt.datetime(2009, 2, 13, 23, 31, 30, 123456)]
    assert got[4:] == [dt.datetime(1581, 9, 10), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1, 1, 1)]

    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        tokyo = spark.sql("SELECT CAST(timestamp_micros(id) AS timestamp_ntz) AS t FROM range(1)")
        assert "Math.addExact" not in tokyo._explain_string(extended=True)
        assert tokyo.collect()[0].t == dt.datetime(1970, 1, 1, 9)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
