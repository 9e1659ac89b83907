"""The fixtures of the browser tests: a real ``airflow standalone`` for the module and Debian's chromium.

One Airflow (SQLite metadata database, the project's ``dags/``, reports on the local S3 server) per
test module, with the tables ``sales.orders`` and ``demo.events`` made by ``_make_tables``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.support.airflow_api import api_token
from tests.support.browser import ARTIFACTS, BASE, INDEX_DAG, MANUAL, PASSWORD, PORT, Airflow
from tests.support.services import S3_PROPS, service

REPO = Path(__file__).resolve().parents[2]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say where the screenshots are."""
    if ARTIFACTS.exists():
        shots = sorted(p.name for p in ARTIFACTS.glob("*.png"))
        terminalreporter.write_line(f"screenshots of the Airflow UI ({len(shots)}): {ARTIFACTS}")


def _make_tables(catalog: SqlCatalog) -> Path:
    """``sales.orders`` (two appends) for orphan removal, ``demo.events`` for the index DAG."""
    catalog.create_namespace("sales")
    catalog.create_namespace("demo")
    orders = catalog.create_table("sales.orders", pa.schema([("id", pa.int64()), ("amount", pa.float64())]))
    for start in (0, 100):
        orders.append(pa.table({"id": list(range(start, start + 100)), "amount": [1.5] * 100}))
    events = catalog.create_table("demo.events", pa.schema([("id", pa.int64()), ("kind", pa.string())]))
    events.append(pa.table({"id": list(range(50)), "kind": ["a", "b"] * 25}))
    return Path(orders.metadata.location.removeprefix("file://"))


@pytest.fixture(scope="module")
def chromium() -> str:
    path = os.environ.get("TEST_CHROMIUM") or shutil.which("chromium") or ""
    if not path:
        service("TEST_CHROMIUM")  # skipped outside make test, an error in CI
    return path


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[Airflow]:
    import boto3

    endpoint = service("TEST_S3_ENDPOINT")
    home = tmp_path_factory.mktemp("airflow-ui")
    warehouse = home / "warehouse"
    warehouse.mkdir()
    bucket = f"ui-reports-{os.getpid()}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    storage = {"s3.endpoint": endpoint, **S3_PROPS}
    properties = {"uri": f"sqlite:///{home}/catalog.db", "warehouse": f"file://{warehouse}", **storage}
    _make_tables(SqlCatalog("iceberg_default", **properties))
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    plugins = home / "plugins"
    plugins.mkdir()
    if not any(e.name == "iceberg_maint" for e in entry_points(group="airflow.plugins")):
        # An editable install made before the plugin's entry point existed: load it from the folder instead.
        (plugins / "iceberg_maint_plugin.py").write_text(
            "from airflow_iceberg_maint.airflow.plugin import IcebergMaintenancePlugin  # noqa: F401\n"
        )
    report_base = f"s3://{bucket}/reports"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYICEBERG"))},
        # `airflow standalone` starts its parts as `airflow ...` found on PATH: the environment's bin first.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(PORT),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{BASE}/execution/",  # tasks talk to this api-server
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps({"conn_type": "iceberg", "extra": {"type": "sql", **properties}}),
        "AIRFLOW__ICEBERG_MAINT__REPORT_LOCATION": report_base,
        # A task's calls to the api-server (start, heartbeat, XCom) time out after 5 s by default and a
        # task whose start call times out fails before it runs: seen on a loaded machine, where the one
        # api-server process answers late. Wait longer (still bounded) rather than fail a run.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS": "10",
    }
    log = (home / "standalone.log").open("w")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "airflow"), "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=home,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        token = None
        while time.monotonic() < deadline and process.poll() is None:
            token = api_token(BASE, PASSWORD)
            if token:
                break
            time.sleep(2)
        if not token:
            pytest.fail(f"airflow standalone did not serve within 240 s; log: {home / 'standalone.log'}")
        instance = Airflow(home, warehouse, token, report_base, properties)
        while time.monotonic() < deadline:  # the DAG processor has parsed the project's DAGs
            try:
                instance.api("GET", f"/dags/{MANUAL}")
                instance.api("GET", f"/dags/{INDEX_DAG}")
                break
            except urllib.error.HTTPError as not_yet:
                not_yet.close()  # it holds the response's socket
                time.sleep(2)
        yield instance
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
