"""The JVM options of the short-lived JVMs tests start (processes.SHORT_LIVED_JVM, connect.SHORT_LIVED_SERVER_OPTIONS)."""

import shutil
import subprocess

import pytest


def flags(options: list[str]) -> dict[str, str]:
    java = shutil.which("java")
    if java is None:
        pytest.fail("no `java` on PATH: bin/setup installs the JDK the project's servers run on")
    out = subprocess.run([java, *options, "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True,
                         check=True).stdout
    return {parts[1]: parts[3] for parts in (line.split() for line in out.splitlines()) if len(parts) >= 4}


def test_a_c1_only_jvm_keeps_the_code_cache_of_a_tiered_one():
    """C1 alone reserves 48 MiB for compiled code by default; a Connect server filled it in minutes of the
    cluster test, and a scheduler thread died of it. The short-lived options reserve what the default
    tiered JVM does."""
    from ingest.lake.connect import SHORT_LIVED_SERVER_OPTIONS
    from ingest.localdev.processes import SHORT_LIVED_JVM

    tiered = int(flags([])["ReservedCodeCacheSize"])
    assert int(flags(["-XX:TieredStopAtLevel=1"])["ReservedCodeCacheSize"]) < tiered  # what the fix is for
    for options in (list(SHORT_LIVED_JVM), SHORT_LIVED_SERVER_OPTIONS.split()):
        got = flags(options)
        assert got["TieredStopAtLevel"] == "1" and int(got["ReservedCodeCacheSize"]) >= tiered, options
