"""Errors keep their retry meaning in real DAG runs, for each kind of task: an operator, a sensor
poking in its slot, and a sensor resumed from its trigger.

Each task has one retry without delay. A fault that may pass (a state store or catalog whose
database refuses connections, a state database that cannot be opened) fails the first try and
Airflow runs a second, which fails the same way: ``failed`` at try 2. Bad input (a table that
does not exist) fails the first try for good: ``failed`` at try 1, the retry unused.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from tests.support.airflow_dags import TEST_DAGS

#: A port of this test session's range: bound and never listened on, so every connection is refused.
REFUSING_PORT = 20539


@pytest.fixture
def refused_db_url() -> Iterator[str]:
    """A PostgreSQL URL whose server refuses connections (the port is bound but not listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", REFUSING_PORT))
        yield f"postgresql+psycopg2://maint:maint@127.0.0.1:{REFUSING_PORT}/maint?connect_timeout=5"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The test DAGs' parse-time settings; tests fill them in before running a DAG."""
    settings = {
        "ICEBERG_MAINT_TEST_TABLE": "demo.orders",
        "ICEBERG_MAINT_TEST_STATE_URL": f"sqlite:///{tmp_path}/state.db",
        "ICEBERG_MAINT_TEST_REPORTS": f"file://{tmp_path}/reports",
    }
    for key in ("ICEBERG_MAINT_TEST_POLICY_FILE",):
        monkeypatch.delenv(key, raising=False)
    return settings


def run_dag(dag_id: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, int]:
    """Run the DAG with ``dag.test()``; its state, and its one task's state and try number."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    run = DagBag(dag_folder=str(TEST_DAGS / "task_retries.py")).dags[dag_id].test()
    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run.run_id).one()
        return str(run.state), str(ti.state), ti.try_number


def policy_file(tmp_path: Path, tables: list[str]) -> str:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"name": "p", "type": "system_iceberg_orphan_file_removal", "tables": tables}))
    return str(path)


@pytest.mark.parametrize("refusing", ["state store", "catalog"])
def test_operator_retries_a_database_that_refuses(
    demo_tables: dict,
    refusing: str,
    refused_db_url: str,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env["ICEBERG_MAINT_TEST_POLICY_FILE"] = policy_file(tmp_path, ["demo.orders"])
    if refusing == "state store":  # StorageError, retryable
        env["ICEBERG_MAINT_TEST_STATE_URL"] = refused_db_url
    else:  # pyiceberg's own error: not the core's to classify, so Airflow's default (retried)
        extra = {"type": "sql", "uri": refused_db_url, "warehouse": f"file://{tmp_path}/warehouse"}
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", json.dumps({"conn_type": "iceberg", "extra": extra}))
    assert run_dag("retry_operator", env, monkeypatch) == ("failed", "failed", 2)


def test_operator_fails_bad_input_without_retry(
    demo_tables: dict, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env["ICEBERG_MAINT_TEST_POLICY_FILE"] = policy_file(tmp_path, ["demo.no_such_table"])
    assert run_dag("retry_operator", env, monkeypatch) == ("failed", "failed", 1)


def test_sensor_retries_a_state_store_that_refuses(
    demo_tables: dict, refused_db_url: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env["ICEBERG_MAINT_TEST_STATE_URL"] = refused_db_url
    assert run_dag("retry_sensor", env, monkeypatch) == ("failed", "failed", 2)


def test_sensor_fails_bad_input_without_retry(
    demo_tables: dict, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env["ICEBERG_MAINT_TEST_TABLE"] = "demo.no_such_table"
    assert run_dag("retry_sensor", env, monkeypatch) == ("failed", "failed", 1)


@contextmanager
def once_deferred(dag_id: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` in a thread as soon as the DAG's task has deferred (its row names the method
    to resume): the sensor's own check passed, and the world changes under its trigger."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    done = threading.Event()
    failures: list[BaseException] = []

    def watch() -> None:
        try:
            deadline = time.monotonic() + 120
            while not done.is_set() and time.monotonic() < deadline:
                with create_session() as session:
                    ti = session.query(TaskInstance).filter_by(dag_id=dag_id).one_or_none()
                    if ti is not None and ti.next_method == "execute_complete":
                        action()
                        return
                done.wait(0.05)
            raise AssertionError(f"{dag_id}: the task never deferred")
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=watch, name="once-deferred")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    if failures:
        raise failures[0]


@pytest.fixture
def recently_cleaned(demo_tables: dict, catalog: SqlCatalog, env: dict[str, str]) -> None:
    """``demo.orders`` was cleaned just now, so under the default 7-day interval the sensor defers."""
    table_uuid = str(catalog.load_table("demo.orders").metadata.table_uuid)
    store = SqlStateStore(env["ICEBERG_MAINT_TEST_STATE_URL"])
    record_attempt(
        store, table_uuid=table_uuid, table="demo.orders", at=datetime.now(UTC), dry_run=False, succeeded=True
    )


def _clear_dag_runs(dag_id: str) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(TaskInstance).filter_by(dag_id=dag_id).delete()
        session.query(DagRun).filter_by(dag_id=dag_id).delete()


def test_resumed_sensor_retries_a_state_store_gone_while_deferred(
    recently_cleaned: None,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    state_db = tmp_path / "state.db"

    def unopenable() -> None:
        # The trigger's engine may already hold a pooled connection, which keeps reading the moved
        # file: the dropped table fails it ("no such table"), and a new connection cannot open a
        # directory. Both are OperationalError, a StorageError, whichever the trigger meets.
        with closing(sqlite3.connect(state_db)) as conn:
            conn.execute("DROP TABLE iceberg_maint_state")
        os.replace(state_db, tmp_path / "state.db.moved")
        state_db.mkdir()

    _clear_dag_runs("retry_deferred_sensor")
    with once_deferred("retry_deferred_sensor", unopenable):
        outcome = run_dag("retry_deferred_sensor", env, monkeypatch)
    assert "Pausing task as DEFERRED" in capfd.readouterr().out
    assert outcome == ("failed", "failed", 2)


def test_resumed_sensor_fails_a_table_dropped_while_deferred(
    recently_cleaned: None,
    catalog: SqlCatalog,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    _clear_dag_runs("retry_deferred_sensor")
    with once_deferred("retry_deferred_sensor", lambda: catalog.drop_table("demo.orders")):
        outcome = run_dag("retry_deferred_sensor", env, monkeypatch)
    output = capfd.readouterr().out
    assert "Pausing task as DEFERRED" in output
    assert "table 'demo.orders': not found in catalog" in output
    assert outcome == ("failed", "failed", 1)
