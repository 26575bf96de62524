"""The demo's downstream Python asset: silver read without Spark, by Polars over delta-rs.

Silver is an ordinary Delta table (reader version 1, see lake/columns.py): any Delta reader
opens it. A consumer reads live rows only: `_deleted` marks tombstones, which the ordered
merge keeps so that a late, older change cannot bring a deleted row back.
"""

from __future__ import annotations

import os

import dagster as dg

from ingest.lake.tables import SILVER, table_location
from ingest.paths import local_dir


def lake_root() -> str:
    return os.environ.get("INGEST_LAKE_ROOT", str(local_dir() / "lake"))


def storage_options() -> dict[str, str]:
    """delta-rs's S3 settings from the lake's (the AWS variables and INGEST_S3_ENDPOINT_URL)."""
    endpoint = os.environ.get("INGEST_S3_ENDPOINT_URL")
    return {**({"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": str(endpoint.startswith("http:")).lower()}
               if endpoint else {}),
            **({"AWS_REGION": os.environ["AWS_REGION"]} if os.environ.get("AWS_REGION") else {})}


def orders_by_status(root: str, source: str = "demo"):
    """Live orders per status, with their count and total: a Polars DataFrame."""
    import polars as pl

    path = table_location(root.replace("s3a://", "s3://", 1), source, "orders", SILVER)
    orders = pl.scan_delta(path, storage_options=storage_options() or None).filter(~pl.col("_deleted"))
    return (orders.group_by("status")
            .agg(pl.len().alias("orders"), pl.col("total").sum().alias("total"))
            .sort("status").collect())


@dg.asset(key=["demo_downstream", "orders_by_status"], deps=[dg.AssetKey(["demo", "orders"])],
          group_name="downstream", kinds={"polars", "delta"})
def orders_by_status_asset() -> dg.MaterializeResult:
    """Live orders per status from the demo's silver `orders`, read by Polars (no Spark)."""
    counts = orders_by_status(lake_root())
    table = "\n".join(["| status | orders | total |", "|---|---|---|",
                       *(f"| {r['status']} | {r['orders']} | {r['total']} |" for r in counts.iter_rows(named=True))])
    return dg.MaterializeResult(metadata={"statuses": len(counts), "orders": int(counts["orders"].sum()),
                                          "by_status": dg.MetadataValue.md(table)})
