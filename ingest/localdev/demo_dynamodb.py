"""The demo's DynamoDB source: shopping carts in DynamoDB Local, with a stream and a writer.

    python -m ingest.localdev.demo_dynamodb --endpoint http://127.0.0.1:8407 [--write-every 3]

Creates the `carts` table (stream NEW_AND_OLD_IMAGES) and seeds it once; with --write-every it
then opens, changes and checks out carts until stopped, so the stream sensor has work.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

TABLE = "carts"


def client(endpoint: str):
    import boto3

    from ingest.localdev.processes import LOCAL_CREDENTIALS

    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


def cart(rng: random.Random, cart_id: int) -> dict:
    skus = sorted({f"SKU-{rng.randint(1, 200):04d}" for _ in range(rng.randint(1, 4))})
    return {"cart_id": {"S": f"cart-{cart_id:06d}"}, "customer_id": {"N": str(rng.randint(1, 2000))},
            "skus": {"SS": skus}, "total": {"N": f"{rng.randint(100, 99_999) / 100:.2f}"},
            "status": {"S": "open"}, "channel": {"S": rng.choice(["web", "ios", "android"])}}


def seed(ddb, carts: int = 500) -> None:
    """The table and its first carts, once (a table that exists is left as it is)."""
    if TABLE in ddb.list_tables()["TableNames"]:
        return
    ddb.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "cart_id", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "cart_id", "AttributeType": "S"}],
                     BillingMode="PAY_PER_REQUEST",
                     StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    rng = random.Random(7)
    for start in range(1, carts + 1, 25):
        ddb.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": cart(rng, i)}}
                                                   for i in range(start, min(start + 25, carts + 1))]})


def write_forever(ddb, every: float, rounds: int | None = None) -> None:
    """A new cart, a changed cart and now and then a checked-out one (deleted), every `every` seconds
    (`rounds` times; None: until stopped)."""
    rng = random.Random()
    newest = max((int(item["cart_id"]["S"].split("-")[1]) for page in ddb.get_paginator("scan").paginate(
        TableName=TABLE, ProjectionExpression="cart_id") for item in page["Items"]), default=0)
    done = 0
    while rounds is None or done < rounds:
        done += 1
        newest += 1
        ddb.put_item(TableName=TABLE, Item=cart(rng, newest))
        ddb.update_item(TableName=TABLE, Key={"cart_id": {"S": f"cart-{rng.randint(1, newest):06d}"}},
                        UpdateExpression="ADD skus :s SET #t = :t",
                        ExpressionAttributeNames={"#t": "total"},
                        ExpressionAttributeValues={":s": {"SS": [f"SKU-{rng.randint(1, 200):04d}"]},
                                                   ":t": {"N": f"{rng.randint(100, 99_999) / 100:.2f}"}})
        if rng.random() < 0.2:
            ddb.delete_item(TableName=TABLE, Key={"cart_id": {"S": f"cart-{rng.randint(1, newest):06d}"}})
        time.sleep(every)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.localdev.demo_dynamodb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", default="http://127.0.0.1:8407")
    parser.add_argument("--write-every", type=float, default=None, metavar="SECONDS")
    args = parser.parse_args(argv)
    ddb = client(args.endpoint)
    deadline = time.monotonic() + 60  # DynamoDB Local, started just before, may still be starting
    while True:
        try:
            ddb.list_tables()
            break
        except Exception:  # noqa: BLE001 (connection refused, in any of botocore's forms)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    seed(ddb)
    print(f"demo DynamoDB table {TABLE} on {args.endpoint} seeded")
    if args.write_every:
        write_forever(ddb, args.write_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
