"""Manual: remove the orphan files of one table, from the Airflow UI's trigger form.

Trigger it with the form: choose the table, the age cutoff in days, an optional location
(the table location or a path under it) and whether to only preview. ``dry_run`` is on by
default: read the report first, then trigger again with it off. This DAG does not consult
the policies' minimum interval: a manual run always runs. Its outcome is recorded in the
cleanup state like a scheduled run's (dry runs do not count as a cleanup).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator

with DAG(
    dag_id="iceberg_orphan_cleanup_manual",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["iceberg", "maintenance"],
    doc_md=__doc__,
    # Params reach the operator with their types (a bool stays a bool).
    render_template_as_native_obj=True,
    params={
        "table": Param(
            type="string",
            pattern=r"^[^.\s]+(\.[^.\s]+)+$",
            title="Table",
            description="namespace.table, as the catalog names it",
        ),
        "older_than_days": Param(
            3,
            type="number",
            minimum=0,
            title="Older than (days)",
            description="Only files older than this are removed. 0 means every unreferenced file, "
            "which is unsafe while anything writes to the table.",
        ),
        "location": Param(
            None,
            type=["null", "string"],
            title="Location",
            description="Scan only this location: the table location or a path under it. Empty: the table location.",
        ),
        "dry_run": Param(True, type="boolean", title="Dry run", description="List the orphan files, delete nothing."),
    },
):
    IcebergRemoveOrphanFilesOperator(
        task_id="remove_orphan_files",
        table="{{ params.table }}",
        older_than_days="{{ params.older_than_days }}",
        location="{{ params.location }}",
        dry_run="{{ params.dry_run }}",
    )
