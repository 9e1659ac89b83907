"""Evaluate one table from a task or a trigger: catalog from the connection, state from the store."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.airflow.catalog import catalog_for
from airflow_iceberg_maint.airflow.state_store import state_store_for
from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.policy.due import Evaluation, evaluate_table
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL, Policy


def evaluate_due(
    conn_id: str,
    table: str,
    policies: Sequence[Policy[Any]] | None,
    state_url: str | None,
    source: str,
    policy_type: str = ORPHAN_FILE_REMOVAL,
) -> Evaluation:
    """The table's evaluation for the policies of ``policy_type`` (orphan removal or snapshot expiry)."""
    loaded = load_table(catalog_for(conn_id), table)
    store = state_store_for(state_url)
    uuid = str(loaded.metadata.table_uuid)
    return evaluate_table(table, uuid, policies, store, datetime.now(UTC), source, policy_type)
