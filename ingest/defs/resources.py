"""Dagster resources: the Spark (Connect) session and the DynamoDB clients."""

# No `from __future__ import annotations`: Dagster and pydantic read these annotations at run time.

from typing import Any, Optional

from dagster import ConfigurableResource
from dagster_pyspark import PySparkResource
from pydantic import Field


class AwsClientSettings(ConfigurableResource):
    """Where and as whom an AWS client connects: the fields dagster-aws's resources name the same way.
    Not dagster-aws's own classes: importing dagster_aws took 0.45 s of every run process's start."""

    region_name: Optional[str] = Field(default=None, description="AWS region (e.g. us-east-1).")
    endpoint_url: Optional[str] = Field(default=None, description="A local or compatible endpoint (moto, MinIO, "
                                                                  "DynamoDB Local); None for AWS's own.")
    aws_access_key_id: Optional[str] = Field(default=None, description="None: boto3's default credential chain.")
    aws_secret_access_key: Optional[str] = Field(default=None)
    aws_session_token: Optional[str] = Field(default=None)


class LakeS3(AwsClientSettings):
    """A lake on S3: endpoint, region and credentials, given to the Spark server's S3A."""


class SparkResource(PySparkResource):
    """dagster-pyspark's PySparkResource, always a Spark Connect session, built when first asked for.

    With `spark.remote` (`sc://host:port`) in `spark_config` every run uses that server; without it,
    the embedded local server (started on first use, shared by later runs; see ingest/lake/connect.py).
    """

    spark_config: dict[str, Any] = Field(
        default_factory=dict, description="`spark.remote`: a running Spark Connect server (sc://host:port); "
                                          "leave it out for the embedded local server.")
    s3: Optional[LakeS3] = Field(default=None, description="For a lake on S3: endpoint, region and "
                                                           "credentials, given to the local server's S3A.")

    def setup_for_execution(self, context) -> None:
        pass  # lazy: runs that never touch Spark (a failing source read) never connect

    @property
    def spark_session(self) -> Any:
        if self._spark_session is None:
            from ingest.lake.spark import spark_session
            from ingest.lake.storage import s3a_conf

            s3 = {} if self.s3 is None else s3a_conf(self.s3.endpoint_url, self.s3.region_name,
                                                     self.s3.aws_access_key_id, self.s3.aws_secret_access_key,
                                                     self.s3.aws_session_token)
            self._spark_session = spark_session(self.spark_config.get("spark.remote"), s3)
        return self._spark_session

    @property
    def session(self) -> Any:
        return self.spark_session

    def join_url(self) -> str:
        """A Connect URL by which another process (dbt's) joins this run's session: the same server,
        and the settings made on the session (S3A's), without writing a secret anywhere."""
        from ingest.lake.connect import discard_session, read_state, remote_url
        from ingest.lake.sessions import url_with_session

        session = self.spark_session  # connects first: starts the local server if needed
        url = self.spark_config.get("spark.remote") or remote_url() or read_state().url
        discard_session(session)  # dbt may leave its own database, confs and views in it
        return url_with_session(url, session.session_id)


class DynamoDBResource(AwsClientSettings):
    """DynamoDB and DynamoDB Streams clients, configured like dagster-aws's own resources
    (region, endpoint URL, credentials, retries), so one config serves AWS and a local endpoint."""

    max_attempts: int = Field(default=5, description="Attempts per call, with botocore's retries.")

    def settings(self):
        from ingest.sources.dynamodb.client import ClientSettings

        return ClientSettings(region=self.region_name or "us-east-1", endpoint_url=self.endpoint_url,
                              access_key_id=self.aws_access_key_id, secret_access_key=self.aws_secret_access_key,
                              session_token=self.aws_session_token, max_attempts=self.max_attempts)

    def get_dynamodb_client(self):
        return self.settings().dynamodb()

    def get_streams_client(self):
        return self.settings().streams()


def from_env(name: str):
    """An EnvVar for a variable that is set now (its value is read at run time), else None."""
    import os

    from dagster import EnvVar

    return EnvVar(name) if os.environ.get(name) else None


def aws_from_env(endpoint_variable: str) -> dict:
    """Region and credentials from the standard AWS variables, the endpoint from `endpoint_variable`."""
    import os

    return dict(region_name=os.environ.get("AWS_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1")),
                endpoint_url=os.environ.get(endpoint_variable), aws_access_key_id=from_env("AWS_ACCESS_KEY_ID"),
                aws_secret_access_key=from_env("AWS_SECRET_ACCESS_KEY"),
                aws_session_token=from_env("AWS_SESSION_TOKEN"))


def lake_s3_resource() -> LakeS3:
    """The lake's S3 settings (INGEST_S3_ENDPOINT_URL for moto, MinIO)."""
    return LakeS3(**aws_from_env("INGEST_S3_ENDPOINT_URL"))


def lake_lock_resource() -> DynamoDBResource:
    """The DynamoDB client that holds the lake's write locks (INGEST_LOCK_ENDPOINT_URL for a local one)."""
    return DynamoDBResource(**aws_from_env("INGEST_LOCK_ENDPOINT_URL"))


def dynamodb_resource(source) -> DynamoDBResource:
    """The resource for a DynamoDB source of the sources file; secrets stay in the environment."""
    from dagster import EnvVar

    return DynamoDBResource(
        region_name=source.region, endpoint_url=source.endpoint_url, max_attempts=source.max_attempts,
        aws_access_key_id=EnvVar(source.access_key_id_env) if source.access_key_id_env else None,
        aws_secret_access_key=EnvVar(source.secret_access_key_env) if source.secret_access_key_env else None,
    )
