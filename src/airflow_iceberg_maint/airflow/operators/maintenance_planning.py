"""The operators that plan snapshot expiry, alone or with compaction and orphan removal, for dynamic task mapping.

``IcebergExpiryPolicyExpansionOperator`` returns one expiry job per table due for expiry;
``IcebergMaintenancePlanOperator`` returns one item per table due for any kind, for the mapped
group of ``iceberg_table_maintenance_scheduled`` (rewrite data files and manifests, expire, remove orphans).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Context

from airflow_iceberg_maint.airflow.operators.orphan_planning import EVALUATIONS_KEY, _OrphanPlanningOperator
from airflow_iceberg_maint.policy.due import Evaluation
from airflow_iceberg_maint.policy.job_config import (
    CompactionPlan,
    ExpiryPlan,
    OrphanPlan,
    plan_compaction_jobs,
    plan_expiry_jobs,
    plan_orphan_jobs,
)
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL, load_policies

#: XCom key of the expiry evaluations (the orphan ones stay under ``evaluations``).
EXPIRY_EVALUATIONS_KEY = "expiry_evaluations"
#: XCom key of the compaction evaluations.
COMPACTION_EVALUATIONS_KEY = "compaction_evaluations"


def expiry_items(plan: ExpiryPlan) -> list[dict[str, Any]]:
    """``IcebergExpireSnapshotsOperator`` keyword arguments of each due table, highest score first."""
    return [{**job.to_json(), "policy": policy} for job, policy in plan.jobs]


class IcebergExpiryPolicyExpansionOperator(_OrphanPlanningOperator):
    """Evaluate every table the snapshot-expiry policies attach; return the jobs of the due ones.

    The return value feeds ``IcebergExpireSnapshotsOperator.partial(...).expand_kwargs(...)``:
    each item holds ``table``, ``older_than`` (absolute UTC), ``retain_last`` (the policy's, else
    the table's ``history.expire.min-snapshots-to-keep``), ``dry_run`` and ``policy``, highest
    score ("days since last expiry") first. Every evaluation is pushed to XCom under
    ``expiry_evaluations``. Errors fail the task as the orphan planning's do.

    :param policy_file: JSON or YAML policy file, read when the task runs.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: SQLAlchemy URL of a shared state store; default: Airflow Variables.
    :param report_location: unused by expiry planning; accepted like the orphan planners'.
    """

    template_fields: Sequence[str] = ("policy_file",)

    def _plan(self, context: Context) -> list[dict[str, Any]]:
        policies = load_policies(self.policy_file)
        now = datetime.now(UTC)
        plan = plan_expiry_jobs(self.hook.catalog, policies, self.hook.state_store, now, str(self.policy_file))
        _log_evaluations(self, plan.evaluations, len(plan.jobs), "snapshot expiry")
        context["ti"].xcom_push(key=EXPIRY_EVALUATIONS_KEY, value=[e.to_json() for e in plan.evaluations])
        return expiry_items(plan)


class IcebergMaintenancePlanOperator(_OrphanPlanningOperator):
    """Evaluate every attached table for each kind; return one item per table due for any.

    Each item feeds the mapped group of ``iceberg_table_maintenance_scheduled`` (``expand_kwargs``):
    ``table``; ``compact`` (due for data compaction) with ``target_file_size_mb``, ``min_input_files``,
    ``strategy``, ``compact_dry_run`` and ``compact_policy``; ``expire`` (due for expiry) with
    ``expire_older_than``, ``retain_last``, ``expire_dry_run`` and ``expire_policy``; ``remove_orphans``
    (due for orphan removal) with ``older_than``, ``location``, ``dry_run``, ``policy``, ``allow_recent_files``,
    ``other_tables_uri``, ``memory_budget_mb`` (the policy's ``memoryBudgetMb``; None: the default) and
    ``listing`` (the policy's inventory; None: list storage).
    A part that is not due has its flag false and its other keys None.
    Items are sorted by the highest of the scores. The evaluations are pushed under
    ``evaluations`` (orphan removal), ``expiry_evaluations`` and ``compaction_evaluations``.

    :param policy_file: JSON or YAML policy file with policies of either kind, read when the task runs.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: SQLAlchemy URL of a shared state store; default: Airflow Variables.
    :param report_location: where the run's catalog pass is saved for the removal tasks.
    """

    template_fields: Sequence[str] = ("policy_file", "report_location")

    def _plan(self, context: Context) -> list[dict[str, Any]]:
        policies = load_policies(self.policy_file)
        catalog = self.hook.catalog
        now = datetime.now(UTC)
        store = self.hook.state_store
        source = str(self.policy_file)
        expiry = plan_expiry_jobs(catalog, policies, store, now, source)
        orphans = plan_orphan_jobs(catalog, policies, store, now, source)
        compaction = plan_compaction_jobs(catalog, policies, store, now, source)
        evaluated = {
            e.table: e.table_uuid for e in [*expiry.evaluations, *orphans.evaluations, *compaction.evaluations]
        }
        self.hook.record_policy_tables(evaluated, self.log)
        _log_evaluations(self, expiry.evaluations, len(expiry.jobs), "snapshot expiry")
        _log_evaluations(self, orphans.evaluations, len(orphans.jobs), "orphan removal")
        _log_evaluations(self, compaction.evaluations, len(compaction.jobs), "data compaction")
        context["ti"].xcom_push(key=COMPACTION_EVALUATIONS_KEY, value=[e.to_json() for e in compaction.evaluations])
        context["ti"].xcom_push(key=EXPIRY_EVALUATIONS_KEY, value=[e.to_json() for e in expiry.evaluations])
        context["ti"].xcom_push(key=EVALUATIONS_KEY, value=[e.to_json() for e in orphans.evaluations])
        allow_recent = {p.name: p.content.allow_recent_files for p in policies if p.type == ORPHAN_FILE_REMOVAL}
        uri = self._share_catalog_pass(context, catalog) if orphans.jobs else None
        return table_items(expiry, orphans, allow_recent, uri, compaction)


def table_items(
    expiry: ExpiryPlan,
    orphans: OrphanPlan,
    allow_recent: dict[str, bool],
    other_tables_uri: str | None,
    compaction: CompactionPlan | None = None,
) -> list[dict[str, Any]]:
    """One item per table due for any kind, the table with the highest score of any first."""
    compacting = compaction.evaluations if compaction else []
    scores: dict[str, float] = {}
    for e in [*expiry.evaluations, *orphans.evaluations, *compacting]:
        if e.due:
            scores[e.table] = max(scores.get(e.table, 0.0), e.score)
    expire = {job.table: (job, policy) for job, policy in expiry.jobs}
    remove = {job.table: (job, policy) for job, policy in orphans.jobs}
    compact = {job.table: (job, policy) for job, policy in (compaction.jobs if compaction else [])}
    items = []
    for table in sorted(set(expire) | set(remove) | set(compact), key=lambda t: (-scores.get(t, 0.0), t)):
        item: dict[str, Any] = {"table": table, "expire": table in expire, "remove_orphans": table in remove}
        c_job, c_policy = compact.get(table, (None, None))
        item.update(
            compact=c_job is not None,
            target_file_size_mb=c_job.target_file_size_mb if c_job else None,
            min_input_files=c_job.min_input_files if c_job else None,
            strategy=c_job.strategy if c_job else "binpack",
            compact_dry_run=c_job.dry_run if c_job else False,
            compact_policy=c_policy,
        )
        e_job, e_policy = expire.get(table, (None, None))
        item.update(
            expire_older_than=e_job.older_than.isoformat() if e_job else None,
            retain_last=e_job.retain_last if e_job else None,
            expire_dry_run=e_job.dry_run if e_job else False,
            expire_policy=e_policy,
        )
        o_job, o_policy = remove.get(table, (None, None))
        item.update(
            older_than=o_job.older_than.isoformat() if o_job else None,
            location=o_job.location if o_job else None,
            dry_run=o_job.dry_run if o_job else False,
            policy=o_policy,
            allow_recent_files=allow_recent[o_policy] if o_policy else False,
            other_tables_uri=other_tables_uri if o_job else None,
            memory_budget_mb=o_job.memory_budget_mb if o_job else None,
            listing=o_job.listing if o_job else None,
        )
        items.append(item)
    return items


def _log_evaluations(task: _OrphanPlanningOperator, evaluations: list[Evaluation], due: int, kind: str) -> None:
    for evaluation in evaluations:
        task.log.info("%s (%s): %s", evaluation.table, kind, evaluation.reason)
    task.log.info("%d of %d attached tables are due for %s", due, len(evaluations), kind)
