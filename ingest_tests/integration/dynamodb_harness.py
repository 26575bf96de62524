"""A DynamoDB source on the tests' DynamoDB Local, driven through the generated definitions in-process."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml
from dagster import AssetKey, DagsterInstance, SensorResult, build_sensor_context, materialize

from ingest.config import load_config
from ingest_tests.integration.cdc_harness import HARNESS_CDC
from ingest.defs.sources import build_resources, build_source_defs
from ingest.defs.io_managers import DeltaLakeIOManager
from ingest.defs.resources import SparkResource
from ingest.lake.merge import live_rows
from ingest.lake.tables import table_location
from ingest_tests.integration.cdc_harness import root_failure
from ingest.sources.dynamodb.deserialize import from_item
from ingest.sources.dynamodb.types import TableTypes

DECLARED = {"total": "decimal(12,2)", "tags": "array<string>", "addr": "struct<city:string,zip:bigint>",
            "paid": "boolean", "blob": "binary"}


def create_table(client, name: str, range_key: bool = False, view: str = "NEW_AND_OLD_IMAGES") -> str:
    keys = [{"AttributeName": "id", "KeyType": "HASH"}]
    defs = [{"AttributeName": "id", "AttributeType": "S"}]
    if range_key:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        defs.append({"AttributeName": "sk", "AttributeType": "N"})
    client.create_table(TableName=name, KeySchema=keys, AttributeDefinitions=defs, BillingMode="PAY_PER_REQUEST",
                        StreamSpecification={"StreamEnabled": True, "StreamViewType": view})
    return name


def write_sources(tmp_path: Path, endpoint: str, tables: list[str], name: str = "src", **extra: Any) -> Path:
    path = tmp_path / "sources.yaml"
    source = {"kind": "dynamodb", "region": "us-east-1", "endpoint_url": endpoint, "tables": tables,
              "attributes": {t: DECLARED for t in tables}, "snapshot": {"segments": 4, "segments_per_commit": 2},
              **extra, "cdc": {**HARNESS_CDC, **extra.get("cdc", {})}}
    path.write_text(yaml.safe_dump({"sources": {name: source}}))
    return path


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def every_type_item(i: int, **over: Any) -> dict[str, Any]:
    item = {
        "id": {"S": f"item-{i:05d}"}, "total": {"N": f"{i}.{i % 100:02d}"}, "tags": {"SS": [f"t{i % 3}", "all"]},
        "addr": {"M": {"city": {"S": f"city{i % 7}"}, "zip": {"N": str(1000 + i)}}}, "paid": {"BOOL": i % 2 == 0},
        "blob": {"B": base64.b64encode(bytes([i % 256, 0, 255])).decode()}, "gone": {"NULL": True},
        "scores": {"NS": [str(i), "0.5"]}, "bins": {"BS": [base64.b64encode(b"x").decode()]},
        "hist": {"L": [{"S": "a"}, {"N": str(i)}, {"M": {"k": {"BOOL": False}}}]}, "big": {"N": "9" * 38},
        "huge": {"N": "1.06669898350555e98"},  # DynamoDB writes it out in full: 99 digits, 15 significant
    }
    item.update(over)
    return item


@dataclass
class DynamoHarness:
    spark: Any
    sources: Path
    lake: Path
    instance: DagsterInstance
    endpoint: str
    name: str = "src"

    def __post_init__(self):
        config = load_config(self.sources)
        (defs,) = build_source_defs(config, str(self.lake))
        self.assets, self.sensor, self.checks = defs.assets, defs.sensor, defs.checks
        self.source = config.sources[self.name]
        spark = SparkResource()
        self.resources = {"spark": spark, "lake": DeltaLakeIOManager(lake_root=str(self.lake), spark=spark),
                          **build_resources(config)}
        self.client = boto3.client("dynamodb", endpoint_url=self.endpoint, region_name="us-east-1")

    def run(self, keys: list[AssetKey], partition: str | None = None, expect_success: bool = True,
            tags: dict[str, str] | None = None):
        result = materialize(self.assets, selection=keys, partition_key=partition, instance=self.instance,
                             resources=self.resources, raise_on_error=expect_success, tags=tags)
        assert result.success == expect_success
        return result

    def failure(self, result) -> str:
        return root_failure(result)

    def snapshot(self, table: str):
        return self.run([AssetKey([self.name, table, "snapshot"])])

    def check(self, table: str, name: str = "reconciliation"):
        """Run one asset check of `table`'s silver asset alone; its evaluation."""
        from dagster import AssetCheckKey, AssetSelection

        result = materialize([*self.assets, *self.checks], selection=AssetSelection.checks(
            AssetCheckKey(AssetKey([self.name, table]), name)), instance=self.instance, resources=self.resources)
        (evaluation,) = result.get_asset_check_evaluations()
        return evaluation

    def tick(self):
        with build_sensor_context(instance=self.instance, resources=self.resources) as context:
            return self.sensor(context)

    def sync(self, expect_success: bool = True) -> list[str]:
        """One sensor tick and the runs it asks for; the batch keys it ran."""
        result = self.tick()
        if not isinstance(result, SensorResult):
            return []
        for add in result.dynamic_partitions_requests:
            self.instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
        ran = []
        for request in result.run_requests:
            self.run(list(request.asset_selection), request.partition_key, expect_success, dict(request.tags))
            ran.append(request.partition_key)
        return ran

    def sync_until_idle(self, limit: int = 50) -> list[str]:
        ran: list[str] = []
        for _ in range(limit):
            keys = self.sync()
            if not keys:
                return ran
            ran += keys
        raise AssertionError(f"still syncing after {limit} ticks")

    def path(self, table: str, layer: str) -> str:
        return table_location(str(self.lake), self.name, table, layer)

    def types(self, table: str) -> TableTypes:
        desc = self.client.describe_table(TableName=table)["Table"]
        return TableTypes.build(table, desc["KeySchema"], desc["AttributeDefinitions"],
                                self.source.attributes.get(table, {}))

    def scan_rows(self, table: str) -> list[tuple]:
        """A full scan of the source table, as rows of the type contract."""
        types, items, kwargs = self.types(table), [], {"TableName": table}
        while True:
            page = self.client.scan(**kwargs)
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        names = [n for n, _ in types.columns]
        return sorted(tuple(normal(types.row(from_item(i))[n]) for n in names) for i in items)

    def silver_rows(self, table: str) -> list[tuple]:
        names = [n for n, _ in self.types(table).columns]
        df = live_rows(self.spark.read.format("delta").load(self.path(table, "silver")))
        return sorted(tuple(normal(r[n]) for n in names) for r in df.collect())


def normal(value: Any) -> Any:
    """Spark's and the contract's values in one comparable form."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return tuple(sorted((k, normal(v)) for k, v in value.asDict().items()))
    if isinstance(value, dict):
        return tuple(sorted((k, normal(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(normal(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value
