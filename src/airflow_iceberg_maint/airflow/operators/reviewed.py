"""Orphan removal with a human review: the review of a dry run, and the delete of only what was approved.

``orphan_review`` turns a dry run's report into what an approval form shows;
``IcebergDeleteApprovedOrphansOperator`` deletes, after the approval, only files of the
reviewed list that a fresh orphan check (same cutoff, same location) still finds orphaned
(safety rule S16): a file the reviewer did not see is never deleted, and neither is an
approved file that something references by now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import quote

from airflow.sdk import Context

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook
from airflow_iceberg_maint.airflow.maintenance_run import Finished, failures_recorded, publish
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator, PreparedRun
from airflow_iceberg_maint.airflow.reports import TaskLog, read_report
from airflow_iceberg_maint.airflow.ui.wording import absolute_time, plural, size
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.expiry.run import delete_on_each_store
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.policy.job_config import OrphanJobConfig
from airflow_iceberg_maint.progress import LoggingReporter, reporting
from airflow_iceberg_maint.reviewed_table import refuse_another_table
from airflow_iceberg_maint.state.cleanup import record_orphan_run

#: Paths an approval form lists; the report holds them all.
REVIEW_PATHS = 20
#: The report page inside Airflow's navigation (the plugin's view frames it), not the bare page.
REPORT_PAGE = "/plugin/iceberg-maintenance/iceberg-maint/report?uri="


def shown_paths(files: Sequence[str], uri: str, paths: int) -> dict[str, Any]:
    """The part of a review that lists files: the first ``paths`` of them, how many more, the full report."""
    return {
        "first_paths": list(files[:paths]),
        "more_paths": max(0, len(files) - paths),
        "report": uri,
        "report_page": REPORT_PAGE + quote(uri, safe=""),
    }


def paths_markdown(review: Mapping[str, Any], link: str) -> list[str]:
    """The lines of a form that list ``shown_paths`` and link to the full report as ``link``."""
    lines = [f"- `{path}`" for path in review["first_paths"]]
    if review["more_paths"]:
        lines.append(f"- ... and {review['more_paths']} more")
    return [*lines, "", f"[{link}]({review['report_page']})"]


def orphan_review(report: Mapping[str, Any], uri: str, paths: int = REVIEW_PATHS) -> dict[str, Any]:
    """What a reviewer sees of a dry run: the counts, bytes, the first paths and the full report's page."""
    files = list(report["orphan_files"])
    return {
        "table": report["table"],
        "location": report["location"],
        "older_than": report["older_than"],
        "orphan_file_count": len(files),
        "orphan_bytes": int(report["orphan_bytes"]),
        **shown_paths(files, uri, paths),
    }


def read_reviewed(report: str, iceberg_conn_id: str) -> dict[str, Any]:
    """The report at ``report``, read with the storage properties of the connection's catalog
    (through the provider's hook, as the operators reach it)."""
    return read_report(report, dict(IcebergMaintenanceHook(iceberg_conn_id).catalog.properties))


def load_review(report: str, iceberg_conn_id: str, paths: int = REVIEW_PATHS) -> dict[str, Any]:
    """``orphan_review`` of the orphan dry run's report at ``report``."""
    return orphan_review(read_reviewed(report, iceberg_conn_id), report, paths)


def review_markdown(review: Mapping[str, Any]) -> str:
    """The approval form's body: counts, bytes, the first paths and the link to the full report."""
    lines = [
        f"**{plural(review['orphan_file_count'], 'orphan file')}, {size(review['orphan_bytes'])}** under "
        f"`{review['location']}`, last modified before {absolute_time(review['older_than'])}.",
        "",
        "Approving deletes only these files, and only those a fresh check still finds orphaned.",
        "",
        *paths_markdown(review, "Full report"),
    ]
    return "\n".join(lines)


class IcebergDeleteApprovedOrphansOperator(IcebergRemoveOrphanFilesOperator):
    """Delete the approved orphans of a reviewed dry run that a fresh check still finds orphaned.

    ``approved_report`` is the URI of the dry run's report (its ``orphan_files`` are the list the
    reviewer approved). The task checks the table again, as a dry run with the report's cutoff
    and location, and deletes the intersection: files found since (not reviewed) and approved
    files that are no longer orphans (referenced again, or gone) are kept and counted. Its own
    report lists what was deleted and what was kept; XCom: ``approved_count``,
    ``deleted_file_count``, ``kept_not_orphan_count``, ``kept_not_approved_count``,
    ``failed_count``, ``report``. Other arguments are the removal operator's (``dry_run`` is
    ignored: the check never deletes).

    :param approved_report: URI of the reviewed dry run's report.
    """

    template_fields: Sequence[str] = (*IcebergRemoveOrphanFilesOperator.template_fields, "approved_report")

    def __init__(self, *, approved_report: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.approved_report = approved_report

    def maintain(self, context: Context) -> dict[str, Any]:
        uri = arguments.optional_str(self.approved_report, "approved_report")
        if not uri:
            raise InvalidInputError("argument approved_report: the URI of the reviewed dry run's report is required")
        return super().maintain(context)

    def _records_dry_run(self, job: OrphanJobConfig) -> bool:
        return False  # the check is a dry run, but this run deletes: its report and records are a real run's

    def _run(self, context: Context) -> dict[str, Any]:
        uri = str(self.approved_report).strip()
        self.is_dry_run = True  # the fresh check; deletes happen below, on the approved list only
        run = self._prepare(context)  # its report is a real run's (_records_dry_run), beside the approved one
        reviewed = read_report(uri, {**run.hook.catalog.properties, **run.table.io.properties})
        if reviewed.get("table") != run.table_name or not reviewed.get("dry_run"):
            raise InvalidInputError(f"approved_report {uri}: not a dry run of table {run.table_name}")
        refuse_another_table(uri, run.table_name, reviewed.get("table_uuid"), run.table.metadata.table_uuid)
        approved = set(reviewed["orphan_files"])
        # The reviewed run's cutoff and location (both checked when it ran), so "still an orphan" means the same.
        run.options = replace(
            run.options, older_than=datetime.fromisoformat(reviewed["older_than"]), location=reviewed["location"]
        )
        with failures_recorded(run, self.log), reporting(LoggingReporter(self.log)):
            fresh = remove_orphan_files(run.table, run.options, now=run.now, sources=[INDEX_FILES])
        return publish(context, run, _delete_approved(run, uri, approved, fresh), self.log)


def _delete_approved(run: PreparedRun, uri: str, approved: set[str], fresh: OrphanReport) -> Finished:
    """Delete the approved files the fresh check still finds orphaned; what ``publish`` needs of the outcome."""
    still = set(fresh.orphan_files)
    to_delete = sorted(approved & still)
    outcome = delete_on_each_store(to_delete, run.table.io, run.options.max_concurrent_deletes)
    failed = [{"path": p, "error": e} for p, e in outcome.failed]
    body = {
        **fresh.to_json(),
        "dry_run": False,
        "approved_report": uri,
        "deleted_files": sorted(outcome.deleted),
        "deleted_file_count": len(outcome.deleted),
        "failed": failed,
        "kept_not_orphan": sorted(approved - still),
        "kept_not_approved": sorted(still - approved),
    }
    kept_not_orphan, kept_not_approved = len(approved - still), len(still - approved)

    def log_outcome(task_log: TaskLog) -> None:
        task_log.info(
            "table %s: %d approved, %d deleted; kept %d approved files that are no longer orphans and %d "
            "orphans found since the review; report: %s",
            run.table_name,
            len(approved),
            len(outcome.deleted),
            kept_not_orphan,
            kept_not_approved,
            run.uri,
        )

    failure = None
    if failed:
        failure = (
            f"table {run.table_name}: {len(failed)} of {len(to_delete)} deletes failed "
            f"(first: {failed[0]['path']}: {failed[0]['error']}); report: {run.uri}"
        )
    summary = {
        "table": run.table_name,
        "approved_count": len(approved),
        "deleted_file_count": len(outcome.deleted),
        "kept_not_orphan_count": kept_not_orphan,
        "kept_not_approved_count": kept_not_approved,
        "failed_count": 0,
        "report": run.uri,
    }
    return Finished(
        body=body,
        record=lambda store, at, report: record_orphan_run(store, body, at, report),
        summary=summary,
        log=log_outcome,
        failure=failure,
        phase_seconds=fresh.phase_seconds,
        approved_report=uri,
    )
