"""Where the project keeps its local state. Nothing is read at import time."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def jars_dir() -> Path:
    """The JVM jars fetched by bin/setup (override: INGEST_JARS_DIR)."""
    return Path(os.environ.get("INGEST_JARS_DIR", PROJECT_ROOT / "jvm" / "jars"))


def local_dir() -> Path:
    """Scratch state of the demo: lake, Dagster home, MariaDB datadir (override: INGEST_LOCAL_DIR)."""
    return Path(os.environ.get("INGEST_LOCAL_DIR", PROJECT_ROOT / ".local"))
