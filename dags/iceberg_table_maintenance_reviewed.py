"""Manual, with a human review: dry runs of both steps, an approval form, then only what was approved.

Trigger it with the table (and the cutoffs; empty expiry fields take the table's
``history.expire.*`` properties, as ``iceberg-maint expire-snapshots`` does):

1. ``expire_dry_run`` plans the snapshot expiry (which snapshots and refs go, which files only
   they reach); ``dry_run`` lists the table's orphan files. Both write full reports; nothing
   is committed or deleted.
2. ``review`` reads the reports: counts, bytes, the first 20 snapshot ids and paths, and the
   links to the full reports on the status plugin's report page.
3. ``approve`` (the standard provider's ``ApprovalOperator``) waits for a person: the form shows
   the review. Open it from the run's task or from *Browse → Required Actions*.
4. On **Approve**, ``expire_approved`` plans the expiry again and expires only approved
   snapshots and refs the fresh plan still expires, deleting only approved files it still finds
   unreachable; then ``delete_approved`` deletes only approved orphans a fresh check (same cutoff
   and location) still finds orphaned (safety rule S16). What was found since is kept and
   counted in their reports. A failed expiry stops the orphan step. On **Reject**, both are
   skipped: nothing is committed or deleted.

The dry runs' reports (``<table>.expiry.dry-run.json``, ``<table>.dry-run.json``) are never
written over: they stay what the reviewer approved. The approved runs write their own
(``<table>.expiry.json``, ``<table>.json``), each naming the dry run's in ``approved_report``. A
reviewed report of another table of the same name (a new UUID) is refused.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, task

from airflow_iceberg_maint.airflow.catalog import DEFAULT_CONN_ID
from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.airflow.operators.reviewed import (
    IcebergDeleteApprovedOrphansOperator,
    load_review,
    review_markdown,
)
from airflow_iceberg_maint.airflow.operators.reviewed_expiry import (
    IcebergExpireApprovedSnapshotsOperator,
    expiry_markdown,
    load_expiry_review,
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
            3, type="number", title="Orphans older than (days)", description="Only files older than this (at least 1)."
        ),
        "expire_older_than_days": Param(
            None,
            type=["null", "number"],
            title="Expire snapshots older than (days)",
            description="Empty: the table's history.expire.max-snapshot-age-ms, else 5 days.",
        ),
        "retain_last": Param(
            None,
            type=["null", "integer"],
            title="Retain last",
            description="Every branch keeps at least this many snapshots. Empty: the table's "
            "history.expire.min-snapshots-to-keep, else 1.",
        ),
    },
):
    expire_dry_run = IcebergExpireSnapshotsOperator(
        task_id="expire_dry_run",
        table="{{ params.table }}",
        older_than_days="{{ params.expire_older_than_days }}",
        retain_last="{{ params.retain_last }}",
        dry_run=True,
    )
    dry_run = IcebergRemoveOrphanFilesOperator(
        task_id="dry_run", table="{{ params.table }}", older_than_days="{{ params.older_than_days }}", dry_run=True
    )

    @task
    def review(expiry: dict[str, Any], orphans: dict[str, Any]) -> dict[str, Any]:
        return {
            "expiry": load_expiry_review(expiry["report"], DEFAULT_CONN_ID),
            "orphans": load_review(orphans["report"], DEFAULT_CONN_ID),
        }

    reviewed = review(expire_dry_run.output, dry_run.output)

    @task
    def form(review: dict[str, Any]) -> str:
        return "\n\n".join(
            [
                "### Snapshot expiry",
                expiry_markdown(review["expiry"]),
                "### Orphan files",
                review_markdown(review["orphans"]),
            ]
        )

    approve = ApprovalOperator(
        task_id="approve",
        subject="Expire the snapshots and delete the orphan files of {{ params.table }}?",
        body="{{ ti.xcom_pull(task_ids='form') }}",
        response_timeout=timedelta(days=7),
    )
    expire = IcebergExpireApprovedSnapshotsOperator(
        task_id="expire_approved",
        table="{{ params.table }}",
        approved_report="{{ ti.xcom_pull(task_ids='expire_dry_run')['report'] }}",
    )
    delete = IcebergDeleteApprovedOrphansOperator(
        task_id="delete_approved",
        table="{{ params.table }}",
        approved_report="{{ ti.xcom_pull(task_ids='dry_run')['report'] }}",
    )
    expire_dry_run >> dry_run  # one after the other: each takes the table's lease
    form(reviewed) >> approve >> expire >> delete
