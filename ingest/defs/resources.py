"""Dagster resources: the Spark session and the DynamoDB clients."""

# No `from __future__ import annotations`: Dagster and pydantic read these annotations at run time.

from typing import Any

from dagster import ConfigurableResource
from dagster_aws.utils import ResourceWithBoto3Configuration
from pydantic import Field, PrivateAttr


class SparkResource(ConfigurableResource):
    """A lazily built SparkSession with Delta: nothing starts until an asset asks for it."""

    master: str = Field(default="local[*]", description="Spark master URL: local[*], spark://host:7077, ...")
    app_name: str = Field(default="ingest", description="Spark application name.")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark conf, applied last.")

    _session: Any = PrivateAttr(default=None)

    @property
    def session(self):
        if self._session is None:
            from ingest.lake.spark import build_spark_session

            self._session = build_spark_session(self.master, self.app_name, self.conf)
        return self._session


class DynamoDBResource(ResourceWithBoto3Configuration):
    """DynamoDB and DynamoDB Streams clients, configured like dagster-aws's own resources
    (region, endpoint URL, credentials, retries), so one config serves AWS and a local endpoint."""

    def settings(self):
        from ingest.sources.dynamodb.client import ClientSettings

        return ClientSettings(region=self.region_name or "us-east-1", endpoint_url=self.endpoint_url,
                              access_key_id=self.aws_access_key_id, secret_access_key=self.aws_secret_access_key,
                              session_token=self.aws_session_token, max_attempts=self.max_attempts)

    def get_dynamodb_client(self):
        return self.settings().dynamodb()

    def get_streams_client(self):
        return self.settings().streams()


def dynamodb_resource(source) -> DynamoDBResource:
    """The resource for a DynamoDB source of the sources file; secrets stay in the environment."""
    from dagster import EnvVar

    return DynamoDBResource(
        region_name=source.region, endpoint_url=source.endpoint_url, max_attempts=source.max_attempts,
        aws_access_key_id=EnvVar(source.access_key_id_env) if source.access_key_id_env else None,
        aws_secret_access_key=EnvVar(source.secret_access_key_env) if source.secret_access_key_env else None,
    )
