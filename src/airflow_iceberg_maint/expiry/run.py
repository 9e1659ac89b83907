"""Snapshot expiry of one table: plan, commit, find the files only expired snapshots reached, re-check, delete.

Pipeline (the dry run runs all of it but the commit and the delete):
1. refuse ``gc.enabled=false`` (S12) and bad input (S7); resolve the cutoff and retain-last;
2. plan the retention (``retention``), keeping pinned snapshots (S13), and commit it through the
   fence (S18): when the table changed meanwhile the commit is refused and the run plans again
   (from the table's properties as they are then); a change the catalog could not refuse is
   found after the commit, and what it needs is put back (``restore``);
3. read what the expired snapshots reached and subtract what the committed metadata and every
   reference source reach (``files``); a commit that did not apply on the planned metadata
   keeps every file;
4. reload the table and keep anything a snapshot committed since references;
5. delete in batches on each store, collecting per-file failures.

A failure before the commit changes nothing; after it, files not yet deleted are orphans that
the next orphan run removes. A commit that fails other than by a moved ref (the store or the
catalog failing) raises ``CommitOutcomeUnknownError`` and deletes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint import fencing
from airflow_iceberg_maint.catalog import reload_to_plan_again
from airflow_iceberg_maint.errors import (
    CommitOutcomeUnknownError,
    ExpiryConflictError,
    InvalidInputError,
    first_line,
)
from airflow_iceberg_maint.expiry.commit import applied_on, commit_expiry, metadata_after
from airflow_iceberg_maint.expiry.dropped import Sized
from airflow_iceberg_maint.expiry.file_kinds import by_kind, file_kinds, snapshot_commits
from airflow_iceberg_maint.expiry.files import deletable_files, recheck
from airflow_iceberg_maint.expiry.pins import SnapshotPin, pinned_snapshots
from airflow_iceberg_maint.expiry.restore import restore_lost
from airflow_iceberg_maint.expiry.retention import Retention, plan_retention
from airflow_iceberg_maint.expiry.settings import ExpireOptions, resolve_settings
from airflow_iceberg_maint.fs.backends import table_storage
from airflow_iceberg_maint.fs.batches import delete_in_steps
from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri
from airflow_iceberg_maint.fs.storage import DeleteOutcome
from airflow_iceberg_maint.orphans.options import refuse_gc_disabled
from airflow_iceberg_maint.orphans.report import Phases
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk
from airflow_iceberg_maint.reachability.sources import ReferenceSource
from airflow_iceberg_maint.reviewed_table import refuse_another_table

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 4  # plans, each committed against the metadata it read


@dataclass
class ExpiryReport:
    table: str
    table_uuid: str
    older_than: datetime
    retain_last: int
    dry_run: bool
    expired_snapshot_ids: list[int] = field(default_factory=list)
    removed_refs: list[str] = field(default_factory=list)
    deleted_files: list[str] = field(default_factory=list)  # deleted, or to delete on a dry run
    deleted_bytes: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    kept_for_pins: dict[str, str] = field(default_factory=dict)  # snapshot id -> the pin that kept it
    kept_by_recheck: int = 0
    committed: bool = False
    commit_attempts: int = 0
    #: Set when the commit applied on other metadata than the plan read: every file was kept.
    kept_all_files: str | None = None
    delete_requests: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    #: A reviewed run (``ExpireOptions.approved``): what the fresh plan found but nobody approved, kept.
    approved: bool = False
    not_approved_snapshot_ids: list[int] = field(default_factory=list)
    not_approved_refs: list[str] = field(default_factory=list)
    not_approved_files: list[str] = field(default_factory=list)
    #: ``{snapshot_id, committed_at, operation}`` of each expired snapshot
    expired_snapshots: list[dict[str, Any]] = field(default_factory=list)
    #: each planned file's kind and size (``expiry.file_kinds``), for ``deleted_by_kind``
    file_kinds: dict[str, str] = field(default_factory=dict, repr=False)
    file_sizes: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def deleted_file_count(self) -> int:
        return len(self.deleted_files)

    def to_json(self) -> dict[str, Any]:
        """The ``expire-snapshots --json`` object of docs/cli.md, then the details."""
        return {
            "table": self.table,
            "older_than": self.older_than.isoformat(),
            "retain_last": self.retain_last,
            "dry_run": self.dry_run,
            "expired_snapshot_ids": self.expired_snapshot_ids,
            "removed_refs": self.removed_refs,
            "deleted_files": self.deleted_files,
            "deleted_file_count": self.deleted_file_count,
            "deleted_bytes": self.deleted_bytes,
            "failed": self.failed,
            "table_uuid": self.table_uuid,
            "kept_for_pins": self.kept_for_pins,
            "kept_by_recheck": self.kept_by_recheck,
            "committed": self.committed,
            "commit_attempts": self.commit_attempts,
            "kept_all_files": self.kept_all_files,
            "delete_requests": self.delete_requests,
            "phase_seconds": self.phase_seconds,
            "approved": self.approved,
            "not_approved_snapshot_ids": self.not_approved_snapshot_ids,
            "not_approved_refs": self.not_approved_refs,
            "not_approved_files": self.not_approved_files,
            "expired_snapshots": self.expired_snapshots,
            "deleted_by_kind": by_kind(self.deleted_files, self.file_kinds, self.file_sizes),
        }


#: Called with the report and a stage: ``retention`` (planned, before the commit) and ``planned``
#: (the files found, before the re-check and the delete).
ExpiryStageHook = Callable[[ExpiryReport, str], None]


@dataclass
class _Committed:
    before: TableMetadata  # the metadata the plan read
    after: tuple[TableMetadata, str]  # the metadata after the expiry (committed, or as it would be) and its location
    retention: Retention
    verified: bool  # the commit applied on ``before``
    restored: str | None = None  # what was put back for a commit that landed under ours (S18)


def _plan(
    table: Table, options: ExpireOptions, pins: Sequence[SnapshotPin], now: datetime
) -> Callable[[TableMetadata], Retention]:
    """Plan the retention of some metadata of ``table``, from its own properties (they may have changed)."""

    def plan(metadata: TableMetadata) -> Retention:
        settings = resolve_settings(metadata.properties, options, now)
        pinned = pinned_snapshots(table, pins)
        return plan_retention(metadata, settings, int(now.timestamp() * 1000), pinned, options.approved)

    return plan


def _plan_and_commit(
    table: Table,
    options: ExpireOptions,
    pins: Sequence[SnapshotPin],
    report: ExpiryReport,
    on_stage: ExpiryStageHook | None,
    now: datetime,
) -> _Committed:
    plan = _plan(table, options, pins, now)
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        before, before_location = table.metadata, table.metadata_location
        refuse_gc_disabled(table)  # each plan reads the properties again: a concurrent commit may change them
        settings = resolve_settings(before.properties, options, now)
        report.older_than, report.retain_last = settings.cutoff, settings.retain_last
        retention = plan(before)
        report.expired_snapshot_ids, report.removed_refs = retention.expired_snapshot_ids, retention.removed_refs
        report.not_approved_snapshot_ids = retention.not_approved_snapshot_ids
        report.not_approved_refs = retention.not_approved_refs
        report.kept_for_pins = {str(k): v for k, v in sorted(retention.kept_for_pins.items())}
        report.commit_attempts = attempt
        if on_stage:
            on_stage(report, "retention")
        if options.dry_run or not retention.changes_anything:
            return _Committed(before, (metadata_after(before, retention), before_location), retention, True)
        fencing.guard("the expiry's commit")  # the run's lease (S15); outside the try, which reads any error as unknown
        try:
            committed = commit_expiry(table, retention)
        except CommitFailedException as exc:
            log.info("table %s: the table changed during the expiry (%s); planning again", report.table, exc)
            reload_to_plan_again(table, report.table, "the expiry", "nothing was committed or deleted")
            continue
        except Exception as exc:
            # The catalog or the store failed while committing (reading the current metadata, writing the
            # new metadata file, the catalog call): whether it landed is not known here, so nothing is deleted.
            raise CommitOutcomeUnknownError(
                f"table {report.table}: the expiry commit failed ({first_line(exc)}); whether it landed is "
                "unknown, so no file was deleted (if it landed, the files only the expired snapshots reached "
                "are orphans the next orphan run removes)"
            ) from exc
        report.committed = True
        verified = applied_on(committed, before, retention)
        # A commit landed that the requirements could not catch (REST): put back what it needs (S18).
        restored = None if verified else restore_lost(table, report.table, committed, plan)
        return _Committed(before, (committed.metadata, committed.location), retention, verified, restored)
    raise ExpiryConflictError(
        f"table {report.table}: the table changed during each of {COMMIT_ATTEMPTS} expiry attempts; nothing was "
        "committed or deleted"
    )


def delete_on_each_store(paths: list[str], io: FileIO, max_concurrency: int) -> DeleteOutcome:
    """Delete through ``fs/``, one storage backend a scheme and authority (tables may write to several)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for path in paths:
        uri = Uri.parse(path)
        groups.setdefault((uri.scheme, uri.authority), []).append(path)
    total = DeleteOutcome()
    for group in groups.values():
        part = delete_in_steps(table_storage(group[0], io), group, max_concurrency)
        total.deleted += part.deleted
        total.failed += part.failed
        total.requests += part.requests
    return total


def _settle(report: ExpiryReport, table: Table, final: Sized, options: ExpireOptions) -> None:
    paths = sorted(final)
    if options.dry_run or not paths:
        report.deleted_files, report.deleted_bytes = paths, sum(final.values())
        return
    outcome = delete_on_each_store(paths, table.io, options.max_concurrent_deletes)
    report.deleted_files = sorted(outcome.deleted)
    report.deleted_bytes = sum(final.get(p, 0) for p in report.deleted_files)
    report.failed = [{"path": p, "error": e} for p, e in outcome.failed]
    report.delete_requests = outcome.requests
    log.info("deleted %d files in %d requests, %d failed", len(outcome.deleted), outcome.requests, len(outcome.failed))


def expire_snapshots(
    table: Table,
    options: ExpireOptions | None = None,
    *,
    sources: Sequence[ReferenceSource],
    pins: Sequence[SnapshotPin],
    now: datetime | None = None,
    on_stage: ExpiryStageHook | None = None,
) -> ExpiryReport:
    """Expire the snapshots retention no longer needs and delete the files only they reached (unless dry run).

    ``sources`` keep files stored beside the table (``index.lifecycle.references.INDEX_FILES``); ``pins``
    keep snapshots (``index.lifecycle.references.INDEX_SNAPSHOTS``). Neither has a default, so that no
    caller drops one by accident.
    """
    options = options or ExpireOptions()
    now = now or datetime.now(UTC)
    if options.max_concurrent_deletes < 1:
        raise InvalidInputError(f"max_concurrent_deletes {options.max_concurrent_deletes}: expected at least 1")
    settings = resolve_settings(table.properties, options, now)
    refuse_gc_disabled(table)
    name = ".".join(table.name())
    if options.approved is not None:  # later reloads and the commit assert this UUID too
        refuse_another_table(options.approved.report, name, options.approved.table_uuid, table.metadata.table_uuid)
    report = ExpiryReport(name, str(table.metadata.table_uuid), settings.cutoff, settings.retain_last, options.dry_run)
    report.approved = options.approved is not None
    phases = Phases(report)
    state = _plan_and_commit(table, options, pins, report, on_stage, now)
    phases.done("plan" if options.dry_run else "plan_and_commit")  # a dry run commits nothing
    report.expired_snapshots = snapshot_commits(state.before, report.expired_snapshot_ids)
    log.info(
        "table %s: %s %d snapshots and %d refs",
        name,
        "would expire" if options.dry_run else "expired",
        len(report.expired_snapshot_ids),
        len(report.removed_refs),
    )
    if not state.retention.expired_snapshot_ids:
        return report
    if not state.verified:
        report.kept_all_files = (
            "the commit applied on metadata a concurrent commit had changed: every file is kept "
            "(the next orphan run removes what only the expired snapshots reached)"
            + (f"; {state.restored}" if state.restored else "")
        )
        log.warning("table %s: %s", name, report.kept_all_files)
        return report
    expired = set(state.retention.expired_snapshot_ids)
    with ReferenceWalk(
        table, PathEquivalence(), options.reader_processes, cache=options.cache, early_workers=options.cache is None
    ) as walk:
        planned = deletable_files(walk, state.before, state.after, expired, sources)
        if options.approved is not None:
            report.not_approved_files = sorted(p for p in planned if p not in options.approved.files)
            planned = {p: size for p, size in planned.items() if p in options.approved.files}
        report.deleted_files, report.deleted_bytes = sorted(planned), sum(planned.values())
        report.file_kinds = file_kinds(walk.io, state.before, expired, planned)
        report.file_sizes = dict(planned)
        phases.done("plan_files")
        if on_stage:
            on_stage(report, "planned")
        known = frozenset(s.snapshot_id for s in state.before.snapshots)
        retention = state.retention
        view: Callable[[TableMetadata], TableMetadata] = (
            (lambda md: metadata_after(md, retention)) if options.dry_run else (lambda md: md)
        )
        final = recheck(walk, planned, known, sources, view) if planned else planned
        phases.done("recheck")
    report.kept_by_recheck = len(planned) - len(final)
    _settle(report, table, final, options)
    if not options.dry_run:
        phases.done("delete")
    return report
