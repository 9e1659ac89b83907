"""Event-triggered index and orphan maintenance for the tables of ``iceberg_indexes.yaml``.

Each defined table is an asset watched in the triggerer by two triggers:

* ``IcebergIndexLagEventTrigger``, one per index: fires when the index's lag crosses its
  threshold (once per crossing, never at every poll; its cursor survives triggerer restarts);
* ``IcebergTableSnapshotTrigger`` (apache-airflow-providers-apache-iceberg): fires on every new
  snapshot, so the orphan-removal trigger is evaluated when the table changes.

A writer that declares the asset as an outlet (``iceberg_demo_writer``) triggers a run directly.
A run maintains the tables whose assets triggered it: creates missing indexes, checks the lag
of each index, commits extracts for the lagging ones, expires old extracts, evaluates the
orphan-removal policy (``iceberg_maint_policies.yaml``) and removes orphans when it is due.
Several events arriving together make one run; a repeated event changes nothing.

Set up once: an ``iceberg`` connection ``iceberg_default``, a running triggerer, and
``airflow pools set iceberg_maint 4 "Iceberg maintenance"``. Deployments without a triggerer use
``iceberg_index_maintenance_scheduled``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from airflow.providers.apache.iceberg.triggers.iceberg import IcebergTableSnapshotTrigger
from airflow.sdk import DAG, AssetAny, AssetWatcher

from airflow_iceberg_maint.airflow.catalog import DEFAULT_CONN_ID
from airflow_iceberg_maint.airflow.index_maintenance import index_maintenance_tasks
from airflow_iceberg_maint.airflow.table_assets import table_asset
from airflow_iceberg_maint.airflow.triggers.index_events import IcebergIndexLagEventTrigger
from airflow_iceberg_maint.policy.index_definitions import IndexDefinition, load_index_definitions

DEFINITIONS = Path(__file__).with_name("iceberg_indexes.yaml")
POLICY_FILE = Path(__file__).with_name("iceberg_maint_policies.yaml")
LAG_POLL_SECONDS = 60.0
# Orphan removal runs at most every few days, so new snapshots need not be seen within a minute.
SNAPSHOT_POLL_SECONDS = 300.0


def table_watchers(table: str, indexes: Sequence[IndexDefinition]) -> list[AssetWatcher]:
    """One lag watcher per index (its own threshold), and one new-snapshot watcher; names are unique."""
    lag = [
        AssetWatcher(
            name=f"{table}.{index.name}.lag",
            trigger=IcebergIndexLagEventTrigger(
                table=table,
                iceberg_conn_id=DEFAULT_CONN_ID,
                indexes=[index.name],
                max_snapshots_behind=index.threshold.snapshots,
                max_lag_seconds=index.threshold.seconds,
                max_added_files=index.threshold.added_files,
                poll_interval=LAG_POLL_SECONDS,
            ),
        )
        for index in indexes
    ]
    snapshots = AssetWatcher(
        name=f"{table}.snapshots",
        trigger=IcebergTableSnapshotTrigger(
            table=table, iceberg_conn_id=DEFAULT_CONN_ID, poll_interval=SNAPSHOT_POLL_SECONDS
        ),
    )
    return [*lag, snapshots]


# Parse-time work is reading one YAML file: no catalog call.
TABLE_ASSETS = [
    table_asset(DEFAULT_CONN_ID, d.table, table_watchers(d.table, d.indexes))
    for d in load_index_definitions(DEFINITIONS)
]

with DAG(
    dag_id="iceberg_index_maintenance_event_triggered",
    schedule=AssetAny(*TABLE_ASSETS),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["iceberg", "maintenance", "index"],
    doc_md=__doc__,
):
    index_maintenance_tasks(str(DEFINITIONS), str(POLICY_FILE))
