"""The real ``airflow standalone`` the browser tests drive (tests/ui/conftest.py starts it): its address,
login, DAG ids, chromium's arguments, and ``Airflow``, the client of its REST API."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.airflow_api import api_request
from tests.support.services import S3_PROPS

REPO = Path(__file__).resolve().parents[2]
#: Screenshots of every page, outside the repository (never committed); the path is printed at the end of the run.
ARTIFACTS = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "iceberg-maint-screens"


PORT = int(os.environ.get("TEST_AIRFLOW_PORT", "23080"))


BASE = f"http://127.0.0.1:{PORT}"


PASSWORD = "ui-test-password"


MANUAL = "iceberg_orphan_cleanup_manual"


INDEX_DAG = "iceberg_index_maintenance_scheduled"


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass
class Airflow:
    home: Path
    warehouse: Path
    token: str
    report_base: str
    catalog: dict[str, str]  # the SqlCatalog properties of the connection iceberg_default

    def api(self, method: str, path: str, body: Any = None) -> Any:
        return api_request(BASE, self.token, method, path, body, timeout=30)

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 900) -> str:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            try:
                state = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
            except (TimeoutError, urllib.error.URLError) as exc:  # a busy api-server: ask again
                if isinstance(exc, urllib.error.HTTPError):
                    raise
                continue
            if state in ("success", "failed"):
                return state
            time.sleep(1)
        raise AssertionError(
            f"{dag_id} run {run_id} did not finish within {timeout} s: run {state}, "
            f"tasks {self.task_states(dag_id, run_id)}; {self.state()}"
        )

    def parked(self, dag_id: str, run_id: str, task_id: str) -> bool:
        """Whether the scheduler has handled the exit of the attempt that parked ``task_id`` (awaiting input or
        deferred): only then may an answer resume it. Airflow 3.3.2 fails a task answered earlier: the answer has
        the task queued again under the same executor key, then the parked attempt's late exit event ("success")
        takes that key out of the executor and the scheduler, seeing the task queued but gone, marks it failed
        (apache/airflow#72716, #71580). A person answers in minutes; a test, loaded, can answer inside that gap."""
        finished = re.compile(
            rf"TaskInstance Finished: dag_id={re.escape(dag_id)}, task_id={re.escape(task_id)}, "
            rf"run_id={re.escape(run_id)}, .*, state=(awaiting_input|deferred), .*executor_state=success"
        )
        with (self.home / "standalone.log").open(errors="replace") as log:
            return any(finished.search(line) for line in log)

    def report(self, uri: str) -> dict[str, Any]:
        """A report as the run wrote it on the local S3 server (read there, not through the page)."""
        import boto3

        bucket, key = uri.removeprefix("s3://").split("/", 1)
        client = boto3.client(
            "s3",
            endpoint_url=self.catalog["s3.endpoint"],
            aws_access_key_id=S3_PROPS["s3.access-key-id"],
            aws_secret_access_key=S3_PROPS["s3.secret-access-key"],
            region_name="us-east-1",
        )
        return dict(json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read()))

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        body = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1?full_content=true")
        # Structured lines: the exception's text is in "error_detail", not in "event".
        return "\n".join(json.dumps(line) if isinstance(line, dict) else str(line) for line in body["content"])

    def run_ids(self, dag_id: str) -> set[str]:
        return {r["dag_run_id"] for r in self.api("GET", f"/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]}

    def task_states(self, dag_id: str, run_id: str) -> list[tuple[str, int, str | None]]:
        """Each task instance of a run and its state: what a failure message shows."""
        body = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
        return sorted((t["task_id"], t["map_index"], t["state"]) for t in body["task_instances"])

    def state(self) -> str:
        """Where Airflow stood, for a failure message: the runs it lists and how often its api-server was too slow."""
        try:
            runs = {d: sorted(self.run_ids(d)) for d in (MANUAL, INDEX_DAG)}
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            runs = {"error": [f"the REST API did not answer: {exc}"]}
        log = (self.home / "standalone.log").read_text(errors="replace")
        timeouts = log.count("ReadTimeout: timed out")
        return f"runs: {runs}; task requests to the api-server that timed out: {timeouts}"
