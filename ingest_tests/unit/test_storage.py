"""Lake roots and the S3A settings built from the S3 resource."""

from ingest.lake.storage import is_s3, s3a_conf, spark_lake_root


def test_s3_roots_open_through_s3a_and_local_ones_stay():
    assert spark_lake_root("s3://bucket/prefix") == "s3a://bucket/prefix"
    assert spark_lake_root("s3a://bucket/prefix") == "s3a://bucket/prefix"
    assert spark_lake_root("/data/lake") == "/data/lake"
    assert is_s3("s3://b/p") and is_s3("s3a://b/p") and not is_s3("/data/lake")


def test_an_explicit_endpoint_gets_path_style_and_keys_a_simple_provider():
    conf = s3a_conf("http://127.0.0.1:5000", "eu-west-1", "AKID", "SECRET")
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:5000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")


def test_aws_itself_with_the_default_credential_chain_needs_only_the_region():
    assert s3a_conf(None, "us-east-1", None, None) == {"spark.hadoop.fs.s3a.endpoint.region": "us-east-1"}
    temporary = s3a_conf(None, None, "AKID", "SECRET", "TOKEN")
    assert temporary["spark.hadoop.fs.s3a.session.token"] == "TOKEN"
    assert temporary["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
