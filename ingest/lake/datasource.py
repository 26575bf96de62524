"""Registering a PySpark Python data source whose reader yields Arrow record batches."""

from __future__ import annotations

from typing import Any


def register_reader(spark, name: str, reader_cls: Any) -> None:
    """Register data source `name`: its schema is the `ddl` option, its reader `reader_cls(options, schema)`.

    Sources read by Spark executors (snapshot chunks, Scan segments) share this
    shell; what differs is only the reader.
    """
    from pyspark.sql.datasource import DataSource

    class _Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self):
            return self.options["ddl"]

        def reader(self, schema):
            return reader_cls(self.options, schema)

    spark.dataSource.register(_Source)
