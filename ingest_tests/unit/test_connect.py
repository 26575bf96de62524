"""Spark Connect set-up that needs no server: version checks and the server's command line."""

import os

import pyspark
import pytest

from ingest.lake.connect import SparkUnavailable, check_versions, server_command


def test_a_server_of_another_spark_or_delta_is_refused_naming_both_versions():
    url = "sc://10.0.0.5:15002"
    check_versions(url, pyspark.__version__, "/opt/jars/delta-spark_4.2_2.13-4.4.0.jar,/opt/jars/x.jar")
    check_versions(url, pyspark.__version__, "")  # jars on the server's classpath: taken as they are
    with pytest.raises(SparkUnavailable, match=rf"runs Spark 3\.5\.1, this client pyspark {pyspark.__version__}"):
        check_versions(url, "3.5.1", "")
    with pytest.raises(SparkUnavailable, match=r"has delta-spark 4\.3\.0, this client expects 4\.4\.0.*Fix:"):
        check_versions(url, pyspark.__version__, "/j/delta-spark_4.2_2.13-4.3.0.jar")


def local_server_command(tmp_path, monkeypatch, extra_conf=None) -> tuple[list[str], dict[str, str]]:
    """The embedded server's command line over a jars folder of one (empty) Delta jar, and its --conf settings."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "delta-spark_4.2_2.13-4.4.0.jar").write_bytes(b"")
    monkeypatch.setenv("INGEST_JARS_DIR", str(jars))
    cmd = server_command(15099, extra_conf)
    return cmd, dict(c.split("=", 1) for c in cmd[cmd.index("--jars") + 2:-1] if "=" in c)


def test_the_local_server_listens_on_loopback_with_the_session_defaults_and_a_chosen_master(tmp_path, monkeypatch):
    cmd, conf = local_server_command(tmp_path, monkeypatch, {"spark.master": "local[2]"})
    assert cmd[cmd.index("--master") + 1] == "local[2]" and "spark.master" not in conf
    assert conf["spark.connect.grpc.binding.port"] == "15099"
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert cmd[-1] == "spark-internal"


def test_a_settings_file_gives_a_supervised_server_its_cluster_and_a_bad_one_is_named_with_the_fix(tmp_path):
    """INGEST_SPARK_CONF: what `ingest spark run` on a cluster's driver needs besides the defaults (its
    master, the worker hosts' Python), in spark-defaults.conf's format, over the project's settings."""
    from ingest.lake.connect import configured_conf

    settings = tmp_path / "spark.conf"
    settings.write_text("# the cluster\nspark.master spark://10.0.0.5:7077\n\n"
                        "spark.pyspark.python = /opt/ingest-worker/bin/python\nspark.sql.shuffle.partitions\t64\n")
    conf = configured_conf({"INGEST_SPARK_CONF": str(settings)})
    assert conf == {"spark.master": "spark://10.0.0.5:7077", "spark.pyspark.python": "/opt/ingest-worker/bin/python",
                    "spark.sql.shuffle.partitions": "64"}
    cmd = server_command(15099, conf)
    assert cmd[cmd.index("--master") + 1] == "spark://10.0.0.5:7077"
    assert "spark.sql.shuffle.partitions=64" in cmd and "spark.sql.shuffle.partitions=4" not in cmd
    assert configured_conf({}) == {}

    settings.write_text("spark.master spark://10.0.0.5:7077\nspark.executor.memory\n")
    with pytest.raises(SparkUnavailable, match=rf"{settings}, line 2: .*'spark.executor.memory'.*Fix"):
        configured_conf({"INGEST_SPARK_CONF": str(settings)})
    with pytest.raises(SparkUnavailable, match=r"INGEST_SPARK_CONF names .*nowhere.conf.*Fix"):
        configured_conf({"INGEST_SPARK_CONF": str(tmp_path / "nowhere.conf")})


def test_the_local_server_bounds_the_delta_tables_it_keeps_in_memory(tmp_path, monkeypatch):
    """Delta's cache of opened tables (10,000 by default, about 3 MiB each) grows with the number of
    tables until the heap is full (the README's former "Many tables", in git)."""
    from ingest.lake.connect import DELTA_LOG_CACHE_SIZE

    _, conf = local_server_command(tmp_path, monkeypatch)
    assert conf["spark.databricks.delta.delta.log.cacheSize"] == str(DELTA_LOG_CACHE_SIZE)
    assert DELTA_LOG_CACHE_SIZE * 3 * 2**20 < 0.25 * 2 * 2**30  # a quarter of the 2 GiB heap at most


def test_an_unreachable_server_fails_at_once_naming_the_url_and_the_fix():
    import socket

    from ingest.lake.connect import connect

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SparkUnavailable, match=rf"sc://127\.0\.0\.1:{port}.*ingest spark start"):
        connect(f"sc://127.0.0.1:{port}")
    with pytest.raises(SparkUnavailable, match="want sc://host:port"):
        connect("http://example:1")


def test_a_step_whose_server_stopped_answering_fails_naming_the_server_and_what_was_kept(monkeypatch, tmp_path):
    from ingest.lake.connect import SparkUnavailable, lost_server, naming_a_lost_server

    grpc_text = ('<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n\t'
                 'details = "failed to connect to all addresses; last error: Connection refused"\n>')
    monkeypatch.delenv("INGEST_SPARK_REMOTE", raising=False)
    monkeypatch.setenv("INGEST_SPARK_STATE_DIR", str(tmp_path))
    with pytest.raises(SparkUnavailable, match=rf"embedded local Spark Connect server \(its state and server.log in "
                                               rf"{tmp_path}\) stopped answering.*Connection refused.*next run starts"):
        with naming_a_lost_server():
            raise RuntimeError(grpc_text)
    with pytest.raises(SparkUnavailable, match=r"server at sc://spark:15002 stopped answering.*restart that server"):
        with naming_a_lost_server("sc://spark:15002"):
            raise RuntimeError(grpc_text)
    with pytest.raises(ValueError, match="not a Spark problem"):  # anything else passes as it is
        with naming_a_lost_server():
            raise ValueError("not a Spark problem")
    assert not lost_server(RuntimeError("[DELTA_CONCURRENT_APPEND] a commit race"))


def test_the_embedded_server_starts_without_a_connect_clients_settings(tmp_path):
    from ingest.lake.connect import server_env

    env = server_env({"SPARK_REMOTE": "sc://elsewhere:15002", "PATH": "/usr/bin"}, tmp_path)
    assert "SPARK_REMOTE" not in env and env["PATH"] == "/usr/bin" and env["SPARK_HOME"] == str(tmp_path)


def test_the_embedded_server_logs_as_spark_does_without_the_parquet_readers_predicates(tmp_path):
    from ingest.lake.connect import log_config, server_env

    log = tmp_path / "server.log"
    quiet = log_config(log)
    assert "rootLogger.level = info" in quiet and "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex" in quiet
    # into its file, rolled over at 64 MiB, the newest four rolled files kept
    assert f"appender.file.fileName = {log}\n" in quiet and f"appender.file.filePattern = {log}.%i\n" in quiet
    assert "appender.file.policies.size.size = 67108864B\n" in quiet and "appender.file.strategy.max = 4\n" in quiet
    assert "appender.file.policies.size.size = 1000B\n" in log_config(log, max_bytes=1000)
    name = "org.apache.parquet.filter2.compat.FilterCompat"
    level = {line.split(" = ")[1]: quiet.splitlines()[i + 1].split(" = ")[1]
             for i, line in enumerate(quiet.splitlines()) if line.startswith("logger.") and ".name = " in line}
    assert level[name] == "warn"  # a merge's pushed keys, ~20 KB a file read, stay out of the log
    assert f"logger.l0.name = {name}\nlogger.l0.level = info" in log_config(log, {name: "info"})
    conf = tmp_path / "log4j2.properties"
    assert server_env({}, tmp_path, log_conf=conf)["LOG4J_CONFIGURATION_FILE"] == str(conf)
    mine = {"LOG4J_CONFIGURATION_FILE": "/etc/mine.xml"}  # a user's own configuration stays
    assert server_env(mine, tmp_path, log_conf=conf)["LOG4J_CONFIGURATION_FILE"] == "/etc/mine.xml"


def test_a_missing_jdbc_driver_is_told_from_spark_errors_on_the_driver_and_in_a_task():
    from ingest.lake.connect import in_a_task, lacks_class

    on_driver = "(java.lang.ClassNotFoundException) org.postgresql.Driver\n\nJVM stacktrace:\njava.lang.ClassNot..."
    in_task = ("Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 times, most recent failure: Lost task "
               "0.3 in stage 3.0 (TID 12) (127.0.0.1 executor 0): java.lang.ClassNotFoundException: "
               "org.mariadb.jdbc.Driver\n\tat java.net...")
    # as Spark Connect words a write's task failure (from the cluster tier's executors without the driver)
    in_write_task = ("[TASK_WRITE_FAILED] Task failed while writing rows to file:/tmp/lake/t. SQLSTATE: 58030\n\n"
                     "JVM stacktrace:\norg.apache.spark.SparkException\n\tat org.apache.spark.sql.errors...\n"
                     "\tat org.apache.spark.executor.Executor$TaskRunner.run(Executor.scala:897)\n...\nCaused by: "
                     "java.lang.ClassNotFoundException: org.mariadb.jdbc.Driver\n\tat java.net.URLClassLoader...")
    assert lacks_class(on_driver, "org.postgresql.Driver") and lacks_class(in_task, "org.mariadb.jdbc.Driver")
    assert lacks_class(in_write_task, "org.mariadb.jdbc.Driver")
    assert in_a_task(in_task) and in_a_task(in_write_task) and not in_a_task(on_driver)
    assert not lacks_class(on_driver, "org.mariadb.jdbc.Driver")
    assert not lacks_class("(java.lang.ClassNotFoundException) org.postgresql.DriverX", "org.postgresql.Driver")
    assert not lacks_class("org.postgresql.util.PSQLException: Connection refused", "org.postgresql.Driver")


def test_a_jvms_thread_stack_is_read_from_its_options_as_the_jvm_reads_them():
    from ingest.lake.connect import HEAP_OPTIONS, THREAD_STACK_MIB, java_stack_bytes

    assert java_stack_bytes("") == 2**20  # HotSpot's default on 64-bit Linux
    assert java_stack_bytes("-Xms2g -Xss512k") == 512 * 2**10
    assert java_stack_bytes("-Xss4M -XX:+UseG1GC -Xss8m") == 8 * 2**20  # the last one counts
    assert java_stack_bytes("-Xss2g") == 2 * 2**30 and java_stack_bytes("-Xss65536") == 65536
    assert java_stack_bytes("-Xssx -XX:ThreadStackSize=4096") == 4 * 2**20  # the flag -Xss sets, in KiB
    assert java_stack_bytes("-XX:ThreadStackSize=4096 -Xss1m") == 2**20  # the last one counts
    assert java_stack_bytes("-XX:ThreadStackSize=4k") == 4 * 2**20  # as `java -XX:+PrintFlagsFinal` shows
    assert java_stack_bytes(" ".join(HEAP_OPTIONS)) == THREAD_STACK_MIB * 2**20


def test_the_class_archive_is_named_for_the_java_and_every_jar_so_a_change_to_either_names_another(tmp_path):
    """lake/connect.py `class_archive_stem`: a server offered an archive made for other jars or another
    Java would run without it (the JVM refuses it), so such an archive is never offered."""
    from ingest.lake.connect import CLASS_ARCHIVE_PREFIX, class_archive_stem

    spark_jars, project_jars = tmp_path / "spark", tmp_path / "project"
    for folder in (spark_jars, project_jars):
        folder.mkdir()
        (folder / "a.jar").write_bytes(b"a")
    java, other_java = tmp_path / "java", tmp_path / "java17"
    java.write_bytes(b"java")
    other_java.write_bytes(b"java 17")
    named = class_archive_stem([spark_jars, project_jars], java)
    assert named.parent == project_jars and named.name.startswith(CLASS_ARCHIVE_PREFIX)
    assert class_archive_stem([spark_jars, project_jars], java) == named  # the same Java and jars: the same
    assert class_archive_stem([spark_jars, project_jars], other_java) != named
    (spark_jars / "b.jar").write_bytes(b"b")
    added = class_archive_stem([spark_jars, project_jars], java)
    assert added != named
    os.utime(project_jars / "a.jar", ns=(1, 1))  # rebuilt: another time, the same size
    assert class_archive_stem([spark_jars, project_jars], java) not in (named, added)


def test_the_local_server_is_given_the_class_archive_setup_made_but_not_one_cut_short(tmp_path, monkeypatch):
    """A JVM maps an archive cut short (a full disk when it was written, a partial copy) and dies of
    SIGBUS at start: the name records the archive's size, and a file of another size is not offered."""
    from ingest.lake.connect import class_archive, class_archive_path, class_archive_stem, server_command

    _, conf = local_server_command(tmp_path, monkeypatch, {"spark.driver.extraJavaOptions": "-Xss4m"})
    assert conf["spark.driver.extraJavaOptions"] == "-Xss4m" and class_archive() is None
    stem = class_archive_stem()
    assert stem.parent == tmp_path / "jars"  # in the project's jars folder (INGEST_JARS_DIR here)
    cut_short = class_archive_path(stem, 10)
    cut_short.write_bytes(b"12345")
    assert class_archive() is None
    cmd = server_command(15099, {"spark.driver.extraJavaOptions": "-Xss4m"})
    assert "spark.driver.extraJavaOptions=-Xss4m" in cmd
    cut_short.unlink()
    whole = class_archive_path(stem, 5)
    whole.write_bytes(b"12345")
    assert class_archive() == whole
    cmd = server_command(15099, {"spark.driver.extraJavaOptions": "-Xss4m"})
    assert f"spark.driver.extraJavaOptions=-Xss4m -XX:SharedArchiveFile={whole}" in cmd


def test_archives_left_half_written_by_ended_set_ups_are_removed_and_one_being_written_stays(tmp_path):
    """Each set-up writes its archive under its own PID (two at once in one checkout do not write one
    file); one killed mid-dump leaves some 200 MiB, which the next set-up removes."""
    import subprocess

    from ingest.lake.connect import CLASS_ARCHIVE_PREFIX
    from ingest.localdev.class_archive import remove_left_partials

    ended = subprocess.Popen(["true"])
    ended.wait()
    left = tmp_path / f"{CLASS_ARCHIVE_PREFIX}0123456789abcdef.{ended.pid}.partial"
    writing = tmp_path / f"{CLASS_ARCHIVE_PREFIX}0123456789abcdef.{os.getpid()}.partial"
    made = tmp_path / f"{CLASS_ARCHIVE_PREFIX}0123456789abcdef-5.jsa"
    for f in (left, writing, made):
        f.write_bytes(b"12345")
    assert remove_left_partials(tmp_path) == [left]
    assert not left.exists() and writing.exists() and made.exists()
