"""Where the lake lives: a local folder or S3 (pure).

A lake root `s3://bucket/prefix` is read and written by Spark through Hadoop's
S3A connector (`s3a://`), configured from dagster-aws's S3 resource: endpoint,
region and credentials. Without explicit keys S3A uses the AWS default chain
(environment, profile, instance role).
"""

from __future__ import annotations


def is_remote(root: str) -> bool:
    return "://" in root


def is_s3(root: str) -> bool:
    return root.startswith(("s3://", "s3a://"))


def spark_lake_root(root: str) -> str:
    """The root as Spark opens it: `s3://` becomes Hadoop's `s3a://`; a local folder stays."""
    return "s3a://" + root[len("s3://"):] if root.startswith("s3://") else root


def s3a_conf(endpoint_url: str | None, region: str | None, access_key_id: str | None,
             secret_access_key: str | None, session_token: str | None = None) -> dict[str, str]:
    """Spark settings for S3A. An explicit endpoint (moto, MinIO, a VPC endpoint) gets path-style
    addressing, which every S3-compatible server serves; AWS's own endpoints need neither."""
    conf: dict[str, str] = {}
    if endpoint_url:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint_url
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint_url.startswith("https")).lower()
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    if access_key_id and secret_access_key:
        # Spark redacts conf keys matching secret|token in its UI and logs.
        conf["spark.hadoop.fs.s3a.access.key"] = access_key_id
        conf["spark.hadoop.fs.s3a.secret.key"] = secret_access_key
        if session_token:
            conf["spark.hadoop.fs.s3a.session.token"] = session_token
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")
        else:
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    return conf
