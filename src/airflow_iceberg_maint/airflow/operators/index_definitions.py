"""Index maintenance operators that work through the index definitions file: create the missing
indexes, and plan refreshes by lag (``policy.lag_plan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from pyiceberg.table import Table

from airflow_iceberg_maint.airflow.arguments import TableList
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.task_errors import task_exception
from airflow_iceberg_maint.errors import IndexExistsError, MaintenanceError, TableNotFoundError
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.placement import use_index_location
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.policy.index_definitions import (
    IndexDefinition,
    load_index_definitions,
    select_tables,
    table_names,
)
from airflow_iceberg_maint.policy.lag_plan import LagPlan

EXPIRE_KEY = "expire"
LAGS_KEY = "lags"
SHARDED_KEY = "sharded"


class _DefinitionsOperator(MaintenanceHookMixin, BaseOperator):
    """Works through the indexes of a definitions file, for some or all of its tables."""

    template_fields: Sequence[str] = ("definitions_file", "tables")

    def __init__(
        self,
        *,
        definitions_file: str,
        tables: TableList | None = None,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        state_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.definitions_file = definitions_file
        self.tables = tables
        self.iceberg_conn_id = iceberg_conn_id
        self.state_url = state_url  # where the lag plan records lags for the status page (None: Variables)


class IcebergCreateMissingIndexesOperator(_DefinitionsOperator):
    """Create each index of the definitions file that its table lacks; existing indexes are left alone.

    Returns ``[{table, index, created}]``. A table's ``index_location`` is recorded first, as
    ``index create --location`` does. A defined table that does not exist yet is skipped
    with a warning (a writer may create it later). A definition the table cannot take (unknown
    column, bad expression) fails the task. Creation is an exclusive create, so a retry or a
    concurrent run never creates an index twice.

    :param definitions_file: index definitions (YAML), e.g. ``dags/iceberg_indexes.yaml``.
    :param tables: only these tables (list or comma-separated); None: every defined table.
    :param iceberg_conn_id: an ``iceberg`` connection.
    """

    ui_color = "#e0d4f7"

    def execute(self, context: Context) -> list[dict[str, Any]]:
        try:
            definitions = select_tables(load_index_definitions(self.definitions_file), table_names(self.tables))
            results = []
            for definition in definitions:
                try:
                    table = self.hook.load_table(definition.table)
                except TableNotFoundError:
                    self.log.warning(
                        "%s: table does not exist yet; its indexes are created once it does", definition.table
                    )
                    continue
                store = IndexStore(table)
                existing = set(store.names())
                if definition.index_location is not None and {i.name for i in definition.indexes} - existing:
                    for index in definition.indexes:
                        self._metadata(table, index)  # a bad definition fails before the location is recorded
                    store = IndexStore(use_index_location(table, definition.index_location))
                    table, existing = store.table, set(store.names())
                for index in definition.indexes:
                    created = index.name not in existing and self._create(store, table, index)
                    results.append({"table": definition.table, "index": index.name, "created": created})
        except MaintenanceError as exc:
            raise task_exception(f"index definitions {self.definitions_file}", exc) from exc
        self.log.info("created %d of %d defined indexes", sum(r["created"] for r in results), len(results))
        return results

    @staticmethod
    def _metadata(table: Table, index: IndexDefinition) -> IndexMetadata:
        ordering, identity, properties = list(index.ordering), list(index.identity), dict(index.properties)
        return new_index_metadata(table, index.name, ordering, identity, index.with_row_location, properties)

    def _create(self, store: IndexStore, table: Table, index: IndexDefinition) -> bool:
        metadata = self._metadata(table, index)
        try:
            location = store.create(metadata, index.name)
        except IndexExistsError:
            self.log.info("%s index %s: created concurrently by another run", index.table, index.name)
            return False
        self.log.info(
            "%s index %s: created (ordering %s) at %s", index.table, index.name, ", ".join(index.ordering), location
        )
        return True


class IcebergIndexLagPlanOperator(_DefinitionsOperator):
    """Check the lag of each defined index against its threshold; return those that lag.

    The return value, ``[{table, index}]``, feeds
    ``IcebergCommitIndexExtractOperator.partial(...).expand_kwargs(...)``. Also pushed: under
    ``lags`` every index's lag with ``lagging`` and ``reasons``, under ``expire`` one
    ``{table, index, retain_last}`` per existing index, for
    ``IcebergExpireIndexExtractsOperator``, and under ``sharded`` the lagging indexes defined
    with ``shards`` > 1 as ``{table, index, shards}``, for ``IcebergPlanIndexShardsOperator``
    (those are not in the return value). Indexes not created yet are left out.

    :param definitions_file: index definitions (YAML); thresholds come from each index's ``lag``.
    :param tables: only these tables (list or comma-separated); None: every defined table.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: where each table's lags are recorded for the status page: a SQLAlchemy URL, or
        None for Airflow Variables (``iceberg_maint.index_lag.<table>``).
    """

    ui_color = "#f7ecd4"

    def execute(self, context: Context) -> list[dict[str, Any]]:
        plan = LagPlan()
        try:
            for definition in select_tables(load_index_definitions(self.definitions_file), table_names(self.tables)):
                names = [index.name for index in definition.indexes]
                try:
                    measured = self.hook.index_lags(definition.table, names, missing_ok=True)
                except TableNotFoundError:
                    self.log.warning("%s: table does not exist yet", definition.table)
                    continue
                checked = plan.add(definition, measured)
                for one in checked:
                    reasons = "; ".join(one.reasons) or "within its lag threshold"
                    self.log.info("%s index %s: %s", definition.table, one.lag.index, reasons)
                if checked:
                    bounds = {i.name: i.threshold.to_json() for i in definition.indexes}
                    lags = [{**c.to_json(), "threshold": bounds[c.lag.index]} for c in checked]
                    self.hook.record_index_lags(definition.table, lags, self.log)
        except MaintenanceError as exc:
            raise task_exception(f"index lag plan from {self.definitions_file}", exc) from exc
        self.log.info(
            "%d of %d indexes lag beyond their threshold (%d rebuilt sharded)",
            len(plan.lagging) + len(plan.sharded),
            len(plan.lags),
            len(plan.sharded),
        )
        context["ti"].xcom_push(key=LAGS_KEY, value=plan.lags)
        context["ti"].xcom_push(key=SHARDED_KEY, value=plan.sharded)
        context["ti"].xcom_push(key=EXPIRE_KEY, value=plan.expire)
        return plan.lagging
