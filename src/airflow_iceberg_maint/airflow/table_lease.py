"""Where an Airflow task's table lease lives (the lease itself: ``airflow_iceberg_maint.state.leases``).

The lease lives where the cleanup state does (``IcebergMaintenanceHook.state_store``):

* with a ``state_url`` (or ``[iceberg_maint] state_url``), in the table ``iceberg_maint_leases``
  of that database (``SqlLeases``), taken, renewed and checked with one conditional statement
  judged by the database's clock: two tasks, or a task and an ``iceberg-maint`` run on the same
  database, can never both hold it;
* otherwise in the Airflow Variable ``iceberg_maint.lease.<table>``, written then read back,
  judged by each worker's clock, AND in the state file of the worker's host that ``iceberg-maint``
  uses by default (``state.cleanup.default_state_url``), taken first (``HostAndVariableLeases``).
  So out of the box an Airflow task and an ``iceberg-maint`` run on the same host exclude each
  other, and tasks on any worker exclude each other through the Variable. The Task SDK offers no
  compare-and-set on Variables, so two tasks on different hosts that read a free lease in the same
  instant can both take it, and a command-line run on another host sees neither: set a
  ``state_url`` shared by both where that matters.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.shared_storage import require_shared_state
from airflow_iceberg_maint.state.cleanup import default_state_url
from airflow_iceberg_maint.state.leases import Lease, LeaseStore
from airflow_iceberg_maint.state.sql_leases import SqlLeases

VARIABLE_PREFIX = "iceberg_maint.lease."


class VariableLeases:
    """Leases as Airflow Variables: written, then read back (no compare-and-set; see the module)."""

    def acquire(
        self, table: str, owner: str, ttl: timedelta, token: str, process: str, stale: str | None = None
    ) -> Lease:
        now = datetime.now(UTC)
        current = self.holder(table)
        if current is not None and not (current.free_for(owner, now) or current.token == stale):
            return current
        self._write(Lease(table, owner, now + ttl, token, process))
        return self.holder(table) or Lease(table, "(released meanwhile)", now)

    def renew(self, lease: Lease, ttl: timedelta) -> bool:
        now = datetime.now(UTC)
        current = self.holder(lease.table)
        if current is None or (current.owner, current.token) != (lease.owner, lease.token) or current.expires_at <= now:
            return False
        self._write(Lease(lease.table, lease.owner, now + ttl, lease.token, lease.process))
        return True

    def holder(self, table: str) -> Lease | None:
        raw = _variables().get(_key(table), None)
        return Lease.from_json(json.loads(raw)) if raw else None

    def release(self, lease: Lease) -> None:
        current = self.holder(lease.table)
        if current is not None and (current.owner, current.token) == (lease.owner, lease.token):
            _variables().delete(_key(lease.table))

    def _write(self, lease: Lease) -> None:
        text = json.dumps(lease.to_json())
        _variables().set(_key(lease.table), text, description=f"iceberg-maint lease of {lease.table}")


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


class HostAndVariableLeases:
    """Two leases held as one: the host's state file (the command line's default store), then the Variable.

    The host's is taken first and given back when the Variable is held, so that a task and an
    ``iceberg-maint`` run on one host, or two tasks anywhere, never both hold the table.
    """

    def __init__(self, host: LeaseStore, variables: LeaseStore) -> None:
        self.host, self.variables = host, variables

    def acquire(
        self, table: str, owner: str, ttl: timedelta, token: str, process: str, stale: str | None = None
    ) -> Lease:
        first = self.host.acquire(table, owner, ttl, token, process, stale)
        if first.token != token:
            return first
        try:
            second = self.variables.acquire(table, owner, ttl, token, process, stale)
        except BaseException:
            self.host.release(first)
            raise
        if second.token != token:
            self.host.release(first)
        return second

    def renew(self, lease: Lease, ttl: timedelta) -> bool:
        return self.host.renew(lease, ttl) and self.variables.renew(lease, ttl)

    def holder(self, table: str) -> Lease | None:
        return self.host.holder(table) or self.variables.holder(table)

    def release(self, lease: Lease) -> None:
        try:
            self.variables.release(lease)
        finally:
            self.host.release(lease)


def lease_store_for(state_url: str | None) -> LeaseStore:
    """Where the cleanup state is: the database of ``state_url`` (or ``[iceberg_maint] state_url``), or else
    the Variables together with the host's default state file (``HostAndVariableLeases``)."""
    url = require_shared_state(state_url or config.state_url())  # one lease for every worker (shared_storage)
    return SqlLeases(url) if url else HostAndVariableLeases(SqlLeases(default_state_url()), VariableLeases())
