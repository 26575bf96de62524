"""A throwaway moto server (S3 over HTTP) for the tests.

Started as a child process on loopback and stopped by its PID.

    python -m ingest.localdev.moto --port 5055
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request
from dataclasses import dataclass

from ingest.localdev.processes import LoopbackServer


@dataclass
class MotoServer(LoopbackServer):
    def command(self) -> list[str]:
        return [os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", self.host, "-p", str(self.port)]

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1).close()
            return True
        except OSError:
            return False

    def start(self, timeout: float = 30.0) -> MotoServer:
        return super().start(timeout)

    def reset(self) -> None:
        """Forget every table and bucket (moto's own reset endpoint)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=5055)
    MotoServer(parser.parse_args().port).serve("moto")


if __name__ == "__main__":
    main()
