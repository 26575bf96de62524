"""Registering a PySpark Python data source whose reader yields Arrow record batches."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

ARROW_ROWS = 10_000
"""Changes an executor converts to Arrow at a time: its memory holds this many, whatever the batch."""


def register_reader(spark, name: str, read_part: Callable[[dict[str, Any], dict[str, str], Any, Any], Iterator[Any]],
                    parts_key: str) -> None:
    """Register data source `name`. Its schema is the `ddl` option; its `spec` option is JSON whose
    `parts_key` lists the Spark partitions; each is read on an executor by
    `read_part(spec, options, part, arrow_schema)`, which yields Arrow record batches.

    Sources read by Spark executors (snapshot chunks, Scan segments) share this shell; what differs
    is only `read_part`, a module-level function (executors import it by name). Secrets go in
    options whose names Spark redacts (`password`, `secret_access_key`...), never in `spec`.
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Part(InputPartition):
        def __init__(self, part: Any):
            super().__init__(part)
            self.part = part

    class Reader(DataSourceReader):
        def __init__(self, options: dict[str, str], schema):
            self.options = dict(options)
            self.spec = json.loads(options["spec"])
            self.schema = schema

        def partitions(self):
            return [Part(p) for p in self.spec[parts_key]]

        def read(self, partition):
            from pyspark.sql.pandas.types import to_arrow_schema

            yield from read_part(self.spec, self.options, partition.part, to_arrow_schema(self.schema, timezone="UTC"))

    class _Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self):
            return self.options["ddl"]

        def reader(self, schema):
            return Reader(self.options, schema)

    spark.dataSource.register(_Source)


_EXECUTOR_ERROR = re.compile(r"^(ingest(?:\.\w+)+)\.(\w+): (.+)$", re.MULTILINE)
_MISSING_PROJECT = re.compile(r"No module named '(ingest(?:\.\w+)*)'")


class ProjectMissingOnWorkers(RuntimeError):
    """Spark's Python workers run a Python that does not have this project installed."""


def executor_error(exc: BaseException) -> BaseException | None:
    """The project's named error that a Python data source raised on an executor (a purged binlog, a
    lost slot), rebuilt from the text Spark reports it with, so that the driver raises what the source
    raised; None when the failure is another one. Only classes of this project's modules that take
    one message are rebuilt. A worker whose Python lacks the project gives ProjectMissingOnWorkers."""
    import importlib

    missing = _MISSING_PROJECT.search(str(exc))
    if missing:
        return ProjectMissingOnWorkers(
            f"Spark's Python workers cannot import {missing.group(1)} (No module named {missing.group(1)!r}): "
            "the Python that spark.pyspark.python names on the worker hosts does not have this project. Fix: "
            "install the project's wheel there (pip install ingest-<version>-py3-none-any.whl, built with "
            "`pip wheel --no-deps .`), or point spark.pyspark.python at a Python that has it")
    found = _EXECUTOR_ERROR.findall(str(exc))
    if not found:
        return None
    module, name, message = found[-1]
    try:
        cls = getattr(importlib.import_module(module), name)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(message)
    except (ImportError, AttributeError, TypeError):
        pass
    return None
