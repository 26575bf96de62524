"""A throwaway moto server (DynamoDB, Streams, S3 over HTTP) for the demo and the tests.

Started as a child process on loopback and stopped by its PID.

    python -m ingest.localdev.moto --port 5055
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

from ingest.localdev.processes import stop_group

# moto checks no signature; any non-empty credentials will do
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class MotoServer:
    port: int
    host: str = "127.0.0.1"
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> MotoServer:
        binary = os.path.join(os.path.dirname(sys.executable), "moto_server")
        self.process = subprocess.Popen([binary, "-H", self.host, "-p", str(self.port)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode} (port {self.port} in use?)")
            try:
                urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"moto_server did not answer on {self.endpoint_url} within {timeout:.0f} s")

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process, signal.SIGTERM, timeout=10)
        self.process = None

    def reset(self) -> None:
        """Forget every table and bucket (moto's own reset endpoint)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=5055)
    args = parser.parse_args()
    server = MotoServer(args.port).start()
    print(f"moto on {server.endpoint_url} (pid {server.process.pid}); Ctrl-C stops it", flush=True)
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
