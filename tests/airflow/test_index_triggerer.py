"""The index-lag watcher in a real ``airflow triggerer`` process: the DAG processor registers it, a table
commit becomes exactly one asset event, and after the triggerer is restarted the same crossing is not
reported again (the cursor is in the asset state store) while the next one is."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.index import IcebergCommitIndexExtractOperator
from airflow_iceberg_maint.airflow.operators.index_definitions import IcebergCreateMissingIndexesOperator
from tests.airflow.helpers import task_context
from tests.airflow.index_helpers import TABLE, append, events_table
from tests.support.airflow_dags import DAGS

ASSET = "index_lag_watched"
CLASSPATH = "airflow_iceberg_maint.airflow.triggers.index_events.IcebergIndexLagEventTrigger"
CURSOR_KEY = "index_lag_cursor:events_by_id"


def airflow(*args: str, timeout: float = 180) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


class Triggerer:
    """``airflow triggerer`` as a child process in its own process group, its output in a file."""

    def __init__(self, log: Path) -> None:
        self.log = log
        # Its log server on a free port: other test sessions may run triggerers on this machine.
        env = {**os.environ, "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())}
        with log.open("ab") as output:  # the child writes to a descriptor of its own
            self.process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "triggerer"],
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def started_watcher(self) -> bool:
        return "trigger ID" in self.log.read_text() and "starting" in self.log.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def watcher_events() -> list[dict]:
    """Payloads of the asset events the watcher's trigger created, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == ASSET)
            .order_by(AssetEvent.id)
            .all()
        )
        return [row.extra["payload"] for row in rows if (row.extra or {}).get("from_trigger")]


def stored_cursor() -> dict | None:
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(AssetStateStoreModel)
            .join(AssetModel, AssetStateStoreModel.asset_id == AssetModel.id)
            .filter(AssetModel.name == ASSET, AssetStateStoreModel.key == CURSOR_KEY)
            .one_or_none()
        )
        return None if row is None else json.loads(row.value)


def watcher_classpaths() -> list[str]:
    """Trigger classes registered for the test asset's watchers (other DAGs' watchers may exist too)."""
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return [t.classpath for t in session.query(AssetModel).filter(AssetModel.name == ASSET).one().triggers]


def wait_until(condition: Callable[[], object], timeout: float, what: str, triggerer: Triggerer) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert triggerer.process.poll() is None, f"triggerer exited: {triggerer.log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"{what} within {timeout}s: {triggerer.log.read_text()[-4000:]}"
        time.sleep(0.5)


def commit_extract() -> int:
    summary = IcebergCommitIndexExtractOperator(task_id="x", table=TABLE, index="events_by_id").execute(task_context())
    return summary["source_table_snapshot_id"]


@pytest.fixture
def triggerers(tmp_path: Path) -> Iterator[list[Triggerer]]:
    started: list[Triggerer] = []
    yield started
    for process in started:
        process.stop()


def test_real_triggerer_fires_once_per_crossing_across_a_restart(
    catalog: SqlCatalog, tmp_path: Path, triggerers: list[Triggerer]
) -> None:
    events_table(catalog)
    IcebergCreateMissingIndexesOperator(task_id="c", definitions_file=str(DAGS / "iceberg_indexes.yaml")).execute(
        task_context()
    )
    base = commit_extract()

    # The DAG processor registers the watcher of the (unpaused) DAG; a second pass sees it active.
    airflow("dags", "reserialize", "--bundle-name", "test-dags")
    airflow("dags", "reserialize", "--bundle-name", "test-dags")
    assert watcher_classpaths() == [CLASSPATH]
    before = len(watcher_events())

    log = tmp_path / "triggerer.log"
    triggerers.append(Triggerer(log))
    first = triggerers[-1]
    wait_until(first.started_watcher, 120, "the watcher started", first)
    time.sleep(3)  # a few polls of a current index
    assert len(watcher_events()) == before

    head = append(catalog, 5).current_snapshot().snapshot_id
    wait_until(lambda: len(watcher_events()) == before + 1, 60, "one asset event", first)
    event = watcher_events()[-1]
    assert (event["table"], event["table_snapshot_id"]) == (TABLE, head)
    assert [(i["index"], i["extract_snapshot_id"]) for i in event["indexes"]] == [("events_by_id", base)]
    wait_until(lambda: stored_cursor() == {"events_by_id": base}, 30, "the cursor stored", first)
    time.sleep(3)
    assert len(watcher_events()) == before + 1  # still lagging: no new event

    first.stop()
    log.write_text("")
    triggerers.append(Triggerer(log))
    second = triggerers[-1]
    wait_until(second.started_watcher, 120, "the watcher restarted", second)
    time.sleep(4)
    assert len(watcher_events()) == before + 1  # the crossing was reported before the restart

    commit_extract()
    head = append(catalog, 5).current_snapshot().snapshot_id
    wait_until(lambda: len(watcher_events()) == before + 2, 60, "the next crossing", second)
    assert watcher_events()[-1]["table_snapshot_id"] == head
