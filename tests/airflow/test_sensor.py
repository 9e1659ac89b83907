"""The due sensor: poke mode, and the deferrable path (defer, trigger polls, resume)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor
from airflow_iceberg_maint.airflow.triggers.due import IcebergTableDueTrigger
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from tests.airflow.helpers import next_event
from tests.support.airflow_dags import DAGS

POLICY_FILE = str(DAGS / "iceberg_maint_policies.yaml")


@pytest.fixture
def state_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/state.db"


def cleaned(state_url: str, catalog: SqlCatalog, table: str, days_ago: float) -> None:
    uuid = str(catalog.load_table(table).metadata.table_uuid)
    record_attempt(
        SqlStateStore(state_url),
        table_uuid=uuid,
        table=table,
        at=datetime.now(UTC) - timedelta(days=days_ago),
        dry_run=False,
        succeeded=True,
    )


def sensor(state_url: str, **kwargs: Any) -> IcebergTableDueSensor:
    return IcebergTableDueSensor(
        task_id="due", table="demo.orders", policy_file=POLICY_FILE, state_url=state_url, poke_interval=0.05, **kwargs
    )


def test_poke_reports_the_evaluation(demo_tables: dict, catalog: SqlCatalog, state_url: str, context: Context) -> None:
    first = sensor(state_url).poke(context)
    assert first.is_done is True
    assert first.xcom_value["reason"] == "never cleaned: due"
    cleaned(state_url, catalog, "demo.orders", 1)
    second = sensor(state_url).poke(context)
    assert second.is_done is False
    assert second.xcom_value["policy"] == "remove_orphans_weekly"
    assert second.xcom_value["reason"] == "last cleaned 1 day ago, interval 7 days: not due"


def test_unattached_table_and_missing_table_fail_at_once(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    policy_file = tmp_path / "p.yaml"
    policy_file.write_text("name: p\ntype: system_iceberg_orphan_file_removal\ntables: ['sales.*']\n")
    with pytest.raises(AirflowFailException, match=r"no orphan-removal policy .* attaches to demo\.orders"):
        IcebergTableDueSensor(
            task_id="due", table="demo.orders", policy_file=str(policy_file), state_url=state_url
        ).poke(context)
    with pytest.raises(AirflowFailException, match=r"'demo\.nope': not found"):
        IcebergTableDueSensor(task_id="due", table="demo.nope", state_url=state_url).poke(context)


def test_deferrable_returns_at_once_when_due(demo_tables: dict, state_url: str, context: Context) -> None:
    assert sensor(state_url, deferrable=True).execute(context)["due"] is True


def test_deferrable_waits_in_the_trigger_until_due(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, context: Context
) -> None:
    cleaned(state_url, catalog, "demo.orders", 1)
    operator = sensor(state_url, deferrable=True, timeout=600)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "airflow_iceberg_maint.airflow.triggers.due.IcebergTableDueTrigger"
    assert kwargs["policy"]["name"] == "remove_orphans_weekly" and kwargs["table"] == "demo.orders"

    trigger = IcebergTableDueTrigger(**kwargs)  # as the triggerer rebuilds it
    assert asyncio.run(next_event(trigger, timeout=0.5)) is None  # silent while not due

    cleaned(state_url, catalog, "demo.orders", 8)
    event = asyncio.run(next_event(IcebergTableDueTrigger(**kwargs), timeout=30))
    assert event.payload["status"] == "due"
    result = operator.execute_complete(context, event.payload)
    assert result["due"] is True and result["reason"] == "last cleaned 8 days ago, interval 7 days: due"


def test_trigger_reports_errors_as_events(catalog: SqlCatalog, state_url: str) -> None:
    trigger = IcebergTableDueTrigger(table="demo.nope", iceberg_conn_id="iceberg_default", state_url=state_url)
    event = asyncio.run(next_event(trigger, timeout=30))
    assert event.payload["status"] == "error" and "demo.nope" in event.payload["message"]
    assert event.payload["retryable"] is False  # no such table: the resumed task fails without retry
    operator = IcebergTableDueSensor(task_id="due", table="demo.nope", state_url=state_url)
    with pytest.raises(AirflowFailException, match=r"demo\.nope"):
        operator.execute_complete({}, event.payload)
