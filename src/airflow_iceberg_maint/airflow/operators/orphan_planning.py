"""The operators that plan orphan removal: one job per due table, for dynamic task mapping.

``IcebergOrphanPolicyExpansionOperator`` evaluates every table the policies attach;
``IcebergOrphanDueTablesOperator`` evaluates a given list (the tables an event named).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context
from pyiceberg.catalog import Catalog

from airflow_iceberg_maint.airflow.arguments import TableList
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.reports import share_catalog_pass
from airflow_iceberg_maint.airflow.task_errors import task_exception
from airflow_iceberg_maint.errors import MaintenanceError, TableNotFoundError
from airflow_iceberg_maint.policy.due import evaluate_table
from airflow_iceberg_maint.policy.index_definitions import table_names
from airflow_iceberg_maint.policy.job_config import build_orphan_job, plan_orphan_jobs
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL, load_policies, policy_for_table

EVALUATIONS_KEY = "evaluations"


class _OrphanPlanningOperator(MaintenanceHookMixin, BaseOperator):
    """What both planning operators share: their arguments, error handling and the catalog pass."""

    ui_color = "#e8f0d4"

    def __init__(
        self,
        *,
        policy_file: str,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        state_url: str | None = None,
        report_location: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.policy_file = policy_file
        self.iceberg_conn_id = iceberg_conn_id
        self.state_url = state_url
        self.report_location = report_location

    def execute(self, context: Context) -> list[dict[str, Any]]:
        try:
            return self._plan(context)
        except MaintenanceError as exc:  # it names the policy file, the table or the location itself
            raise task_exception(None, exc) from exc

    @abstractmethod
    def _plan(self, context: Context) -> list[dict[str, Any]]:
        """The jobs of the due tables; core errors propagate to ``execute``."""

    def _share_catalog_pass(self, context: Context, catalog: Catalog) -> str | None:
        """One catalog pass for the removal tasks of this run (nested tables), saved under the report base."""
        ti = context["ti"]
        return share_catalog_pass(catalog, ti.dag_id, ti.run_id, self.report_location, self.log)


class IcebergOrphanPolicyExpansionOperator(_OrphanPlanningOperator):
    """Evaluate every table the policies attach; return the jobs of the due ones, highest score first.

    The return value feeds ``IcebergRemoveOrphanFilesOperator.partial(...).expand_kwargs(...)``:
    each item holds ``table``, ``older_than`` (absolute UTC), ``location`` (validated),
    ``dry_run``, ``policy`` and ``allow_recent_files`` (the policy's ``allowRecentFiles``, which
    lets the removal task accept a cutoff under 1 day). Every evaluation, due or not, with its
    reason, is pushed to XCom under the key ``evaluations``. A bad policy file (including an
    ``olderThanDays`` under 1 without ``allowRecentFiles``), an attached table that does not
    exist or a refused location fails the task without retries; a fault that may pass (an
    unreachable state store or catalog) fails the try, so the task's retries apply.

    :param policy_file: JSON or YAML policy file, read when the task runs.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: SQLAlchemy URL of a shared state store; default: Airflow Variables.
    :param report_location: where the run's catalog pass is saved for the removal tasks (give them
        the same base; default ``$AIRFLOW_HOME/iceberg_maint/reports``).
    """

    template_fields: Sequence[str] = ("policy_file", "report_location")

    def _plan(self, context: Context) -> list[dict[str, Any]]:
        policies = load_policies(self.policy_file)
        catalog = self.hook.catalog
        now = datetime.now(UTC)
        plan = plan_orphan_jobs(catalog, policies, self.hook.state_store, now, source=str(self.policy_file))
        self.hook.record_policy_tables({e.table: e.table_uuid for e in plan.evaluations}, self.log)
        for evaluation in plan.evaluations:
            self.log.info("%s: %s", evaluation.table, evaluation.reason)
        self.log.info("%d of %d attached tables are due", len(plan.jobs), len(plan.evaluations))
        context["ti"].xcom_push(key=EVALUATIONS_KEY, value=[e.to_json() for e in plan.evaluations])
        # Only orphan-removal policies have the floor; a policy file may hold expiry policies too.
        allow_recent = {p.name: p.content.allow_recent_files for p in policies if p.type == ORPHAN_FILE_REMOVAL}
        shared = {"other_tables_uri": self._share_catalog_pass(context, catalog)} if plan.jobs else {}
        return [
            {**job.to_json(), "policy": policy, "allow_recent_files": allow_recent[policy], **shared}
            for job, policy in plan.jobs
        ]


class IcebergOrphanDueTablesOperator(_OrphanPlanningOperator):
    """Evaluate the given tables against the policy file; return the jobs of the due ones.

    Like ``IcebergOrphanPolicyExpansionOperator``, but for a known list of tables (the ones an
    event named) instead of every table the policies attach: the return value feeds
    ``IcebergRemoveOrphanFilesOperator.partial(...).expand_kwargs(...)``, and every evaluation
    is pushed under ``evaluations``. A table no policy attaches is never due; a table that
    does not exist is skipped with a warning. Each job carries ``allow_recent_files`` from its
    policy's ``allowRecentFiles``.

    :param tables: tables to evaluate (list or comma-separated).
    :param policy_file: JSON or YAML policy file, read when the task runs.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: SQLAlchemy URL of a shared state store; default: Airflow Variables.
    :param report_location: where the run's catalog pass is saved for the removal tasks.
    """

    template_fields: Sequence[str] = ("tables", "policy_file", "report_location")

    def __init__(self, *, tables: TableList, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tables = tables

    def _plan(self, context: Context) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        evaluations = []
        jobs = []
        policies = load_policies(self.policy_file)
        store = self.hook.state_store
        for name in table_names(self.tables) or []:
            try:
                table = self.hook.load_table(name)
            except TableNotFoundError:
                self.log.warning("%s: table does not exist; not evaluated", name)
                continue
            evaluation = evaluate_table(
                name, str(table.metadata.table_uuid), policies, store, now, str(self.policy_file), loaded=table
            )
            self.log.info("%s: %s", name, evaluation.reason)
            evaluations.append(evaluation)
            policy = policy_for_table(policies, name)
            if evaluation.due and policy is not None:
                job = build_orphan_job(name, table.metadata.location, policy.content, now)
                # The removal task refuses a cutoff under 1 day unless the policy opted in.
                item = {**job.to_json(), "policy": policy.name, "allow_recent_files": policy.content.allow_recent_files}
                jobs.append((item, evaluation.score))
        context["ti"].xcom_push(key=EVALUATIONS_KEY, value=[e.to_json() for e in evaluations])
        self.log.info("%d of %d tables are due for orphan removal", len(jobs), len(evaluations))
        if jobs:
            uri = self._share_catalog_pass(context, self.hook.catalog)
            jobs = [({**job, "other_tables_uri": uri}, score) for job, score in jobs]
        return [job for job, _ in sorted(jobs, key=lambda j: j[1], reverse=True)]
