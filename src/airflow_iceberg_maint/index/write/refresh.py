"""Refreshing an index: build a full extract of a snapshot and commit it by atomic swap (S6).

Region and tracking files get fresh unique names before the commit; the commit only adds the
extract to the metadata. When the refresh fails, the files written for it are deleted again, but
only if the commit is known not to have landed: after a create with no clear answer, a timeout or
SIGTERM mid-commit, the files are kept (the metadata may name them), and a later orphan or index
clean-up removes them if they turn out unreferenced.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.format.extract_files import write_tracking_file
from airflow_iceberg_maint.index.metadata.builders import new_extract, with_extract_schema_for
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.metadata.store import CommitProgress, IndexStore
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot, resolve_snapshot
from airflow_iceberg_maint.index.write.build import EntryLayout, build_regions, entry_layout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefreshResult:
    index: str
    extract: Extract
    mode: str
    region_files_written: int
    region_files_reused: int
    entries: int

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "extract_id": self.extract.extract_id,
            "source_table_snapshot_id": self.extract.source_table_snapshot_id,
            "mode": self.mode,
            "region_files_written": self.region_files_written,
            "region_files_reused": self.region_files_reused,
            "entries": self.entries,
            "tracking_file": self.extract.tracking_file,
        }


def tracking_file_location(metadata: IndexMetadata) -> str:
    return f"{metadata.location.rstrip('/')}/metadata/tracking-{uuid.uuid4()}.parquet"


@dataclass(frozen=True)
class RefreshTarget:
    """What a refresh builds: the index, the snapshot, and the entry layout of the snapshot's extract schema."""

    store: IndexStore
    metadata: IndexMetadata  # with the snapshot's extract schema added when it was missing
    snapshot: Snapshot
    layout: EntryLayout


def refresh_target(table: Table, name: str, snapshot_id: int | None = None) -> RefreshTarget:
    """Load the index and resolve the snapshot (default: current) a refresh indexes."""
    store = IndexStore(table)
    metadata, _, _ = store.load(name)
    snapshot = resolve_snapshot(table, snapshot_id)
    if snapshot is None:
        raise InvalidInputError(f"table {table.name()}: has no snapshot to index")
    # Raises with the field named when an indexed column was dropped: no extract can be created.
    working, schema_id = with_extract_schema_for(metadata, table.metadata, snapshot.snapshot_id)
    return RefreshTarget(store, working, snapshot, entry_layout(working, working.schema_by_id(schema_id)))


def refresh_full(table: Table, name: str, snapshot_id: int | None = None) -> RefreshResult:
    """Index every live row of the snapshot (default: current) in a new extract, and commit it."""
    target = refresh_target(table, name, snapshot_id)
    store, snapshot, layout = target.store, target.snapshot, target.layout
    regions, entries = build_regions(table, plan_snapshot(table, snapshot), layout)
    tracking = tracking_file_location(target.metadata)
    progress = CommitProgress()
    try:
        size = write_tracking_file(table.io, tracking, layout.stats_columns, regions)
        committed = commit_extract(store, name, table, snapshot.snapshot_id, tracking, size, progress=progress)
    except BaseException:
        discard_unless_committed(table, name, [tracking, *(r.file_path for r in regions)], progress)
        raise
    return RefreshResult(name, committed, "full", len(regions), 0, entries)


def commit_extract(
    store: IndexStore,
    name: str,
    table: Table,
    snapshot_id: int,
    tracking: str,
    size: int,
    check: Callable[[IndexMetadata], None] | None = None,
    progress: CommitProgress | None = None,
    properties: Mapping[str, str] | None = None,
) -> Extract:
    """Add an extract for ``tracking`` to the index, re-deriving its schema on every retry.

    ``check`` runs first on every attempt's base metadata and aborts the commit by raising (an
    incremental refresh checks there that the region files it reuses are still live).
    """
    added: list[Extract] = []

    def update(current: IndexMetadata) -> IndexMetadata:
        if check is not None:
            check(current)
        updated, schema_id = with_extract_schema_for(current, table.metadata, snapshot_id)
        extract = new_extract(updated, snapshot_id, schema_id, tracking, size, properties)
        added[:] = [extract]
        return updated.with_extract(extract)

    store.commit(name, update, progress=progress)
    return added[0]


def discard_unless_committed(table: Table, name: str, paths: list[str], progress: CommitProgress) -> None:
    """After a failed refresh, delete the files written for it, unless the commit may have landed."""
    if progress.may_have_committed:
        log.warning(
            "index %s: kept the %d files of the new extract (%s): its commit may have landed",
            name,
            len(paths),
            paths[0] if paths else "",
        )
        return
    _delete_quietly(table, paths)


def _delete_quietly(table: Table, paths: list[str]) -> None:
    for path in paths:
        try:
            table.io.delete(path)
        except Exception as exc:
            # Left behind, the file is unreferenced and removed by the index file clean-up.
            log.warning("could not delete %s after a failed refresh: %s", path, exc)
