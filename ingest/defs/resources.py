"""Dagster resources: the Spark session and the sources file."""

# No `from __future__ import annotations`: Dagster and pydantic read these annotations at run time.

from typing import Any

from dagster import ConfigurableResource
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
