"""The index lag sensor: poke mode, and the deferrable path (defer, the trigger polls off the loop, resume)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.index import IcebergCommitIndexExtractOperator
from airflow_iceberg_maint.airflow.operators.index_definitions import IcebergCreateMissingIndexesOperator
from airflow_iceberg_maint.airflow.sensors.index_lag import IcebergIndexLagSensor
from airflow_iceberg_maint.airflow.triggers.index_lag import IcebergIndexLagTrigger
from tests.airflow.helpers import next_event
from tests.airflow.index_helpers import TABLE, append, events_table
from tests.support.airflow_dags import DAGS


@pytest.fixture
def indexed(catalog: SqlCatalog, context: Context) -> SqlCatalog:
    """demo.events with both defined indexes, each with an extract of the current snapshot."""
    events_table(catalog)
    IcebergCreateMissingIndexesOperator(task_id="c", definitions_file=str(DAGS / "iceberg_indexes.yaml")).execute(
        context
    )
    for index in ("events_by_id", "events_by_kind"):
        IcebergCommitIndexExtractOperator(task_id="x", table=TABLE, index=index).execute(context)
    return catalog


def sensor(**kwargs: Any) -> IcebergIndexLagSensor:
    return IcebergIndexLagSensor(task_id="lag", table=TABLE, index="events_by_kind", poke_interval=0.05, **kwargs)


def test_poke_reports_the_lag_against_each_bound(indexed: SqlCatalog, context: Context) -> None:
    current = sensor(max_snapshots_behind="1").poke(context)
    assert current.is_done is False
    assert (current.xcom_value["stale"], current.xcom_value["reasons"]) == (False, [])
    append(indexed, 3)
    table = append(indexed, 3)
    by_snapshots = sensor(max_snapshots_behind="1").poke(context)
    assert by_snapshots.is_done is True
    assert by_snapshots.xcom_value["reasons"] == ["2 snapshot(s) behind > 1"]
    assert by_snapshots.xcom_value["table_snapshot_id"] == table.current_snapshot().snapshot_id
    assert sensor(max_snapshots_behind=2, max_added_files=2).poke(context).xcom_value["reasons"] == []
    assert sensor(max_added_files=1).poke(context).xcom_value["reasons"] == ["2 file(s) added > 1"]
    assert sensor(max_lag_seconds=3600).poke(context).is_done is False
    assert sensor().poke(context).xcom_value["reasons"] == ["stale: 2 snapshot(s) behind"]


def test_missing_index_and_bad_bounds_fail_at_once(indexed: SqlCatalog, context: Context) -> None:
    with pytest.raises(AirflowFailException, match=r"index 'nope': table .* has no such index"):
        IcebergIndexLagSensor(task_id="lag", table=TABLE, index="nope").poke(context)
    with pytest.raises(AirflowFailException, match=r"argument max_snapshots_behind: expected a number >= 0"):
        sensor(max_snapshots_behind=-1).poke(context)
    with pytest.raises(AirflowFailException, match=r"argument max_added_files: expected a whole number"):
        sensor(max_added_files="1.5", deferrable=True).execute(context)


def test_deferrable_waits_in_the_trigger_until_the_lag_exceeds(indexed: SqlCatalog, context: Context) -> None:
    operator = sensor(max_snapshots_behind="1", deferrable=True, timeout=600)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "airflow_iceberg_maint.airflow.triggers.index_lag.IcebergIndexLagTrigger"
    assert kwargs == {
        "table": TABLE,
        "index": "events_by_kind",
        "iceberg_conn_id": "iceberg_default",
        "max_snapshots_behind": 1,
        "max_lag_seconds": None,
        "max_added_files": None,
        "poll_interval": 0.05,
    }

    append(indexed, 2)  # one snapshot behind: within the bound
    assert asyncio.run(next_event(IcebergIndexLagTrigger(**kwargs), timeout=1.0)) is None

    table = append(indexed, 2)
    event = asyncio.run(next_event(IcebergIndexLagTrigger(**kwargs), timeout=30))
    assert event.payload["status"] == "lagging"
    assert event.payload["lag"]["table_snapshot_id"] == table.current_snapshot().snapshot_id
    result = operator.execute_complete(context, event.payload)
    assert (result["snapshots_behind"], result["reasons"]) == (2, ["2 snapshot(s) behind > 1"])


def test_deferrable_returns_at_once_when_already_lagging(indexed: SqlCatalog, context: Context) -> None:
    append(indexed, 1)
    assert sensor(deferrable=True).execute(context)["reasons"] == ["stale: 1 snapshot(s) behind"]


def test_trigger_reports_errors_as_events(indexed: SqlCatalog) -> None:
    trigger = IcebergIndexLagTrigger(table=TABLE, index="nope", iceberg_conn_id="iceberg_default")
    event = asyncio.run(next_event(trigger, timeout=30))
    assert event.payload["status"] == "error" and "'nope'" in event.payload["message"]
    assert event.payload["retryable"] is False  # no such index: the resumed task fails without retry
    with pytest.raises(AirflowFailException, match=r"'nope'"):
        IcebergIndexLagSensor(task_id="lag", table=TABLE, index="nope").execute_complete({}, event.payload)
