"""The Celery deployment of tests/celery (tests/celery/conftest.py starts it): its processes, its metadata
database, its REST API, and waiting on conditions against them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2  # type: ignore[import-untyped]  # psycopg2 ships no type information (the stubs are not installed)

from tests.support.airflow_api import api_request

WORKERS = ("worker-a", "worker-b")
PASSWORD = "celery-test-password"
#: Where the scheduler notices a killed worker's task: no heartbeat for this long (default 300 s).
HEARTBEAT_TIMEOUT_SECONDS = 20


def pg_dsn(url: str, database: str) -> str:
    """A libpq URL to ``database`` on the server of ``url`` (an SQLAlchemy URL of make test's PostgreSQL)."""
    base = url.replace("postgresql+psycopg2://", "postgresql://").rsplit("/", 1)[0]
    return f"{base}/{database}"


def admin(url: str, statement: str) -> None:
    conn = psycopg2.connect(pg_dsn(url, "postgres"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    root: Path  # its HOME, AIRFLOW_HOME, TMPDIR and working directory are below


@dataclass
class Deployment:
    """The running deployment and what the tests need of it: the metadata database, the REST API, the catalog."""

    root: Path
    metadata_dsn: str
    api_base: str
    catalog_properties: dict[str, str]
    bucket: str
    report_base: str
    state_dsn: str
    components: dict[str, Component] = field(default_factory=dict)
    token: str = ""

    # -- the metadata database ------------------------------------------------------------------------
    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        conn = psycopg2.connect(self.metadata_dsn)
        try:
            with conn, conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        finally:
            conn.close()

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every try of every task instance of a run (the current one and those in the history table)."""
        columns = "task_id, map_index, try_number, state, hostname, queue, start_date, end_date"
        rows = self.query(
            f"select {columns} from task_instance where dag_id = %s and run_id = %s "
            f"union all select {columns} from task_instance_history where dag_id = %s and run_id = %s",
            dag_id,
            run_id,
            dag_id,
            run_id,
        )
        names = [c.strip() for c in columns.split(",")]
        tries = [dict(zip(names, row, strict=True)) for row in rows]
        return sorted(tries, key=lambda t: (t["task_id"], t["map_index"], t["try_number"]))

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, key: str = "return_value") -> Any:
        rows = self.query(
            "select value from xcom where dag_id = %s and run_id = %s and task_id = %s and map_index = %s and key = %s",
            dag_id,
            run_id,
            task_id,
            map_index,
            key,
        )
        assert rows, f"no XCom {key} of {dag_id}/{run_id}/{task_id}[{map_index}]"
        value = rows[0][0]
        return json.loads(value) if isinstance(value, str) else value

    # -- the REST API ---------------------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None) -> Any:
        return api_request(self.api_base, self.token, method, path, body, timeout=60)

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        run_id = f"{dag_id}-{uuid.uuid4().hex[:10]}"
        self.api("POST", f"/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None, "conf": conf})
        return run_id

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.query("select state from dag_run where dag_id = %s and run_id = %s", dag_id, run_id)
        return rows[0][0] if rows else None

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        state = wait_for(
            lambda: (s := self.run_state(dag_id, run_id)) in ("success", "failed") and s,
            timeout,
            lambda: f"{dag_id} run {run_id} to finish: tasks {self.brief(dag_id, run_id)}",
        )
        return str(state)

    def brief(self, dag_id: str, run_id: str) -> list[tuple[Any, ...]]:
        return [
            (t["task_id"], t["map_index"], t["try_number"], t["state"], t["hostname"])
            for t in self.task_instances(dag_id, run_id)
        ]

    # -- the processes --------------------------------------------------------------------------------
    def kill_worker(self, name: str) -> None:
        """SIGKILL the worker's whole process group: the Celery main process, its pool and the task processes."""
        component = self.components[name]
        os.killpg(component.process.pid, signal.SIGKILL)
        component.process.wait(timeout=60)

    def logs(self) -> str:
        """The end of every component's log, and of every task log (on its worker's disk) that holds an error."""
        parts = []
        for component in self.components.values():
            text = component.log.read_text(errors="replace") if component.log.exists() else ""
            tail = "\n".join(text.splitlines()[-80:])
            parts.append(f"----- {component.name} ({component.log}), last lines -----\n{tail}")
            for task_log in sorted((component.root / "airflow" / "logs").rglob("*.log")):
                text = task_log.read_text(errors="replace")
                if '"level":"error"' in text.replace(" ", "") or "Traceback" in text:
                    tail = "\n".join(text.splitlines()[-30:])
                    parts.append(f"----- task log {task_log} (on {component.name}), last lines -----\n{tail}")
        return "\n".join(parts)


def wait_for(condition: Callable[[], Any], timeout: float, what: str | Callable[[], str], interval: float = 0.5) -> Any:
    """Poll ``condition`` until it returns a true value (returned), or fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what() if callable(what) else what}")
        time.sleep(interval)


def component_env(base: dict[str, str], root: Path, name: str) -> dict[str, str]:
    """Its own HOME, AIRFLOW_HOME, TMPDIR (and working directory, the caller's cwd): nothing local is shared."""
    for sub in ("home", "airflow", "tmp", "work"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return {
        **base,
        "HOME": str(root / "home"),
        "AIRFLOW_HOME": str(root / "airflow"),
        "TMPDIR": str(root / "tmp"),
        "ICEBERG_TEST_HOSTNAME": name,
    }


def start_component(deployment: Deployment, name: str, args: list[str], env: dict[str, str]) -> None:
    root = deployment.root / name
    env = component_env(env, root, name)
    log = root / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root / "work",
            start_new_session=True,  # its own process group: stopped, or killed, as a whole
        )
    deployment.components[name] = Component(name, process, log, root)


def stop_deployment(deployment: Deployment) -> None:
    running = [c for c in deployment.components.values() if c.process.poll() is None]
    for component in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(component.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for component in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            component.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):  # whatever is left of the group (a task that outlived it)
            os.killpg(component.process.pid, signal.SIGKILL)
        component.process.wait()


def running_jobs(deployment: Deployment) -> set[str]:
    rows = deployment.query(
        "select job_type from job where state = 'running' and latest_heartbeat > now() - interval '30 seconds'"
    )
    return {r[0] for r in rows}


def check_alive(deployment: Deployment) -> None:
    for component in deployment.components.values():
        if component.process.poll() is not None:
            raise AssertionError(f"{component.name} exited with {component.process.returncode}")
