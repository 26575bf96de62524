"""`ingest check`: reading grants and spotting anonymous accounts (pure)."""

from ingest.sources.mysql.preflight import missing_grants, shadowing_anonymous


def test_grants_of_a_least_privilege_user_on_mariadb_and_mysql_are_enough():
    mariadb = ["GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `ingest`@`%` IDENTIFIED BY PASSWORD '*D8'"]
    mysql = ["GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `ingest`@`%`",
             "GRANT SELECT ON `shop`.* TO `ingest`@`%`"]
    assert missing_grants(mariadb, "shop") == [] and missing_grants(mysql, "shop") == []
    assert missing_grants(["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"], "shop") == []


def test_missing_grants_are_named():
    only_select = ["GRANT USAGE ON *.* TO `weak`@`%`", "GRANT SELECT ON `other`.* TO `weak`@`%`"]
    assert missing_grants(only_select, "shop") == [
        "SELECT ON shop.*", "REPLICATION SLAVE ON *.*", "REPLICATION CLIENT (MariaDB: BINLOG MONITOR) ON *.*"]


def test_anonymous_accounts_that_shadow_the_ingest_user():
    assert shadowing_anonymous("ingest", "ingest@%", []) is None
    matched = shadowing_anonymous("ingest", "@localhost", [])
    assert "anonymous account '@localhost'" in matched and "DROP USER ''@'localhost'" in matched
    present = shadowing_anonymous("ingest", "ingest@%", ["localhost", "vm"])
    assert "DROP USER ''@'localhost'; DROP USER ''@'vm'" in present
