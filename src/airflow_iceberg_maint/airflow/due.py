"""Evaluate one table from a task or a trigger: catalog from the connection, state from the store."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.airflow.catalog import catalog_for
from airflow_iceberg_maint.airflow.state_store import state_store_for
from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.policy.due import Evaluation, evaluate_table
from airflow_iceberg_maint.policy.policies import Policy


def evaluate_due(
    conn_id: str, table: str, policies: Sequence[Policy[Any]] | None, state_url: str | None, source: str
) -> Evaluation:
    loaded = load_table(catalog_for(conn_id), table)
    store = state_store_for(state_url)
    return evaluate_table(table, str(loaded.metadata.table_uuid), policies, store, datetime.now(UTC), source)
