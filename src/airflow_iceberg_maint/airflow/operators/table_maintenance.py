"""``_TableMaintenanceOperator``: the base of the leased maintenance operators that write a report and record
their run (expiry, data compaction, manifest rewrite); it holds the arguments they all take."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.leased_task import TableTaskMixin


class _TableMaintenanceOperator(TableTaskMixin, MaintenanceHookMixin, BaseOperator):
    """A ``BaseOperator`` (so Airflow knows its arguments when a subclass is mapped) that its subclasses extend.

    :param table: ``namespace.table``.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param dry_run: report the plan; change nothing.
    :param report_location: base URI of report files; refused inside the table.
    :param state_url: SQLAlchemy URL of a shared state store; default: Airflow Variables.
    :param policy: name of the policy this run applies, for the summary and logs.
    :param enabled: False skips the task: the planning step's verdict for a table not due for this work.
    """

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        dry_run: bool | str = False,
        report_location: str | None = None,
        state_url: str | None = None,
        policy: str | None = None,
        enabled: bool | str = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table, self.iceberg_conn_id = table, iceberg_conn_id
        self.is_dry_run = dry_run  # not self.dry_run: BaseOperator.dry_run() is Airflow's
        self.report_location, self.state_url, self.policy, self.enabled = report_location, state_url, policy, enabled
