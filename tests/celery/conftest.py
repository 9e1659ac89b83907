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
so ``make unit`` leaves them out. The deployment's class and the helpers that start, stop and query it
are in ``tests/support/celery.py``.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pyiceberg.catalog.sql import SqlCatalog

from tests.s3_helpers import s3_test_client
from tests.support.airflow_api import api_token
from tests.support.celery import (
    HEARTBEAT_TIMEOUT_SECONDS,
    PASSWORD,
    WORKERS,
    Deployment,
    admin,
    check_alive,
    component_env,
    pg_dsn,
    running_jobs,
    start_component,
    stop_deployment,
    wait_for,
)
from tests.support.services import S3_PROPS, service

REPO = Path(__file__).resolve().parents[2]
DAGS = Path(__file__).resolve().parent / "dags"
QUEUE = "iceberg_maint"
#: The DAGs of tests/celery/dags, each waited for before the first test runs.
DAG_IDS = (
    "celery_orphans_single",
    "celery_orphans_sharded",
    "celery_index_build",
    "celery_table_maintenance",
    "celery_deferred",
    "celery_compaction_sharded",
)
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


@pytest.fixture(scope="session")
def celery_airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    pg_url = service("TEST_PG_URL")
    s3_endpoint = service("TEST_S3_ENDPOINT")
    broker = service("TEST_REDIS_URL")
    first_port = int(service("TEST_CELERY_PORT"))
    suffix = f"{os.getpid()}_{secrets.token_hex(3)}"
    metadata_db, iceberg_db = f"celery_airflow_{suffix}", f"celery_iceberg_{suffix}"
    admin(pg_url, f"create database {metadata_db}")
    admin(pg_url, f"create database {iceberg_db}")
    bucket = f"celery-{suffix.replace('_', '-')}"
    s3_test_client(s3_endpoint).create_bucket(Bucket=bucket)
    root = tmp_path_factory.mktemp("celery-airflow")
    sa_metadata = pg_dsn(pg_url, metadata_db).replace("postgresql://", "postgresql+psycopg2://")
    sa_iceberg = pg_dsn(pg_url, iceberg_db).replace("postgresql://", "postgresql+psycopg2://")
    catalog = {
        "uri": sa_iceberg,
        "warehouse": f"s3://{bucket}/warehouse",
        "s3.endpoint": s3_endpoint,
        **S3_PROPS,
    }
    api_base = f"http://127.0.0.1:{first_port}"
    deployment = Deployment(
        root=root,
        metadata_dsn=pg_dsn(pg_url, metadata_db),
        api_base=api_base,
        catalog_properties=catalog,
        bucket=bucket,
        report_base=f"s3://{bucket}/reports",
        state_dsn=pg_dsn(pg_url, iceberg_db),
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
            env=component_env(base, root / "migrate", "migrate"),
            cwd=root / "migrate" / "work",
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert migrate.returncode == 0, f"airflow db migrate:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-3000:]}"
        start_component(deployment, "api-server", ["api-server"], base)
        start_component(deployment, "scheduler", ["scheduler"], base)
        start_component(deployment, "dag-processor", ["dag-processor"], base)
        start_component(deployment, "triggerer", ["triggerer"], base)
        for offset, worker in enumerate(WORKERS, start=1):
            env = {**base, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(first_port + offset)}
            start_component(deployment, worker, ["celery", "worker", "-q", QUEUE, "-H", worker], env)

        def token() -> str | None:
            check_alive(deployment)
            return api_token(api_base, PASSWORD)

        deployment.token = wait_for(token, 300, "the api-server's token endpoint", interval=1)

        def components_up() -> bool:
            check_alive(deployment)
            jobs = running_jobs(deployment)
            ready = all(
                f"celery@{w} ready" in deployment.components[w].log.read_text(errors="replace") for w in WORKERS
            )
            return ready and {"SchedulerJob", "TriggererJob", "DagProcessorJob"} <= jobs

        wait_for(components_up, 300, lambda: f"the components to start: jobs {running_jobs(deployment)}", interval=1)

        def parsed() -> bool:
            check_alive(deployment)
            rows = deployment.query("select dag_id from dag where dag_id = any(%s)", list(DAG_IDS))
            return len(rows) == len(DAG_IDS)

        wait_for(parsed, 300, lambda: f"the DAGs to be parsed: import errors {_import_errors(deployment)}", interval=1)
    except BaseException:
        stop_deployment(deployment)
        print(deployment.logs(), file=sys.stderr)
        raise
    try:
        yield deployment
    finally:
        stop_deployment(deployment)
        if _FAILED:
            print(f"\nCelery deployment logs (failed: {_FAILED}):\n{deployment.logs()}", file=sys.stderr)
        for database in (metadata_db, iceberg_db):
            admin(pg_url, f"drop database if exists {database} with (force)")


def _import_errors(deployment: Deployment) -> list[tuple[Any, ...]]:
    return deployment.query("select filename, stacktrace from import_error")


@pytest.fixture(scope="session")
def catalog(celery_airflow: Deployment) -> SqlCatalog:
    """The deployment's catalog, as the tests see it (the workers build their own from the connection)."""
    return SqlCatalog("iceberg_default", **celery_airflow.catalog_properties)
