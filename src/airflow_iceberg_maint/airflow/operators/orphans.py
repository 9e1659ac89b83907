"""``IcebergRemoveOrphanFilesOperator``: remove the orphan files of one table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from airflow.sdk import BaseOperator, Context
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.airflow import arguments, config
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.leased_task import TableTaskMixin
from airflow_iceberg_maint.airflow.maintenance_run import (
    Finished,
    MaintenanceRun,
    prepare_run,
    run_maintenance,
)
from airflow_iceberg_maint.airflow.reports import TaskLog
from airflow_iceberg_maint.errors import CatalogListingError
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB, OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.policy.job_config import OrphanJobConfig, build_orphan_job
from airflow_iceberg_maint.policy.policies import parse_orphan_removal_content
from airflow_iceberg_maint.policy.values import is_none
from airflow_iceberg_maint.reachability.other_tables import TablePaths, catalog_table_paths, load_table_paths
from airflow_iceberg_maint.state.cleanup import record_orphan_run


def xcom_summary(summary: Mapping[str, Any], report: str | None, policy: str | None) -> dict[str, Any]:
    """The small, fixed-size part of a report pushed to XCom (lists are counted, not copied)."""
    return {
        "table": summary["table"],
        "table_uuid": summary["table_uuid"],
        "policy": policy,
        "location": summary["location"],
        "older_than": summary["older_than"],
        "dry_run": summary["dry_run"],
        "orphan_file_count": summary["orphan_file_count"],
        "orphan_bytes": summary["orphan_bytes"],
        "deleted_file_count": summary["deleted_file_count"],
        "failed_count": len(summary["failed"]),
        "conflict_count": len(summary["conflicts"]),
        "protected_location_count": len(summary["protected_locations"]),
        "kept_undecodable_count": len(summary["kept_undecodable"]),
        "files_listed": summary["files_listed"],
        "list_calls": summary["list_calls"],
        "phase_seconds": summary["phase_seconds"],
        "report": report,
    }


class IcebergRemoveOrphanFilesOperator(TableTaskMixin, MaintenanceHookMixin, BaseOperator):
    """Delete files under a table's location that no snapshot, metadata or index references.

    The arguments mirror the engine's and are templated. The run is configured by the job
    layer (absolute cutoff, validated ``location``), logged by phase, recorded in the cleanup
    state, and its full report (every orphan path) is written to ``report_location``; XCom
    gets a small summary with the report's URI. A retry is safe: it lists storage again. It
    runs while it holds the table's lease (``leased_task``: ``lease_timeout``, ``lease_ttl``,
    ``lease_poll_interval``), deferring while another maintenance task holds it.

    :param table: ``namespace.table``.
    :param iceberg_conn_id: an ``iceberg`` connection (apache-airflow-providers-apache-iceberg).
    :param older_than_days: only files older than this many days (default 3); at least 1 unless
        ``allow_recent_files``, never negative. A value under the floor fails the task, as typed.
    :param older_than: absolute ISO 8601 cutoff with a time zone; wins over ``older_than_days``. It must
        be at least 1 day before now unless ``allow_recent_files``.
    :param allow_recent_files: allow a cutoff less than 1 day before now (down to now). Files that
        young may belong to writes in progress; the run logs a warning.
    :param location: scan this location, which must be the table location or under it.
    :param dry_run: report only, delete nothing.
    :param prefix_mismatch_mode: ``error`` | ``ignore`` | ``delete`` for paths that differ only by
        scheme or authority from referenced ones.
    :param equal_schemes: scheme aliases, e.g. ``{"s3a": "s3"}`` or ``"s3a=s3,s3n=s3"``.
    :param equal_authorities: authority aliases.
    :param max_concurrent_deletes: parallel delete requests.
    :param memory_budget_mb: listed files and referenced paths held in memory past this many MB go to
        the worker's local disk (``TMPDIR``); the result is the same. None: the default, 512 (a policy's
        ``memoryBudgetMb`` reaches this argument through the planning task's jobs).
    :param report_location: base URI of report files (default: the ``[iceberg_maint] report_location``
        option, else ``$AIRFLOW_HOME/iceberg_maint/reports``). Refused inside any location of the table
        or of the other tables the run knows of. The report is written before anything is deleted.
    :param state_url: SQLAlchemy URL of a shared state store; default: Airflow Variables.
    :param policy: name of the policy this run applies, for the summary and logs.
    :param only_this_table: the location holds this table only: no catalog pass to find other
        tables nested under it (folders holding another table's metadata are still kept whole).
    :param other_tables_uri: a catalog pass saved by the planning task of the same run; only the
        tables created since are loaded. Unreadable: this task makes a whole pass of its own.
    :param enabled: False skips the task: the planning step's verdict for a table not due for orphan removal.
    :param listing: read the listing from an inventory instead of listing storage: an S3 Inventory
        ``manifest.json`` or a Parquet or CSV file of ``path, size, last_modified`` (docs/safety.md). A
        cutoff later than the inventory's time fails the task; the sharded scan refuses it.
    """

    maintenance = "orphan removal"

    template_fields: Sequence[str] = (
        "table",
        "older_than_days",
        "older_than",
        "allow_recent_files",
        "location",
        "is_dry_run",
        "prefix_mismatch_mode",
        "equal_schemes",
        "equal_authorities",
        "max_concurrent_deletes",
        "memory_budget_mb",
        "report_location",
        "policy",
        "only_this_table",
        "other_tables_uri",
        "enabled",
        "listing",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"equal_schemes": "json", "equal_authorities": "json"}
    ui_color = "#d4e8f7"

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        older_than_days: float | str | None = None,
        older_than: datetime | str | None = None,
        allow_recent_files: bool | str = False,
        location: str | None = None,
        dry_run: bool | str = False,
        prefix_mismatch_mode: str = "error",
        equal_schemes: Mapping[str, str] | str | None = None,
        equal_authorities: Mapping[str, str] | str | None = None,
        max_concurrent_deletes: int | str = DEFAULT_MAX_CONCURRENT_DELETES,
        memory_budget_mb: int | str | None = DEFAULT_MEMORY_BUDGET_MB,
        report_location: str | None = None,
        state_url: str | None = None,
        policy: str | None = None,
        only_this_table: bool | str = False,
        other_tables_uri: str | None = None,
        enabled: bool | str = True,
        listing: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.older_than_days = older_than_days
        self.older_than = older_than
        self.allow_recent_files = allow_recent_files
        self.location = location
        # Not self.dry_run: that would shadow BaseOperator.dry_run(), which Airflow calls.
        self.is_dry_run = dry_run
        self.prefix_mismatch_mode = prefix_mismatch_mode
        self.equal_schemes = equal_schemes
        self.equal_authorities = equal_authorities
        self.max_concurrent_deletes = max_concurrent_deletes
        self.memory_budget_mb = memory_budget_mb
        self.report_location = report_location
        self.state_url = state_url
        self.policy = policy
        self.only_this_table = only_this_table
        self.other_tables_uri = other_tables_uri
        self.enabled = enabled
        self.listing = listing

    def _job(self, table_name: str, table: Table, now: datetime) -> OrphanJobConfig:
        allow_recent_files = arguments.boolean(self.allow_recent_files, "allow_recent_files")
        body: dict[str, Any] = {
            "location": arguments.optional_str(self.location, "location"),
            "dryRun": arguments.boolean(self.is_dry_run, "dry_run"),
            "allowRecentFiles": allow_recent_files,
            "listing": arguments.optional_str(self.listing, "listing"),
        }
        if not is_none(self.memory_budget_mb):  # None: the engine's default (a plan's item without one)
            body["memoryBudgetMb"] = arguments.positive_int(self.memory_budget_mb, "memory_budget_mb")
        # Both cutoffs are checked against the floor here, with errors naming this operator's arguments.
        days = arguments.older_than_days(self.older_than_days, allow_recent_files, now)
        if days is not None:
            body["olderThanDays"] = days
        content = parse_orphan_removal_content(body, f"task {self.task_id}")
        job = build_orphan_job(
            table_name,
            table.metadata.location,
            content,
            now,
            older_than=arguments.older_than(self.older_than, allow_recent_files, now),
            equal_schemes=arguments.mapping(self.equal_schemes, "equal_schemes"),
            equal_authorities=arguments.mapping(self.equal_authorities, "equal_authorities"),
        )
        if now - job.older_than < arguments.RECENT_FILES_FLOOR:
            self.log.warning(
                "table %s: cutoff %s is %s before now, under the 1-day floor; allow_recent_files is set, "
                "so files of writes still in progress may be deleted",
                table_name,
                job.older_than.isoformat(),
                now - job.older_than,
            )
        return job

    def _prepare(self, context: Context) -> PreparedRun:
        """Load the table, build and check the job (S3, S7, S11), and place the report outside every table."""
        table_name = arguments.optional_str(self.table, "table") or ""
        table = self.hook.load_table(table_name)
        now = datetime.now(UTC)
        job = self._job(table_name, table, now)
        other_tables = self._other_tables(self.hook.catalog)
        dry_run = self._records_dry_run(job)
        run = prepare_run(context, self, table, table_name, now, other_tables or (), dry_run=dry_run, kind=PreparedRun)
        self.log.info("table %s: job %s%s", table_name, job.to_json(), f" (policy {run.policy})" if run.policy else "")
        run.options = job.to_options(
            prefix_mismatch_mode=str(self.prefix_mismatch_mode),
            equal_schemes=arguments.mapping(self.equal_schemes, "equal_schemes"),
            equal_authorities=arguments.mapping(self.equal_authorities, "equal_authorities"),
            max_concurrent_deletes=arguments.positive_int(self.max_concurrent_deletes, "max_concurrent_deletes"),
            only_this_table=arguments.boolean(self.only_this_table, "only_this_table"),
            other_tables=other_tables,
            cache=config.digest_cache_location(),
        )
        return run

    def _records_dry_run(self, job: OrphanJobConfig) -> bool:
        """Whether the run's report and records are a dry run's (its report then has a name of its own)."""
        return job.dry_run

    def _run(self, context: Context) -> dict[str, Any]:
        return run_maintenance(context, self._prepare(context), self._remove, self.log)

    def _remove(self, run: PreparedRun) -> Finished:
        report = remove_orphan_files(
            run.table, run.options, now=run.now, sources=[INDEX_FILES], on_stage=run.saved.stage
        )
        return orphans_finished(run, report)

    def _other_tables(self, catalog: Catalog) -> list[TablePaths] | None:
        """The planning task's catalog pass topped up with tables created since; None: the engine makes one."""
        uri = arguments.optional_str(self.other_tables_uri, "other_tables_uri")
        if uri is None or arguments.boolean(self.only_this_table, "only_this_table"):
            return None
        try:
            return catalog_table_paths(catalog, load_table_paths(uri, dict(catalog.properties)))
        except CatalogListingError as exc:
            self.log.warning("%s; the run lists the whole catalog itself", exc)
            return None


@dataclass
class PreparedRun(MaintenanceRun):
    """What an orphan removal task knows before the engine runs: the lifecycle's run and the engine's options."""

    options: OrphanOptions = field(default_factory=OrphanOptions)


def orphans_finished(run: MaintenanceRun, report: OrphanReport) -> Finished:
    """What ``publish`` needs of an orphan removal (single or sharded): its report, record, log and summary."""
    summary = report.summary()
    failure = None
    if report.failed:
        failure = (
            f"table {run.table_name}: {len(report.failed)} of {report.orphan_file_count} deletes failed "
            f"(first: {report.failed[0]['path']}: {report.failed[0]['error']}); report: {run.uri}"
        )
    return Finished(
        body=report.to_json(),
        record=lambda store, at, uri: record_orphan_run(store, summary, at, uri),
        summary=xcom_summary(summary, run.uri, run.policy),
        log=lambda task_log: _log_report(task_log, report, run.uri),
        failure=failure,
        phase_seconds=report.phase_seconds,
    )


def _log_report(task_log: TaskLog, report: OrphanReport, uri: str) -> None:
    verb = "would delete" if report.dry_run else "deleted"
    count = report.orphan_file_count if report.dry_run else report.deleted_file_count
    task_log.info(
        "table %s: %d orphan files (%d bytes) under %s older than %s; %s %d; listed %d files in %d calls",
        report.table,
        report.orphan_file_count,
        report.orphan_bytes,
        report.location,
        report.older_than.isoformat(),
        verb,
        count,
        report.files_listed,
        report.list_calls,
    )
    for kind, tally in report.by_kind.items():
        if tally["count"]:
            task_log.info("  %s: %d files, %d bytes", kind, tally["count"], tally["bytes"])
    task_log.info("phases (s): %s; full report: %s", report.phase_seconds, uri)
