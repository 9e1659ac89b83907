"""Orphan-file removal in one task: list the table location, subtract every referenced file, delete the rest.

The rules (S1 to S21) cited here are those of ``docs/safety.md``.

Pipeline (the dry run runs all of it but the last step), each step in its own module:
1. ``options.scan_setup``: refuse ``gc.enabled=false`` (S12), resolve the cutoff (``reachability.cutoff``,
   S7), validate the location (S3), and find the other tables of the catalog that write under it (S8);
2. ``listing`` lists storage (or reads an inventory: ``listing.inventory``) while
   ``reachability.reference_walk`` collects the referenced set, concurrently (S1, S2);
3. ``matching``: an exact path match is referenced; a normalised match, or on local storage the
   same file under any spelling, is kept or is a conflict (S4); a name that is not UTF-8 is kept;
   other tables' locations found by the catalog or by their metadata in the listing are kept whole (S8);
4. ``settling``: reload the table and keep anything a snapshot committed during the scan references;
5. ``settling``: delete (``fs.batches``), collecting per-file failures.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import copy_context
from datetime import UTC, datetime

from pyiceberg.table import Table

from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.orphans.listing.candidates import (
    Listing,
    hidden_filter,
    list_candidates,
    older_objects_frozen,
)
from airflow_iceberg_maint.orphans.listing.inventory import listing_source
from airflow_iceberg_maint.orphans.matching import match_listed, protected_locations
from airflow_iceberg_maint.orphans.options import (
    OrphanOptions,
    ScanSetup,
    refs_budget,
    rows_budget,
    scan_setup,
    table_name,
)
from airflow_iceberg_maint.orphans.report import OrphanReport, Phases, StageHook, report_undecodable
from airflow_iceberg_maint.orphans.settling import ScanRun, Unmatched, settle
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, collect_referenced
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource
from airflow_iceberg_maint.sorting.sorted_runs import trim_heap

log = logging.getLogger(__name__)


def remove_orphan_files(
    table: Table,
    options: OrphanOptions | None = None,
    *,
    sources: Sequence[ReferenceSource],
    now: datetime | None = None,
    on_stage: StageHook | None = None,
) -> OrphanReport:
    """Find the files under the table location that nothing references, and delete them unless dry-run.

    ``sources`` keep the files the rest of the project stores under the table (its indexes:
    ``airflow_iceberg_maint.index.lifecycle.references.INDEX_FILES``); it has no default, so that no caller
    drops them by accident.
    """
    options = options or OrphanOptions()
    now = now or datetime.now(UTC)
    setup = scan_setup(table, options, now)
    root = setup.root
    report = OrphanReport(table_name(table), str(table.metadata.table_uuid), root, setup.cutoff, options.dry_run)
    phases = Phases(report)
    storage = storage_for(root, table.io.properties)
    source = listing_source(options.listing, storage, root, table.io.properties, setup.cutoff)
    log.info(
        "table %s: scanning %s for files older than %s%s",
        report.table,
        root,
        setup.cutoff.isoformat(),
        " (dry run)" if options.dry_run else "",
    )

    refs = ReferencedSet(setup.equivalence, refs_budget(options))
    walk = ReferenceWalk(table, setup.equivalence, options.reader_processes, cache=options.cache)
    with older_objects_frozen() as freeze, walk:
        with ThreadPoolExecutor(max_workers=1) as lister:
            # In a copy of this context, so the listing reports to this run's progress reporter.
            listing = lister.submit(
                copy_context().run,
                list_candidates,
                source,
                root,
                hidden_filter(table),
                setup.cutoff,
                freeze,
                rows_budget(options),
            )
            try:
                collect_referenced(refs, walk, sources, table.metadata, table.metadata_location, listed_under=root)
                listed = listing.result()
            except BaseException:
                listing.add_done_callback(_close_listing)  # what it spilled, once the listing ends
                refs.close()
                raise
        report.list_calls = source.list_calls
        run = ScanRun(report, options, storage, walk, sources, phases, on_stage=on_stage)
        try:
            unmatched = _matched(run, setup, listed, refs)
        finally:
            listed.close()  # its spilled rows and identities
            refs.close()  # its sorted runs, if it spilled
        del listed, refs
        settle(run, unmatched)
    return report


def _close_listing(listing: Future[Listing]) -> None:
    if listing.exception() is None:
        listing.result().close()


def _matched(run: ScanRun, setup: ScanSetup, listed: Listing, refs: ReferencedSet) -> Unmatched:
    """Match the listing against the referenced set, and find other tables' locations under the root."""
    report, walk, root = run.report, run.walk, setup.root
    stated = refs.resolve(listed.on_disk)
    listed.on_disk.close()  # read once: its memory and spilled runs are free for matching
    if stated:
        log.info("%d referenced paths under %s are not listed files: their identities were read on disk", stated, root)
    report.files_listed = listed.listed
    report.referenced_files = len(refs)
    log.info(
        "listed %d files (%d older than the cutoff) in %d list calls; %d referenced files from %d "
        "snapshots, %d manifests",
        report.files_listed,
        len(listed.rows),
        report.list_calls,
        report.referenced_files,
        walk.snapshots,
        walk.manifests_read,
    )
    run.phases.done("list_and_reference")
    trim_heap()  # what listing and reading freed, before matching allocates its own

    matched = match_listed(listed.rows, refs)
    report.kept_equivalent = matched.equivalent
    report_undecodable(report, [u.path for u in matched.undecodable])
    protected = protected_locations(walk.table, root, listed.metadata_files, refs, setup.others, setup.equivalence)
    return Unmatched(matched.orphans, matched.conflicts, protected)
