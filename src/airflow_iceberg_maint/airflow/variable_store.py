"""Cleanup state and status records for tasks, kept in Airflow's metadata database as Variables.

Tasks in Airflow 3 reach the metadata database only through the Task SDK, so the stores use
Variables (one JSON value per table UUID and job, one per record). They are visible and editable
in the UI (Admin → Variables): deleting a state makes its table due again. Keys are those of
``state.status_records``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.sdk import Variable

from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL
from airflow_iceberg_maint.state.cleanup import CleanupState
from airflow_iceberg_maint.state.status_records import STATE_PREFIX


def variable_key(table_uuid: str, job: str = ORPHAN_FILE_REMOVAL) -> str:
    return f"{STATE_PREFIX}{job}.{table_uuid}"


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


class VariableRecords:
    """Status records as Airflow Variables (through the Task SDK: tasks only)."""

    def get(self, key: str) -> dict[str, Any] | None:
        raw = Variable.get(key, default=None)
        return json.loads(raw) if raw else None

    def put(self, key: str, body: Mapping[str, Any], description: str) -> None:
        Variable.set(key, json.dumps(body), description=description)
