"""After matching: keep other tables' locations, report conflicts, re-check against reloaded metadata, delete.

The single-task run (``removal.py``) and the sharded scan's final step (``orphans/sharded/finish.py``)
both end here, with a ``ScanRun`` and what their matching left (``Unmatched``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from airflow_iceberg_maint.catalog import refresh_table
from airflow_iceberg_maint.errors import IncompleteMetadataError, MetadataReadError, PrefixMismatchError
from airflow_iceberg_maint.fs.batches import delete_in_steps
from airflow_iceberg_maint.fs.locations import LocationSet
from airflow_iceberg_maint.fs.storage import FileInfo, Storage
from airflow_iceberg_maint.orphans.listing.listed_rows import inodes_of, paths_of, rows_of
from airflow_iceberg_maint.orphans.listing.spilled_batches import SpilledBatches
from airflow_iceberg_maint.orphans.matching import conflict_pairs
from airflow_iceberg_maint.orphans.options import OrphanOptions, refuse_gc_disabled, table_name
from airflow_iceberg_maint.orphans.report import OrphanReport, Phases, StageHook, tally
from airflow_iceberg_maint.orphans.tables_now import TablesNow, folders_below
from airflow_iceberg_maint.reachability.other_tables import ProtectedLocation, outermost, protection_set
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, collect_referenced
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanRun:
    """One scan, as its settling needs it: where it reports, what it may delete with, and how it re-checks.

    ``walk`` reads the metadata the re-check needs (``walk.seen``: the manifests the scan read);
    ``known``: the snapshots the scan read (None: those of the table before the reload);
    ``on_stage`` is called at the stages ``StageHook`` names.
    """

    report: OrphanReport
    options: OrphanOptions
    storage: Storage
    walk: ReferenceWalk
    sources: Sequence[ReferenceSource]
    phases: Phases
    known: frozenset[int] | None = None
    on_stage: StageHook | None = None


@dataclass(frozen=True)
class Unmatched:
    """What the matching left: files nothing references, files that collide with a referenced path in
    another spelling (conflicts), and other tables' locations under the scanned one (kept whole, S8)."""

    orphans: SpilledBatches  # listed rows (``ROWS_SCHEMA``)
    conflicts: list[FileInfo]
    protected: list[ProtectedLocation]


def recheck(
    orphans: SpilledBatches,
    walk: ReferenceWalk,
    sources: Sequence[ReferenceSource],
    known: frozenset[int] | None = None,
) -> SpilledBatches:
    """Reload the table and keep any orphan (a listed row) that metadata committed during the scan references.

    ``known``: the snapshots the scan read (default: those of the table before the reload);
    ``walk.seen``: the manifests it read. Only what is new since is read again.
    """
    table = walk.table
    if known is None:
        known = frozenset(s.snapshot_id for s in table.metadata.snapshots)
    try:
        # Through refresh_table, not table.refresh(): the reload must hold every snapshot too.
        refresh_table(table)
    except IncompleteMetadataError:
        raise
    except Exception as exc:  # a metadata file the catalog names is missing, the catalog is down...
        raise MetadataReadError(
            f"table {table_name(table)}: cannot be reloaded for the re-check before deleting "
            f"({type(exc).__name__}: {exc}); nothing was deleted"
        ) from exc
    refuse_gc_disabled(table)
    late = ReferencedSet(walk.equivalence)
    collect_referenced(late, walk, sources, table.metadata, table.metadata_location, skip=known)

    def unreferenced(paths: list[str], chunk: pa.RecordBatch) -> list[bool]:
        others = late.classify_unmatched(paths, inodes_of(chunk))
        return [not hit and p not in others for p, hit in zip(paths, late.contains_exact(paths), strict=True)]

    return kept_rows(orphans, unreferenced)


def kept_rows(rows: SpilledBatches, keep: Callable[[list[str], pa.RecordBatch], list[bool]]) -> SpilledBatches:
    """The rows ``keep`` says yes to, asked a batch at a time; ``rows`` themselves when it keeps them all.

    Otherwise ``rows`` are closed and the kept ones are a new set of batches.
    """
    # A byte a row, not a list slot: the masks of every row are held until the second pass.
    masks = [np.asarray(keep(paths_of(batch), batch), np.bool_) for batch in rows.batches()]
    if all(mask.all() for mask in masks):
        return rows
    found = rows.like()
    for batch, mask in zip(rows.batches(), masks, strict=True):
        found.add(batch.filter(pa.array(mask)))
    found.finish()
    rows.close()
    return found


def _outside(rows: SpilledBatches, kept: LocationSet) -> SpilledBatches:
    """The listed rows that lie under no kept location, in any spelling of either (S8)."""
    return kept_rows(rows, lambda paths, _: [not kept.covers(p) for p in paths])


def _outside_tables_now(run: ScanRun, orphans: SpilledBatches, protected: list[ProtectedLocation]) -> SpilledBatches:
    """The rows to delete but those in another table's location as storage holds it now (S8, S17).

    ``protected`` (found from the listing and the catalog) may be older than what it protects: an
    inventory, or a listing taken before a table was created inside the location. Each folder a
    delete touches is looked at again (``tables_now``); a file not spelled under the root is kept.
    """
    report, walk = run.report, run.walk
    table = walk.table
    base = report.location.rstrip("/") + "/"
    folders = folders_below((p for batch in orphans.batches() for p in paths_of(batch)), report.location)
    calls = run.storage.list_calls
    now = TablesNow(run.storage, table.io, str(table.metadata.table_uuid), table.metadata.location, walk.equivalence)
    found = outermost(now.protections(folders))
    report.list_calls += run.storage.list_calls - calls
    kept = protection_set(found, walk.equivalence)
    before = len(orphans)
    orphans = kept_rows(orphans, lambda paths, _: [p.startswith(base) and not kept.covers(p) for p in paths])
    if found:
        report.protected_locations = [p.to_json() for p in outermost([*protected, *found])]
        report.kept_protected += before - len(orphans)
        log.warning(
            "kept whole, as other tables' locations found when deleting: %s",
            "; ".join(f"{p.location} ({p.reason})" for p in found),
        )
    return orphans


def _with_conflicts(orphans: SpilledBatches, conflicts: list[FileInfo]) -> SpilledBatches:
    """The orphans and then the conflicting files, as one set of rows (``prefix_mismatch_mode`` delete)."""
    both = orphans.like()
    for batch in [*orphans.batches(), rows_of(conflicts)]:
        both.add(batch)
    both.finish()
    orphans.close()
    return both


def settle(run: ScanRun, unmatched: Unmatched) -> None:
    """Keep other tables' locations, report conflicts, re-check, then delete (or not, on a dry run)."""
    report, options, walk, sources, phases = run.report, run.options, run.walk, run.sources, run.phases
    orphans, conflicts, protected = unmatched.orphans, unmatched.conflicts, unmatched.protected
    if protected:
        report.protected_locations = [p.to_json() for p in protected]
        before = len(orphans) + len(conflicts)
        kept = protection_set(protected, walk.equivalence)
        orphans, conflicts = _outside(orphans, kept), [c for c in conflicts if not kept.covers(c.path)]
        report.kept_protected = before - len(orphans) - len(conflicts)
        log.warning(
            "kept whole, as other tables' locations: %s", "; ".join(f"{p.location} ({p.reason})" for p in protected)
        )
    if conflicts:
        report.conflicts = conflict_pairs(conflicts, walk, sources)
        log.warning("%d listed files match referenced paths under another scheme or authority", len(conflicts))
        if options.prefix_mismatch_mode == "delete":
            orphans = _with_conflicts(orphans, conflicts)
    phases.done("match")
    if run.on_stage:
        tally(report, orphans)
        run.on_stage(report, "matched")

    before = len(orphans)
    orphans = recheck(orphans, walk, sources, run.known)
    report.kept_by_recheck = before - len(orphans)
    orphans = _outside_tables_now(run, orphans, protected)
    report.snapshots += walk.snapshots  # the walk's own reads, the re-check's included
    report.manifests_read += walk.manifests_read
    tally(report, orphans)
    phases.done("recheck")
    log.info(
        "%d orphan files, %d bytes%s",
        report.orphan_file_count,
        report.orphan_bytes,
        f"; {report.kept_by_recheck} kept because a commit during the scan references them"
        if report.kept_by_recheck
        else "",
    )

    if conflicts and options.prefix_mismatch_mode == "error":
        raise PrefixMismatchError(
            f"table {report.table}: {len(conflicts)} listed files match referenced files by path but not by "
            f"scheme or authority (first: {report.conflicts[0]['listed']!r} vs "
            f"{report.conflicts[0]['referenced']!r}); nothing was deleted. Map them with equal_schemes / "
            "equal_authorities, or choose prefix_mismatch_mode ignore or delete",
            [(c["listed"], c["referenced"]) for c in report.conflicts],
            report,
        )
    if run.on_stage:
        run.on_stage(report, "planned")
    if not options.dry_run and len(orphans):
        outcome = delete_in_steps(run.storage, report.orphan_files, options.max_concurrent_deletes)
        report.deleted_file_count = len(outcome.deleted)
        report.failed = [{"path": p, "error": e} for p, e in outcome.failed]
        report.delete_requests = outcome.requests
        log.info(
            "deleted %d files in %d requests, %d failed",
            report.deleted_file_count,
            outcome.requests,
            len(report.failed),
        )
    if not options.dry_run:  # a dry run deletes nothing: no delete phase to time
        phases.done("delete")
