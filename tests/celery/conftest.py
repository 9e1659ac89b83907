"""A CeleryExecutor deployment of Airflow for the session, built from real parts, every one on 127.0.0.1.

PostgreSQL (``make test``'s server, a fresh database) is the metadata database and Celery's result
backend, Redis (``make test``'s, ``TEST_REDIS_URL``) the broker; one scheduler, one dag-processor, one
triggerer, one api-server, and two Celery workers (``airflow celery worker -q iceberg_maint -H worker-a``
and ``-H worker-b``). Each component runs as a subprocess in its own process group, with its own
``HOME``, ``AIRFLOW_HOME``, ``TMPDIR`` and working directory: the one local path they share is the DAGs
folder (``tests/celery/dags``). The tables live in a PostgreSQL SqlCatalog with their files, the reports
and the scratch folders on the local S3 server, so what one worker writes another reads only through
object storage or a database, as on separate hosts.

The deployment is waited on by conditions (the api-server's token endpoint, each scheduler, triggerer
and dag-processor job heartbeating in the metadata database, each worker's ``ready`` line, every test
DAG parsed), stopped (process group TERM, then KILL) at the end even when a test failed, and its logs
are printed when a test of this folder failed. The tests are marked ``celery`` (and ``s3``, ``postgres``),
so ``make unit`` leaves them out.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from cryptography.fernet import Fernet
from pyiceberg.catalog.sql import SqlCatalog

from tests.s3_helpers import s3_test_client
from tests.support.services import S3_PROPS
from tests.support.services import service as _service

REPO = Path(__file__).resolve().parents[2]
DAGS = Path(__file__).resolve().parent / "dags"
QUEUE = "iceberg_maint"
WORKERS = ("worker-a", "worker-b")
PASSWORD = "celery-test-password"
#: The DAGs of tests/celery/dags, each waited for before the first test runs.
DAG_IDS = (
    "celery_orphans_single",
    "celery_orphans_sharded",
    "celery_index_build",
    "celery_table_maintenance",
    "celery_deferred",
)
#: Where the scheduler notices a killed worker's task: no heartbeat for this long (default 300 s).
HEARTBEAT_TIMEOUT_SECONDS = 20
_FAILED: list[str] = []  # node ids of this folder's failed tests: their deployment's logs are printed


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            for marker in ("celery", "s3", "postgres"):
                item.add_marker(getattr(pytest.mark, marker))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
        _FAILED.append(item.nodeid)
    return report


def _pg_dsn(url: str, database: str) -> str:
    """A libpq URL to ``database`` on the server of ``url`` (an SQLAlchemy URL of make test's PostgreSQL)."""
    base = url.replace("postgresql+psycopg2://", "postgresql://").rsplit("/", 1)[0]
    return f"{base}/{database}"


def _admin(url: str, statement: str) -> None:
    conn = psycopg2.connect(_pg_dsn(url, "postgres"))
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
        request = urllib.request.Request(
            f"{self.api_base}/api/v2{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")

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


def _token(api_base: str) -> str | None:
    request = urllib.request.Request(
        f"{api_base}/auth/token",
        method="POST",
        data=json.dumps({"username": "admin", "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.loads(response.read())["access_token"])
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()
        return None


def _component_env(base: dict[str, str], root: Path, name: str) -> dict[str, str]:
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


def _start(deployment: Deployment, name: str, args: list[str], env: dict[str, str]) -> None:
    root = deployment.root / name
    env = _component_env(env, root, name)
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


def _stop(deployment: Deployment) -> None:
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


def _running_jobs(deployment: Deployment) -> set[str]:
    rows = deployment.query(
        "select job_type from job where state = 'running' and latest_heartbeat > now() - interval '30 seconds'"
    )
    return {r[0] for r in rows}


def _check_alive(deployment: Deployment) -> None:
    for component in deployment.components.values():
        if component.process.poll() is not None:
            raise AssertionError(f"{component.name} exited with {component.process.returncode}")


@pytest.fixture(scope="session")
def celery_airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    pg_url = _service("TEST_PG_URL")
    s3_endpoint = _service("TEST_S3_ENDPOINT")
    broker = _service("TEST_REDIS_URL")
    first_port = int(_service("TEST_CELERY_PORT"))
    suffix = f"{os.getpid()}_{secrets.token_hex(3)}"
    metadata_db, iceberg_db = f"celery_airflow_{suffix}", f"celery_iceberg_{suffix}"
    _admin(pg_url, f"create database {metadata_db}")
    _admin(pg_url, f"create database {iceberg_db}")
    bucket = f"celery-{suffix.replace('_', '-')}"
    s3_test_client(s3_endpoint).create_bucket(Bucket=bucket)
    root = tmp_path_factory.mktemp("celery-airflow")
    sa_metadata = _pg_dsn(pg_url, metadata_db).replace("postgresql://", "postgresql+psycopg2://")
    sa_iceberg = _pg_dsn(pg_url, iceberg_db).replace("postgresql://", "postgresql+psycopg2://")
    catalog = {
        "uri": sa_iceberg,
        "warehouse": f"s3://{bucket}/warehouse",
        "s3.endpoint": s3_endpoint,
        **S3_PROPS,
    }
    api_base = f"http://127.0.0.1:{first_port}"
    deployment = Deployment(
        root=root,
        metadata_dsn=_pg_dsn(pg_url, metadata_db),
        api_base=api_base,
        catalog_properties=catalog,
        bucket=bucket,
        report_base=f"s3://{bucket}/reports",
        state_dsn=_pg_dsn(pg_url, iceberg_db),
    )
    base = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYICEBERG", "ICEBERG_MAINT"))},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # The project's code (src) and tests.celery.identity, the host name each component reports.
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.celery.identity.hostname",
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_base}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sa_metadata,
        "AIRFLOW__CELERY__BROKER_URL": broker,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + sa_metadata,
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
        "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "tests.celery.celery_config.CELERY_CONFIG",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(first_port),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        # Every component signs or checks the tasks' tokens with the same secret.
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_SECONDS),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(first_port + 3),
        # A loaded machine answers late: wait longer (still bounded) rather than fail a task's API call.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS": "10",
        "AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps({"conn_type": "iceberg", "extra": {"type": "sql", **catalog}}),
        "AIRFLOW__ICEBERG_MAINT__REPORT_LOCATION": deployment.report_base,
        # Leases and cleanup state in a database every worker and the triggerer reach (compare-and-set).
        "AIRFLOW__ICEBERG_MAINT__STATE_URL": sa_iceberg,
        "ICEBERG_TEST_BUCKET": bucket,
        "ICEBERG_TEST_S3_ENDPOINT": s3_endpoint,
    }
    (root / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    try:
        migrate = subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
            env=_component_env(base, root / "migrate", "migrate"),
            cwd=root / "migrate" / "work",
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert migrate.returncode == 0, f"airflow db migrate:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-3000:]}"
        _start(deployment, "api-server", ["api-server"], base)
        _start(deployment, "scheduler", ["scheduler"], base)
        _start(deployment, "dag-processor", ["dag-processor"], base)
        _start(deployment, "triggerer", ["triggerer"], base)
        for offset, worker in enumerate(WORKERS, start=1):
            env = {**base, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(first_port + offset)}
            _start(deployment, worker, ["celery", "worker", "-q", QUEUE, "-H", worker], env)

        def token() -> str | None:
            _check_alive(deployment)
            return _token(api_base)

        deployment.token = wait_for(token, 300, "the api-server's token endpoint", interval=1)

        def components_up() -> bool:
            _check_alive(deployment)
            jobs = _running_jobs(deployment)
            ready = all(
                f"celery@{w} ready" in deployment.components[w].log.read_text(errors="replace") for w in WORKERS
            )
            return ready and {"SchedulerJob", "TriggererJob", "DagProcessorJob"} <= jobs

        wait_for(components_up, 300, lambda: f"the components to start: jobs {_running_jobs(deployment)}", interval=1)

        def parsed() -> bool:
            _check_alive(deployment)
            rows = deployment.query("select dag_id from dag where dag_id = any(%s)", list(DAG_IDS))
            return len(rows) == len(DAG_IDS)

        wait_for(parsed, 300, lambda: f"the DAGs to be parsed: import errors {_import_errors(deployment)}", interval=1)
    except BaseException:
        _stop(deployment)
        print(deployment.logs(), file=sys.stderr)
        raise
    try:
        yield deployment
    finally:
        _stop(deployment)
        if _FAILED:
            print(f"\nCelery deployment logs (failed: {_FAILED}):\n{deployment.logs()}", file=sys.stderr)
        for database in (metadata_db, iceberg_db):
            _admin(pg_url, f"drop database if exists {database} with (force)")


def _import_errors(deployment: Deployment) -> list[tuple[Any, ...]]:
    return deployment.query("select filename, stacktrace from import_error")


@pytest.fixture(scope="session")
def catalog(celery_airflow: Deployment) -> SqlCatalog:
    """The deployment's catalog, as the tests see it (the workers build their own from the connection)."""
    return SqlCatalog("iceberg_default", **celery_airflow.catalog_properties)
