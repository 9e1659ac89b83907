"""``IcebergMaintenanceHook``: the provider's one way to its catalog, tables, state store and records.

It extends ``IcebergHook`` of apache-airflow-providers-apache-iceberg (the ``iceberg`` connection
type; any pyiceberg catalog through the extra's ``type``) with what maintenance needs:

* the catalog, named after the connection id unless the extra's ``catalog_name`` names it (a SQL
  catalog whose tables were registered under another name), with errors that say what to set;
* tables loaded with the core's errors (``TableNotFoundError`` naming the table and catalog);
* the cleanup-state store and the status records: Airflow Variables, or the SQL database of
  ``state_url`` (the argument, else ``[iceberg_maint] state_url``), shared with the command line;
* due evaluation and index lags, each reading the table once.

Operators and sensors reach it as ``self.hook`` (``MaintenanceHookMixin``); triggers build one per check.

``IcebergHook`` gets the connection through Airflow's own API: inside a task from the API server,
elsewhere (the command line) from ``AIRFLOW_CONN_<ID>`` variables (JSON or URI form) and the
secrets backends of ``[secrets] backend``; a connection kept only in the metadata database is not
reachable from the command line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.sdk.exceptions import AirflowNotFoundException
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.shared_storage import require_shared_state
from airflow_iceberg_maint.airflow.variable_store import VariableRecords, VariableStateStore
from airflow_iceberg_maint.catalog import load_error_message, load_table
from airflow_iceberg_maint.errors import IndexNotFoundError, InvalidInputError
from airflow_iceberg_maint.index.lifecycle.lag import IndexLag, index_lag
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.policy.due import Evaluation, evaluate_table
from airflow_iceberg_maint.policy.lag_threshold import CheckedLag, LagThreshold, record_refreshed_lag
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL, Policy
from airflow_iceberg_maint.state import status_records
from airflow_iceberg_maint.state.cleanup import SqlStateStore, StateStore
from airflow_iceberg_maint.state.status_records import RecordLog, RecordStore, RunRecord, SqlRecords

DEFAULT_CONN_ID = IcebergHook.default_conn_name
#: The connection extra naming the catalog, when not the connection id.
CATALOG_NAME_EXTRA = "catalog_name"


def connection_not_found_message(conn_id: str) -> str:
    """What to define for connection ``conn_id``, in the forms Airflow reads outside a task too."""
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    forms = (
        'JSON such as {"conn_type": "iceberg", "host": CATALOG_URI, "extra": {"type": ..., "warehouse": ...}}, or a URI'
    )
    if os.environ.get(variable):
        # Airflow skips a variable it cannot parse and reports the connection as undefined.
        return f"connection {conn_id!r}: {variable} is set but is not a connection Airflow can read: expected {forms}"
    return f"connection {conn_id!r} is not defined: set {variable} to {forms}, or define it in a secrets backend"


class IcebergMaintenanceHook(IcebergHook):
    """An ``iceberg`` connection's catalog, tables, state store and status records.

    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: SQLAlchemy URL of a shared state store; None: ``[iceberg_maint] state_url``,
        else Airflow Variables.
    """

    hook_name = "Iceberg maintenance"

    def __init__(self, iceberg_conn_id: str = DEFAULT_CONN_ID, state_url: str | None = None) -> None:
        super().__init__(iceberg_conn_id=iceberg_conn_id)
        self.state_url = state_url or config.state_url()

    @cached_property
    def catalog(self) -> Catalog:
        """The connection's pyiceberg catalog; a connection that is not defined, or whose settings
        pyiceberg refuses, is an ``InvalidInputError`` saying what to set."""
        conn_id = self.conn_id
        try:
            catalog = super().catalog
            # IcebergHook passes the whole extra to pyiceberg, so the extra's catalog_name is among the properties.
            name = catalog.properties.get(CATALOG_NAME_EXTRA)
            if name is None or name == catalog.name:
                return catalog
            if not isinstance(name, str) or not name:
                raise InvalidInputError(
                    f"connection {conn_id!r}: extra {CATALOG_NAME_EXTRA!r} must be a non-empty string, got {name!r}"
                )
            return load_catalog(name, **catalog.properties)
        except AirflowNotFoundException as exc:
            raise InvalidInputError(connection_not_found_message(conn_id)) from exc
        except InvalidInputError:
            raise
        except ValueError as exc:
            uri_hint = 'set the connection\'s host (Catalog URI) or "uri" in its extra'
            raise InvalidInputError(load_error_message(f"connection {conn_id!r}", exc, uri_hint)) from exc

    def load_table(self, table_name: str) -> Table:
        """The table ``namespace.table``; a missing table is ``TableNotFoundError`` naming it and the catalog."""
        return load_table(self.catalog, table_name)

    @cached_property
    def state_store(self) -> StateStore:
        url = require_shared_state(self.state_url)  # one state for every worker (shared_storage)
        return SqlStateStore(url) if url else VariableStateStore()

    @cached_property
    def record_store(self) -> RecordStore:
        """Where the status records go: the same place as the state."""
        url = require_shared_state(self.state_url)
        return SqlRecords(url) if url else VariableRecords()

    def evaluate_due(
        self,
        table: str,
        policies: Sequence[Policy[Any]] | None,
        source: str,
        policy_type: str = ORPHAN_FILE_REMOVAL,
    ) -> Evaluation:
        """Whether ``table`` is due for ``policy_type`` (orphan removal or snapshot expiry) under ``policies``
        (None: the default interval, orphan removal only)."""
        loaded = self.load_table(table)
        uuid = str(loaded.metadata.table_uuid)
        now = datetime.now(UTC)
        return evaluate_table(table, uuid, policies, self.state_store, now, source, policy_type, loaded=loaded)

    def index_lags(self, table: str, indexes: Sequence[str] | None, missing_ok: bool = False) -> list[IndexLag]:
        """The lag of each named index of the table (None: every index it has), the table loaded once.

        A named index that does not exist is an error, or skipped with ``missing_ok`` (an index the
        maintenance DAG has yet to create).
        """
        loaded = self.load_table(table)
        store = IndexStore(loaded)
        lags = []
        for name in store.names() if indexes is None else indexes:
            try:
                metadata, _, _ = store.load(name)
            except IndexNotFoundError:
                if missing_ok:
                    continue
                raise
            lags.append(index_lag(loaded, name, metadata))
        return lags

    def check_index_lags(
        self, table: str, indexes: Sequence[str] | None, threshold: LagThreshold, missing_ok: bool = False
    ) -> list[CheckedLag]:
        """``index_lags`` checked against one threshold."""
        return [CheckedLag(lag, threshold.exceeded(lag)) for lag in self.index_lags(table, indexes, missing_ok)]

    def record_index_lags(self, table: str, lags: Iterable[Mapping[str, Any]], log: RecordLog) -> None:
        """Record the lags just checked for the status page (best effort: a failure is logged)."""
        status_records.record_index_lags(self.record_store, table, lags, datetime.now(UTC), log)

    def record_refreshed_lag(self, table: str, index: str, log: RecordLog) -> None:
        """Measure an index's lag after a commit of its extract and record it (best effort: a failure is logged)."""
        try:
            (lag,) = self.index_lags(table, [index])
        except Exception as exc:  # the dashboard must never fail the maintenance
            log.warning("index %s of %s: lag after the commit not measured for the status page: %s", index, table, exc)
            return
        record_refreshed_lag(self.record_store, table, lag, datetime.now(UTC), log)

    def record_health(self, table: str, health: Mapping[str, Any], at: datetime, log: RecordLog) -> None:
        """Record a table's health check that ran at ``at`` for the status page (best effort)."""
        status_records.record_health(self.record_store, table, health, at, log)

    def record_policy_tables(self, tables: Mapping[str, str], log: RecordLog) -> None:
        status_records.record_policy_tables(self.record_store, tables, datetime.now(UTC), log)

    def record_run(self, table: str, run: RunRecord, log: RecordLog) -> None:
        status_records.record_run(self.record_store, table, run, log)


class MaintenanceHookMixin:
    """``self.hook`` for an operator or sensor with ``iceberg_conn_id`` (and ``state_url``, when it keeps state)."""

    iceberg_conn_id: str
    state_url: str | None = None

    @cached_property
    def hook(self) -> IcebergMaintenanceHook:
        return IcebergMaintenanceHook(self.iceberg_conn_id, state_url=self.state_url)
