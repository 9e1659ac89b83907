"""Test-only DAG for the real triggerer: an asset watched by the index-lag event trigger, polling every second.

Unpaused at creation so the DAG processor registers the watcher's trigger for the triggerer.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher

from airflow_iceberg_maint.airflow.triggers.index_events import IcebergIndexLagEventTrigger

WATCHED = Asset(
    name="index_lag_watched",
    uri="iceberg-test://iceberg_default/demo/events",
    watchers=[
        AssetWatcher(
            name="events_by_id_lag",
            trigger=IcebergIndexLagEventTrigger(
                table="demo.events",
                iceberg_conn_id="iceberg_default",
                indexes=["events_by_id"],
                max_snapshots_behind=0,
                poll_interval=1.0,
            ),
        )
    ],
)

with DAG(
    dag_id="index_lag_watched",
    schedule=[WATCHED],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    is_paused_upon_creation=False,
):
    EmptyOperator(task_id="noop")
