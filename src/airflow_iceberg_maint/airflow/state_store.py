"""Cleanup state for tasks, kept in Airflow's metadata database as Variables.

Tasks in Airflow 3 reach the metadata database only through the Task SDK, so the store uses
Variables (one JSON value per table UUID and job). They are visible and editable in the UI
(Admin → Variables): deleting one makes its table due again.
"""

from __future__ import annotations

import json

from airflow.sdk import Variable

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL
from airflow_iceberg_maint.policy.state import CleanupState, SqlStateStore, StateStore

KEY_PREFIX = "iceberg_maint.state"


def variable_key(table_uuid: str, job: str = ORPHAN_FILE_REMOVAL) -> str:
    return f"{KEY_PREFIX}.{job}.{table_uuid}"


class VariableStateStore:
    def get(self, table_uuid: str, job: str = ORPHAN_FILE_REMOVAL) -> CleanupState | None:
        raw = Variable.get(variable_key(table_uuid, job), default=None)
        return CleanupState.from_json(json.loads(raw)) if raw else None

    def put(self, state: CleanupState) -> None:
        Variable.set(
            variable_key(state.table_uuid, state.job),
            json.dumps(state.to_json()),
            description=f"iceberg-maint cleanup state of {state.table} ({state.job})",
        )


def state_store_for(state_url: str | None) -> StateStore:
    """Airflow Variables by default; a SQLAlchemy URL (the argument, else ``[iceberg_maint] state_url``)
    shares state with the ``iceberg-maint`` CLI."""
    url = state_url or config.state_url()
    return SqlStateStore(url) if url else VariableStateStore()
