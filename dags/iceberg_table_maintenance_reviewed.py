"""Manual, with a human review: a dry run, an approval form, then the delete of only what was approved.

Trigger it with the table (and the cutoff, as in ``iceberg_orphan_cleanup_manual``):

1. ``dry_run`` lists the table's orphan files and writes the full report; nothing is deleted.
2. ``review`` reads the report: the counts, the bytes, the first 20 paths and the link to the
   full report on the status plugin's report page.
3. ``approve`` (the standard provider's ``ApprovalOperator``) waits for a person: the form shows
   the review. Open it from the run's task or from *Browse → Required Actions*.
4. On **Approve**, ``delete_approved`` deletes only files of the reviewed list that a fresh check
   (same cutoff and location) still finds orphaned (safety rule S16); files found since and
   approved files referenced again are kept and counted in its report. On **Reject**, it is
   skipped: nothing is deleted.

Orphan removal only: snapshot expiry has no reviewed form yet.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, task

from airflow_iceberg_maint.airflow.catalog import DEFAULT_CONN_ID
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.airflow.operators.reviewed import (
    IcebergDeleteApprovedOrphansOperator,
    load_review,
    review_markdown,
)

with DAG(
    dag_id="iceberg_table_maintenance_reviewed",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["iceberg", "maintenance"],
    doc_md=__doc__,
    render_template_as_native_obj=True,
    params={
        "table": Param(
            type="string",
            pattern=r"^[^.\s]+(\.[^.\s]+)+$",
            title="Table",
            description="namespace.table, as the catalog names it",
        ),
        "older_than_days": Param(
            3, type="number", title="Older than (days)", description="Only files older than this (at least 1)."
        ),
    },
):
    dry_run = IcebergRemoveOrphanFilesOperator(
        task_id="dry_run", table="{{ params.table }}", older_than_days="{{ params.older_than_days }}", dry_run=True
    )

    @task
    def review(summary: dict[str, Any]) -> dict[str, Any]:
        return load_review(summary["report"], DEFAULT_CONN_ID)

    reviewed = review(dry_run.output)

    @task
    def form(review: dict[str, Any]) -> str:
        return review_markdown(review)

    approve = ApprovalOperator(
        task_id="approve",
        subject="Delete the orphan files of {{ params.table }}?",
        body="{{ ti.xcom_pull(task_ids='form') }}",
        response_timeout=timedelta(days=7),
    )
    delete = IcebergDeleteApprovedOrphansOperator(
        task_id="delete_approved",
        table="{{ params.table }}",
        approved_report="{{ ti.xcom_pull(task_ids='dry_run')['report'] }}",
    )
    form(reviewed) >> approve >> delete
