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
