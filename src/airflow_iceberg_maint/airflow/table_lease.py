"""Where an Airflow task's table lease lives (the lease itself: ``airflow_iceberg_maint.policy.lease``).

The lease lives where the cleanup state does (``IcebergMaintenanceHook.state_store``):

* with a ``state_url`` (or ``[iceberg_maint] state_url``), in the table ``iceberg_maint_leases``
  of that database (``SqlLeases``), taken with one atomic insert or conditional update: two tasks,
  or a task and an ``iceberg-maint`` run on the same database, can never both hold it;
* otherwise in the Airflow Variable ``iceberg_maint.lease.<table>``, written then read back.
  The Task SDK offers no compare-and-set on Variables, so two tasks that read a free lease in
  the same instant can both take it; set a ``state_url`` where that matters.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.policy.lease import Lease, LeaseStore, SqlLeases

VARIABLE_PREFIX = "iceberg_maint.lease."


class VariableLeases:
    """Leases as Airflow Variables: written, then read back (no compare-and-set; see the module)."""

    def acquire(self, table: str, owner: str, expires_at: datetime, now: datetime) -> Lease | None:
        current = self.holder(table)
        if current is not None and not current.free_for(owner, now):
            return current
        mine = Lease(table, owner, expires_at)
        _variables().set(_key(table), json.dumps(mine.to_json()), description=f"iceberg-maint lease of {table}")
        after = self.holder(table)
        return None if after is not None and after.owner == owner else after

    def holder(self, table: str) -> Lease | None:
        raw = _variables().get(_key(table), None)
        return Lease.from_json(json.loads(raw)) if raw else None

    def release(self, table: str, owner: str) -> None:
        current = self.holder(table)
        if current is not None and current.owner == owner:
            _variables().delete(_key(table))


def _variables() -> Any:
    """The Task SDK's ``Variable`` in a task or the triggerer; outside them (an operator's ``execute``
    called directly) Airflow's model, which reads the metadata database: the switch Airflow's own
    ``airflow.models.Variable`` makes, without its deprecation warning."""
    if hasattr(sys.modules.get("airflow.sdk.execution_time.task_runner"), "SUPERVISOR_COMMS"):
        from airflow.sdk import Variable

        return Variable
    from airflow.models.variable import Variable as VariableModel

    return VariableModel


def _key(table: str) -> str:
    return f"{VARIABLE_PREFIX}{table}"


def lease_store_for(state_url: str | None) -> LeaseStore:
    """Where the cleanup state is: the database of ``state_url`` (or ``[iceberg_maint] state_url``), or Variables."""
    url = state_url or config.state_url()
    return SqlLeases(url) if url else VariableLeases()
