"""``IcebergExpireSnapshotsOperator``: expire the old snapshots of one table and delete the files only they reached."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Context

from airflow_iceberg_maint.airflow import arguments, config
from airflow_iceberg_maint.airflow.maintenance_run import Finished, MaintenanceRun, prepare_run, run_maintenance
from airflow_iceberg_maint.airflow.operators.table_maintenance import _TableMaintenanceOperator
from airflow_iceberg_maint.airflow.reports import TaskLog
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.expiry.run import ExpiryReport, expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.policy.policies import SNAPSHOT_EXPIRY
from airflow_iceberg_maint.reachability.cutoff import cutoff_for_days
from airflow_iceberg_maint.state.cleanup import record_expiry_run


@dataclass
class ExpiryRun(MaintenanceRun):
    """What an expiry task knows before the engine runs: the lifecycle's run, the options and the approval."""

    options: ExpireOptions = field(default_factory=ExpireOptions)
    approved: str | None = None


def expiry_xcom_summary(body: Mapping[str, Any], report: str, policy: str | None) -> dict[str, Any]:
    """The small, fixed-size part of an expiry report pushed to XCom (lists are counted, not copied)."""
    return {
        "table": body["table"],
        "table_uuid": body["table_uuid"],
        "policy": policy,
        "older_than": body["older_than"],
        "retain_last": body["retain_last"],
        "dry_run": body["dry_run"],
        "expired_snapshot_count": len(body["expired_snapshot_ids"]),
        "removed_ref_count": len(body["removed_refs"]),
        "deleted_file_count": body["deleted_file_count"],
        "deleted_bytes": body["deleted_bytes"],
        "failed_count": len(body["failed"]),
        "kept_by_recheck": body["kept_by_recheck"],
        "kept_all_files": body["kept_all_files"] is not None,
        "committed": body["committed"],
        "phase_seconds": body["phase_seconds"],
        "approved": body["approved"],
        "not_approved_snapshot_count": len(body["not_approved_snapshot_ids"]),
        "not_approved_file_count": len(body["not_approved_files"]),
        "report": report,
    }


class IcebergExpireSnapshotsOperator(_TableMaintenanceOperator):
    """Expire the snapshots retention no longer needs and delete the files only they reached.

    The run is ``iceberg-maint expire-snapshots`` (docs/expiry.md): the Iceberg table spec's
    retention for every ref, the snapshot of each index's newest extract kept, the metadata
    change committed through pyiceberg, then the files only expired snapshots reached deleted
    without listing storage. The full report (every expired id and deleted path) is written to
    ``report_location`` before anything is deleted and again when the run ends; XCom gets a
    small summary with the report's URI; the phases are logged as they advance. The run is
    recorded in the cleanup state (the "days since last expiry" clock) and in the status
    records (kind ``expiry``). It runs while it holds the table's lease (``leased_task``:
    ``lease_timeout``, ``lease_ttl``, ``lease_poll_interval``), deferring while another
    maintenance task holds it.

    A retry plans again from the table as it is: snapshots a failed try expired are gone and
    are not expired twice; files a failed try left after its commit are orphans, which the next
    orphan removal deletes.

    :param table, iceberg_conn_id: as ``_TableMaintenanceOperator``'s (an ``iceberg`` connection of
        apache-airflow-providers-apache-iceberg).
    :param older_than_days: expire snapshots older than this many days (default: the table's
        ``history.expire.max-snapshot-age-ms``, else 5 days).
    :param older_than: absolute ISO 8601 cutoff with a time zone; wins over ``older_than_days``.
    :param retain_last: every branch keeps at least its N newest ancestors (default: the table's
        ``history.expire.min-snapshots-to-keep``, else 1).
    :param dry_run: report what would be expired and deleted; commit nothing, delete nothing.
    :param max_concurrent_deletes: parallel delete requests.
    :param report_location: base URI of report files (default: the ``[iceberg_maint] report_location``
        option, else ``$AIRFLOW_HOME/iceberg_maint/reports``); refused inside the table.
    :param state_url, policy, enabled: as ``_TableMaintenanceOperator``'s.
    """

    maintenance = "snapshot expiry"

    template_fields: Sequence[str] = (
        "table",
        "older_than_days",
        "older_than",
        "retain_last",
        "is_dry_run",
        "max_concurrent_deletes",
        "report_location",
        "policy",
        "enabled",
    )
    ui_color = "#f7e3d4"

    def __init__(
        self,
        *,
        older_than_days: float | str | None = None,
        older_than: datetime | str | None = None,
        retain_last: int | str | None = None,
        max_concurrent_deletes: int | str = DEFAULT_MAX_CONCURRENT_DELETES,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.older_than_days = older_than_days
        self.older_than = older_than
        self.retain_last = retain_last
        self.max_concurrent_deletes = max_concurrent_deletes

    def _options(self, now: datetime) -> ExpireOptions:
        """The run's options, each refused naming this operator's argument before the table is touched."""
        days = arguments.optional_number(self.older_than_days, "older_than_days")
        if days is not None:
            cutoff_for_days(days, now, "older_than_days")
        older_than = arguments.optional_datetime(self.older_than, "older_than")
        if older_than is not None and older_than > now:
            raise InvalidInputError(f"older_than {older_than.isoformat()}: is in the future (now is {now.isoformat()})")
        has_retain = arguments.optional_number(self.retain_last, "retain_last") is not None
        return ExpireOptions(
            older_than=older_than,
            older_than_days=days,
            retain_last=arguments.positive_int(self.retain_last, "retain_last") if has_retain else None,
            dry_run=arguments.boolean(self.is_dry_run, "dry_run"),
            max_concurrent_deletes=arguments.positive_int(self.max_concurrent_deletes, "max_concurrent_deletes"),
            cache=config.digest_cache_location(),
        )

    def _run(self, context: Context) -> dict[str, Any]:
        now = datetime.now(UTC)
        options = self._options(now)
        table_name = arguments.optional_str(self.table, "table") or ""
        policy = arguments.optional_str(self.policy, "policy")
        table = self.hook.load_table(table_name)
        run = prepare_run(
            context,
            self,
            table,
            table_name,
            now,
            dry_run=options.dry_run,
            kind=ExpiryRun,
            report_name=f"{table_name}.expiry",
            job=SNAPSHOT_EXPIRY,
            keeps_failure=False,  # an expiry's report is written when planned and when done, never on failure
        )
        run.options, run.approved = options, self._approved_report()
        self.log.info("table %s: expiring snapshots%s", table_name, f" (policy {policy})" if policy else "")
        return run_maintenance(context, run, self._expire, self.log)

    def _expire(self, run: ExpiryRun) -> Finished:
        report = expire_snapshots(
            run.table, run.options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS], now=run.now, on_stage=run.saved.stage
        )
        body = {**report.to_json(), **({"approved_report": run.approved} if run.approved else {})}
        failure = None
        if report.failed:
            failure = (
                f"table {run.table_name}: {len(report.failed)} of {len(report.failed) + report.deleted_file_count} "
                f"deletes failed (first: {report.failed[0]['path']}: {report.failed[0]['error']}); the files "
                f"left are orphans the next orphan removal deletes; report: {run.uri}"
            )
        return Finished(
            body=body,
            record=lambda store, at, uri: record_expiry_run(store, body, at, uri),
            summary=expiry_xcom_summary(body, run.uri, run.policy),
            log=lambda task_log: _log_report(task_log, report, run.uri),
            failure=failure,
            phase_seconds=body["phase_seconds"],
            approved_report=run.approved,
        )

    def _approved_report(self) -> str | None:
        """The reviewed dry run's report this run executes (None: not a reviewed run)."""
        return None


def _log_report(task_log: TaskLog, report: ExpiryReport, uri: str) -> None:
    expire, delete = ("would expire", "would delete") if report.dry_run else ("expired", "deleted")
    task_log.info(
        "table %s: %s %d snapshots older than %s (retaining at least %d a branch) and %d refs; "
        "%s %d files, %d bytes; %d kept by the re-check",
        report.table,
        expire,
        len(report.expired_snapshot_ids),
        report.older_than.isoformat(),
        report.retain_last,
        len(report.removed_refs),
        delete,
        report.deleted_file_count,
        report.deleted_bytes,
        report.kept_by_recheck,
    )
    for snapshot_id, why in report.kept_for_pins.items():
        task_log.info("  kept snapshot %s: %s", snapshot_id, why)
    if report.kept_all_files:
        task_log.warning("table %s: %s", report.table, report.kept_all_files)
    task_log.info("phases (s): %s; full report: %s", report.phase_seconds, uri)
