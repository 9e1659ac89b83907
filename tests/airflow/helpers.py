"""Helpers for the Airflow tests: planting orphan files, reading what a DAG run left behind, and
taking a trigger's first event."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # importing Airflow here would read its configuration before conftest sets it
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger, TriggerEvent

DAY = 86_400


def plant_orphans(table_dir: Path) -> dict:
    old = table_dir / "data" / "00000-0-stale-orphan.parquet"
    fresh = table_dir / "data" / "00000-0-in-flight.parquet"
    for path in (old, fresh):
        path.write_bytes(b"PAR1" + b"\0" * 60)
    stamp = time.time() - 10 * DAY
    os.utime(old, (stamp, stamp))
    return {"old": old, "fresh": fresh, "old_uri": f"file://{old}"}


@dataclass
class TaskContextTI:
    """The task-instance fields an operator's ``execute`` reads, for calling it outside a DAG run."""

    dag_id: str = "unit"
    run_id: str = "manual__unit"
    map_index: int = -1
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def task_context(ti: object = None) -> Context:
    """A task context holding ``ti`` (a new ``TaskContextTI`` by default): a test double implementing the parts of
    a task instance the operators use, not the whole protocol, hence the cast."""
    return cast("Context", {"ti": TaskContextTI() if ti is None else ti})


def pushed(context: Context) -> dict[str, Any]:
    """What the operator pushed to XCom through the test's ``TaskContextTI``."""
    ti = context["ti"]
    assert isinstance(ti, TaskContextTI)
    return ti.pushed


def xcom(dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id, key=key, map_index=map_index)
            .one_or_none()
        )
        return None if row is None else row.value


def task_states(dag_id: str, run_id: str) -> dict[tuple[str, int], str]:
    """Task states of a run (``run_id`` may be a LIKE pattern such as ``%``)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id.like(run_id))
        rows = query.all()
        return {(ti.task_id, ti.map_index): str(ti.state) for ti in rows}


def stored_state(table_uuid: str) -> dict | None:
    """The cleanup state the Airflow store keeps for a table, read from the metadata database."""
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    from airflow_iceberg_maint.airflow.variable_store import variable_key

    with create_session() as session:
        row = session.query(Variable).filter_by(key=variable_key(table_uuid)).one_or_none()
        return None if row is None else json.loads(row.val)


async def next_event(trigger: BaseTrigger, timeout: float) -> TriggerEvent | None:
    """The trigger's first event, or None if it fires none within ``timeout`` seconds."""
    events = trigger.run()
    try:
        return await asyncio.wait_for(anext(events), timeout)
    except TimeoutError:
        return None
    finally:
        with contextlib.suppress(RuntimeError):
            if isinstance(events, AsyncGenerator):  # a trigger's run() is an async generator
                await events.aclose()


def check_due_sensor(conn_id: str, table: Any, name: str, tmp_path: Path, context: Context) -> None:
    """The due sensor through connection ``conn_id`` on ``table`` (called ``name`` there), with a weekly
    policy: due when never cleaned, not due two days after a recorded cleanup."""
    from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor
    from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt

    policy_file = tmp_path / "policies.yaml"
    namespace = name.rsplit(".", 1)[0]
    policy_file.write_text(
        f"name: weekly\ntype: system_iceberg_orphan_file_removal\nminIntervalDays: 7\ntables: ['{namespace}.*']\n"
    )
    state_url = f"sqlite:///{tmp_path}/state.db"

    def poke() -> Any:
        sensor = IcebergTableDueSensor(
            task_id="due", table=name, policy_file=str(policy_file), state_url=state_url, iceberg_conn_id=conn_id
        )
        return sensor.poke(context)

    first = poke()
    assert first.is_done is True and first.xcom_value["reason"] == "never cleaned: due"
    record_attempt(
        SqlStateStore(state_url),
        table_uuid=str(table.metadata.table_uuid),
        table=name,
        at=datetime.now(UTC) - timedelta(days=2),
        dry_run=False,
        succeeded=True,
    )
    second = poke()
    assert second.is_done is False
    assert second.xcom_value["reason"] == "last cleaned 2 days ago, interval 7 days: not due"
