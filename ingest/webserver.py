"""Talking to a running Dagster webserver through its GraphQL API, as the UI does.

Backfills launched here are the UI's own (`launchPartitionBackfill`), so they
appear on its backfills page and the daemon runs them.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

BACKFILL_DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
BACKFILL_OK = {"COMPLETED", "COMPLETED_SUCCESS"}
RUN_DONE = {"SUCCESS", "FAILURE", "CANCELED"}


class WebserverError(RuntimeError):
    pass


@dataclass(frozen=True)
class Webserver:
    url: str
    """e.g. http://127.0.0.1:3000"""

    def query(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.url.rstrip('/')}/graphql", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.loads(response.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise WebserverError(f"cannot reach the Dagster webserver at {self.url} ({exc}). Fix: start it "
                                 "(bin/demo, or `dagster dev`), or pass --url") from None
        if answer.get("errors"):
            raise WebserverError(f"{self.url}: GraphQL error: {answer['errors'][0].get('message')}")
        return answer["data"]

    def partition_keys(self, asset_key: Sequence[str]) -> list[str] | None:
        """The asset's partition keys in order, or None when the webserver does not know the asset."""
        data = self.query("""query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) {
            __typename ... on AssetNode { partitionKeys } } }""", {"key": {"path": list(asset_key)}})
        node = data["assetNodeOrError"]
        return node["partitionKeys"] if node["__typename"] == "AssetNode" else None

    def launch_backfill(self, asset_keys: Sequence[Sequence[str]], partitions: Sequence[str], title: str) -> str:
        data = self.query("""mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
            __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
            ... on InvalidSubsetError { message } ... on PartitionSetNotFoundError { message }
            ... on UnauthorizedError { message } } }""",
                          {"params": {"assetSelection": [{"path": list(k)} for k in asset_keys],
                                      "partitionNames": list(partitions), "title": title}})
        result = data["launchPartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            raise WebserverError(f"the webserver refused the backfill ({result['__typename']}): "
                                 f"{result.get('message', '')}")
        return result["backfillId"]

    def backfill_status(self, backfill_id: str) -> str:
        data = self.query("""query($id: String!) { partitionBackfillOrError(backfillId: $id) {
            __typename ... on PartitionBackfill { status } ... on PythonError { message } } }""",
                          {"id": backfill_id})
        result = data["partitionBackfillOrError"]
        if result["__typename"] != "PartitionBackfill":
            raise WebserverError(f"backfill {backfill_id}: {result.get('message', result['__typename'])}")
        return result["status"]

    def launch_run(self, asset_keys: Sequence[Sequence[str]], tags: dict[str, str]) -> str:
        """A run of the selected assets (the UI's Materialize button); its run id."""
        repo = self.query("""{ repositoriesOrError { ... on RepositoryConnection { nodes { name
            location { name } } } } }""")["repositoriesOrError"]["nodes"][0]
        data = self.query("""mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
            __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
            ... on InvalidSubsetError { message } ... on RunConfigValidationInvalid { errors { message } } } }""",
                          {"params": {"selector": {"repositoryLocationName": repo["location"]["name"],
                                                   "repositoryName": repo["name"], "jobName": "__ASSET_JOB",
                                                   "assetSelection": [{"path": list(k)} for k in asset_keys]},
                                      "executionMetadata": {"tags": [{"key": k, "value": v}
                                                                     for k, v in tags.items()]}}})
        result = data["launchRun"]
        if result["__typename"] != "LaunchRunSuccess":
            raise WebserverError(f"the webserver refused the run ({result['__typename']}): "
                                 f"{result.get('message') or result.get('errors')}")
        return result["run"]["runId"]

    def run_status(self, run_id: str) -> str:
        data = self.query("""query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }""",
                          {"id": run_id})
        return data["runOrError"].get("status", data["runOrError"]["__typename"])

    def wait(self, status, done: set[str], timeout: float, poll: float = 2.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = status()
            if state in done or time.monotonic() > deadline:
                return state
            time.sleep(poll)
