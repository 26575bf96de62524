"""A throwaway DynamoDB Local (AWS's emulator, with Streams) for the tests, the demo and the benchmarks.

Started as a child process on loopback (in memory, or on disk with `db_path`) and stopped by its
PID. Its jars are in jvm/dynamodb-local/jars (bin/setup fetches them with Maven). It takes any
credentials whose access key id holds only letters and digits.

    python -m ingest.localdev.dynamodb_local --port 8000
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path

from ingest.localdev.processes import LoopbackServer
from ingest.paths import PROJECT_ROOT

JARS = PROJECT_ROOT / "jvm" / "dynamodb-local" / "jars"
MAIN = "com.amazonaws.services.dynamodbv2.local.main.ServerRunner"


@dataclass
class DynamoDBLocal(LoopbackServer):
    db_path: Path | None = None
    """A folder that keeps the tables across restarts; None: in memory."""
    java_options: tuple[str, ...] = ()
    """The JVM's options (the tests': processes.SHORT_LIVED_JVM)."""

    def command(self) -> list[str]:
        if not any(JARS.glob("DynamoDBLocal-*.jar")):
            raise FileNotFoundError(f"DynamoDB Local is not in {JARS}. Fix: run bin/setup (it fetches it with Maven)")
        # -sharedDb: one database whatever the credentials and region (else one per access key and region)
        store = ["-dbPath", str(self.db_path)] if self.db_path else ["-inMemory"]
        # sqlite4java finds its native library (copied next to the jars) through java.library.path
        return [shutil.which("java") or "java", *self.java_options, f"-Djava.library.path={JARS}", "-cp",
                f"{JARS}/*", MAIN, *store, "-sharedDb", "-port", str(self.port), "-disableTelemetry"]

    def start(self, timeout: float = 60.0) -> DynamoDBLocal:
        if self.db_path:
            self.db_path.mkdir(parents=True, exist_ok=True)
        return super().start(timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--db-path", type=Path, default=None)
    args = parser.parse_args()
    DynamoDBLocal(args.port, db_path=args.db_path).serve("DynamoDB Local")


if __name__ == "__main__":
    main()
