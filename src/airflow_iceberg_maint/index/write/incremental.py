"""Incremental index refresh: a new extract from the nearest usable one plus the table's changes since.

The base is the extract of the nearest ancestor of the target snapshot (else the newest one)
that this implementation can trust: not encrypted, its snapshot still in the table, an extract
schema no newer than the target's whose ordering-key types order values as the target's do,
and a tracking file whose ``group_max_value`` keys route entries exactly. The two snapshots'
live files are diffed:

- data files added: all their live rows are added;
- data files removed (deletes, overwrites, compaction): all their entries are dropped;
- data files in both whose deletes changed (new position deletes, deletion vectors, equality
  deletes, or deletes that went away): the file's live positions in both snapshots are
  compared, rows no longer live are dropped and rows live again are added.

``region_rewrite`` then rewrites only the region files those entries touch. The commit checks,
inside the metadata update, that every reused region file is still listed by an extract of the
metadata it commits on top of (a concurrent expiry may have dropped it); if not, the refresh is
redone from the new metadata, and after that rebuilt fully. Whenever no base is usable, or the
base turns out not to hold what it should, the refresh is a full build: never a wrong extract.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from airflow_iceberg_maint.errors import MaintenanceError, MetadataReadError
from airflow_iceberg_maint.index.format.extract_files import read_tracking_file, region_file_paths, write_tracking_file
from airflow_iceberg_maint.index.lifecycle.lag import closest_extract, diff_files
from airflow_iceberg_maint.index.metadata.expressions import FILE_COLUMN_ID, POS_COLUMN_ID
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.metadata.rules import is_valid_promotion
from airflow_iceberg_maint.index.metadata.store import CommitProgress
from airflow_iceberg_maint.index.source.live_rows import plan_schema
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles, plan_snapshot
from airflow_iceberg_maint.index.write.build import EntryLayout, entries_for_files, entry_layout
from airflow_iceberg_maint.index.write.refresh import (
    RefreshResult,
    commit_extract,
    discard_unless_committed,
    refresh_full,
    refresh_target,
    tracking_file_location,
)
from airflow_iceberg_maint.index.write.region_rewrite import (
    RegionChange,
    RegionRewrite,
    RegionRewriteMismatch,
    promote_stats,
    region_bounds,
    rewrite_regions,
)
from airflow_iceberg_maint.progress import Phase

log = logging.getLogger(__name__)

#: Incremental attempts when reused region files vanish (a concurrent expiry) before a full build.
INCREMENTAL_ATTEMPTS = 2


class ReusedRegionFilesGone(MaintenanceError):
    """A region file the refresh reuses is no longer listed by any extract of the index."""


def refresh_index(table: Table, name: str, snapshot_id: int | None = None, full: bool = False) -> RefreshResult:
    """Refresh an index to a snapshot (default: current): incremental when possible, else (or with ``full``) full."""
    if full:
        return refresh_full(table, name, snapshot_id)
    for attempt in range(1, INCREMENTAL_ATTEMPTS + 1):
        try:
            result = refresh_incremental(table, name, snapshot_id)
        except (ReusedRegionFilesGone, MetadataReadError) as exc:
            # The base changed under us (expired, files deleted): start again from the new metadata.
            log.info("index %s: incremental refresh attempt %d gave up (%s)", name, attempt, exc)
            continue
        except RegionRewriteMismatch as exc:
            log.warning("index %s: the base extract does not match its snapshot (%s); building fully", name, exc)
            break
        if result is not None:
            return result
        break
    return refresh_full(table, name, snapshot_id)


def refresh_incremental(table: Table, name: str, snapshot_id: int | None = None) -> RefreshResult | None:
    """An extract of the snapshot built from a usable base extract; None when there is none."""
    target = refresh_target(table, name, snapshot_id)
    store, working, snapshot, layout = target.store, target.metadata, target.snapshot, target.layout
    base = _base_extract(table, working, snapshot, layout)
    if base is None:
        return None
    base_layout = entry_layout(working, working.extract_schema(base))
    regions = [
        promote_stats(r, base_layout.stats_columns, layout.stats_columns)
        for r in read_tracking_file(table.io, working.resolve_location(base.tracking_file), working.location)
    ]
    bounds = region_bounds(regions, layout)
    if bounds is None:
        log.info("index %s: extract %d cannot route entries (group_max_value); building fully", name, base.extract_id)
        return None
    base_snapshot = table.snapshot_by_id(base.source_table_snapshot_id)
    assert base_snapshot is not None  # checked by _base_extract
    change = table_change(table, plan_snapshot(table, base_snapshot), plan_snapshot(table, snapshot), layout)

    rewrite = RegionRewrite()
    tracking = tracking_file_location(working)
    progress = CommitProgress()
    try:
        with Phase("building regions", total=len(regions)) as building:
            rewrite_regions(table.io, layout, regions, bounds, change, rewrite, progress=building)
        size = write_tracking_file(table.io, tracking, layout.stats_columns, rewrite.entries)
        reused = {r.file_path for r in rewrite.reused}
        committed = commit_extract(
            store,
            name,
            table,
            snapshot.snapshot_id,
            tracking,
            size,
            check=lambda current: _check_reused_live(table, current, base, reused),
            progress=progress,
        )
    except BaseException:
        # Only the files this refresh wrote; reused region files belong to the base extract.
        discard_unless_committed(table, name, [tracking, *(r.file_path for r in rewrite.written)], progress)
        raise
    return RefreshResult(
        name,
        committed,
        "incremental",
        len(rewrite.written),
        len(rewrite.reused),
        sum(r.record_count for r in rewrite.entries),
    )


def _has_row_location(metadata: IndexMetadata) -> bool:
    sources = {f.source_id for f in metadata.identity_fields}
    return FILE_COLUMN_ID in sources and POS_COLUMN_ID in sources


def _base_extract(table: Table, metadata: IndexMetadata, snapshot: Snapshot, layout: EntryLayout) -> Extract | None:
    """The extract to start from (see the module docstring), or None."""
    if not _has_row_location(metadata):
        return None  # entries of removed files and deleted rows cannot be found without _file and _pos
    schema_order = [s.schema_id for s in metadata.schemas]
    target_rank = schema_order.index(layout.extract_schema.schema_id)

    def usable(extract: Extract) -> bool:
        return (
            extract.key_id is None
            and table.snapshot_by_id(extract.source_table_snapshot_id) is not None
            # A region file must not be reused by an extract of an older extract schema (spec).
            and schema_order.index(extract.extract_schema_id) <= target_rank
            and _reuse_keeps_order(metadata, extract, layout)
        )

    return closest_extract(table, metadata, snapshot, usable)


def _reuse_keeps_order(metadata: IndexMetadata, extract: Extract, layout: EntryLayout) -> bool:
    """The reuse rule (docs/index-format.md, "Incremental refresh"): each ordering-key type of the
    target orders the base type's values identically.

    Every promotion the table spec allows (int->long, float->double, decimal widening,
    date->timestamp) keeps the order of values and of the transforms over them
    (docs/index-format.md, question 10); any other difference is refused.
    """
    old = {o.field_id: o.data_type for o in metadata.ordering_fields(metadata.extract_schema(extract))}
    return all(is_valid_promotion(old[o.field_id], o.data_type) for o in layout.ordering)


def table_change(table: Table, base: SnapshotFiles, target: SnapshotFiles, layout: EntryLayout) -> RegionChange:
    """The entries to add and drop to turn an extract of ``base`` into one of ``target``."""
    diff = diff_files(base, target)
    schema = plan_schema(table, target)
    changed = [p for p in sorted(set(base.data_files) & set(target.data_files)) if _deletes_changed(base, target, p)]
    removed = [layout.region_schema.empty_table()]
    pos_name = next(f.name for f in layout.extract_schema.fields if layout.source_ids[f.field_id] == POS_COLUMN_ID)
    with Phase("reading data files", total=len(diff.added_data) + len(changed)) as reading:
        additions = [entries_for_files(table, target, sorted(diff.added_data), layout, progress=reading)]
        for path in changed:
            before = entries_for_files(table, base, [path], layout, table_schema=schema)
            after = entries_for_files(table, target, [path], layout)
            before_pos, after_pos = before.column(pos_name), after.column(pos_name)
            removed.append(before.filter(pc.invert(pc.is_in(before_pos, value_set=after_pos.combine_chunks()))))
            additions.append(after.filter(pc.invert(pc.is_in(after_pos, value_set=before_pos.combine_chunks()))))
            reading.advance()
    return RegionChange(
        additions=pa.concat_tables(additions).unify_dictionaries(),
        removed_files=diff.removed_data,
        removed_entries=pa.concat_tables(removed).unify_dictionaries(),
    )


def _deletes_changed(base: SnapshotFiles, target: SnapshotFiles, path: str) -> bool:
    """Whether a data file live in both snapshots may have other live rows in each."""
    if base.data_files[path].sequence_number != target.data_files[path].sequence_number:
        return True
    return {d.file_path for d in base.deletes_for(path)} != {d.file_path for d in target.deletes_for(path)}


def _check_reused_live(table: Table, current: IndexMetadata, base: Extract, reused: set[str]) -> None:
    """Raise unless every reused region file is listed by an extract of ``current`` (S1 against expiry)."""
    if not reused or any(
        e.extract_id == base.extract_id and e.tracking_file == base.tracking_file for e in current.extracts
    ):
        return  # the base extract still lists them all
    live: set[str] = set()
    for extract in current.extracts:
        live.update(region_file_paths(table.io, current.resolve_location(extract.tracking_file), current.location))
    gone = reused - live
    if gone:
        raise ReusedRegionFilesGone(f"{len(gone)} reused region file(s) are no longer listed by any extract")
