"""Manual: remove the orphan files of one table, from the Airflow UI's trigger form.

Trigger it with the form: choose the table, the age cutoff in days, an optional location
(the table location or a path under it) and whether to only preview. ``dry_run`` is on by
default: read the report first, then trigger again with it off. The cutoff must be at least
1 day: files younger than that may belong to writes in progress. A smaller value (or a
negative one) fails the run and deletes nothing, unless ``allow_recent_files`` is ticked;
then the run goes down to 0 (now) and logs a warning. This DAG does not consult
the policies' minimum interval: a manual run always runs. Its outcome is recorded in the
cleanup state like a scheduled run's (dry runs do not count as a cleanup).

``shards`` above 1 spreads one huge table's scan over that many mapped tasks: a plan, the
shards (each lists some directories and reads some manifests), the matches (each subtracts
the referenced files from the listed ones in some hash buckets), and one task that re-checks
against reloaded metadata and deletes. A failed shard fails the run before anything is deleted.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.airflow.sharded_orphan_removal import sharded_orphan_removal

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
        # No `minimum`: the trigger form clamps a number to it (-1 became 0), so the operator
        # checks the value as typed and refuses it with a message instead.
        "older_than_days": Param(
            3,
            type="number",
            title="Older than (days)",
            description="Only files older than this are removed. At least 1, or at least 0 with "
            "'Allow recent files'; any other value fails the run, it is never changed.",
        ),
        "allow_recent_files": Param(
            False,
            type="boolean",
            title="Allow recent files",
            description="Allow a cutoff under 1 day (0 means every unreferenced file). Unsafe while "
            "anything writes to the table: files of a write in progress may be deleted.",
        ),
        "location": Param(
            None,
            type=["null", "string"],
            title="Location",
            description="Scan only this location: the table location or a path under it. Empty: the table location.",
        ),
        "only_this_table": Param(
            False,
            type="boolean",
            title="Location holds this table only",
            description="Skip the catalog pass that finds other tables nested under the location. Tick it only "
            "when the catalog cannot be listed and no other table writes under this one.",
        ),
        "dry_run": Param(True, type="boolean", title="Dry run", description="List the orphan files, delete nothing."),
        "shards": Param(
            1,
            type="integer",
            minimum=1,
            maximum=256,
            title="Shards",
            description="1: one task scans the table. More: the scan is spread over this many mapped tasks "
            "(for tables of many millions of files).",
        ),
    },
):
    job: dict[str, Any] = {
        "table": "{{ params.table }}",
        "older_than_days": "{{ params.older_than_days }}",
        "allow_recent_files": "{{ params.allow_recent_files }}",
        "location": "{{ params.location }}",
        "only_this_table": "{{ params.only_this_table }}",
        "dry_run": "{{ params.dry_run }}",
    }

    @task.branch
    def single_or_sharded(params: dict[str, Any] | None = None) -> str:
        return "remove_orphan_files" if int((params or {}).get("shards", 1)) <= 1 else "plan_orphan_shards"

    single = IcebergRemoveOrphanFilesOperator(task_id="remove_orphan_files", **job)
    sharded = sharded_orphan_removal(shards="{{ params.shards }}", **job)
    single_or_sharded() >> [single, sharded]
