"""How far an index lags its table: the newest extract's snapshot against the table's current one.

The file counts come from a diff of the two snapshots' live files (data files and delete files,
by path), so they are exact whatever happened in between: appends, deletes, overwrites,
compactions or a rollback. When the extract's snapshot has been expired from the table, its
files are unknown: ``removed_files`` is then null and every current file counts as added.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles, plan_snapshot


@dataclass(frozen=True)
class FileCounts:
    data: int
    delete: int

    def to_json(self) -> dict[str, int]:
        return {"data": self.data, "delete": self.delete}


@dataclass(frozen=True)
class FileDiff:
    """Live files of one snapshot that another lacks, and the reverse (paths)."""

    added_data: frozenset[str]
    removed_data: frozenset[str]
    added_deletes: frozenset[str]
    removed_deletes: frozenset[str]


def diff_files(old: SnapshotFiles, new: SnapshotFiles) -> FileDiff:
    old_data, new_data = set(old.data_files), set(new.data_files)
    old_deletes, new_deletes = set(old.delete_files), set(new.delete_files)
    return FileDiff(
        frozenset(new_data - old_data),
        frozenset(old_data - new_data),
        frozenset(new_deletes - old_deletes),
        frozenset(old_deletes - new_deletes),
    )


@dataclass(frozen=True)
class IndexLag:
    index: str
    table_snapshot_id: int | None
    extract_snapshot_id: int | None
    snapshots_behind: int
    lag_seconds: float | None
    added_files: FileCounts
    removed_files: FileCounts | None
    stale: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "table_snapshot_id": self.table_snapshot_id,
            "extract_snapshot_id": self.extract_snapshot_id,
            "snapshots_behind": self.snapshots_behind,
            "lag_seconds": self.lag_seconds,
            "added_files": self.added_files.to_json(),
            "removed_files": None if self.removed_files is None else self.removed_files.to_json(),
            "stale": self.stale,
        }


def snapshots_behind(table: Table, current: Snapshot, extract_snapshot_id: int | None) -> int:
    """Commits from the extract's snapshot to the current one along the current snapshot's ancestry.

    When the extract's snapshot is not an ancestor (expired, or on another branch) every ancestor counts.
    """
    count = 0
    for snapshot in ancestors_of(current, table.metadata):
        if snapshot.snapshot_id == extract_snapshot_id:
            return count
        count += 1
    return count


def closest_extract(
    table: Table,
    metadata: IndexMetadata,
    snapshot: Snapshot | None,
    usable: Callable[[Extract], bool] = lambda _: True,
) -> Extract | None:
    """The usable extract of the nearest ancestor of ``snapshot`` (itself first), else the newest usable one.

    Among several extracts of one snapshot the latest written is taken.
    """
    for ancestor in ancestors_of(snapshot, table.metadata) if snapshot is not None else ():
        candidates = [e for e in metadata.extracts_for_snapshot(ancestor.snapshot_id) if usable(e)]
        if candidates:
            return max(candidates, key=lambda e: e.timestamp_ms)
    candidates = [e for e in metadata.extracts if usable(e)]
    return max(candidates, key=lambda e: e.timestamp_ms) if candidates else None


def index_lag(table: Table, name: str, metadata: IndexMetadata) -> IndexLag:
    """The lag of the index's most current extract (see ``closest_extract``) behind the table."""
    current = table.current_snapshot()
    newest = closest_extract(table, metadata, current)
    extract_snapshot_id = newest.source_table_snapshot_id if newest else None
    if current is None:
        return IndexLag(name, None, extract_snapshot_id, 0, None, FileCounts(0, 0), FileCounts(0, 0), False)
    current_files = plan_snapshot(table, current)
    extract_snapshot = table.snapshot_by_id(extract_snapshot_id) if extract_snapshot_id is not None else None
    if extract_snapshot is None:
        added = FileCounts(len(current_files.data_files), len(current_files.delete_files))
        removed = FileCounts(0, 0) if newest is None else None
        lag_seconds = None
    else:
        diff = diff_files(plan_snapshot(table, extract_snapshot), current_files)
        added = FileCounts(len(diff.added_data), len(diff.added_deletes))
        removed = FileCounts(len(diff.removed_data), len(diff.removed_deletes))
        lag_seconds = max(current.timestamp_ms - extract_snapshot.timestamp_ms, 0) / 1000
    return IndexLag(
        index=name,
        table_snapshot_id=current.snapshot_id,
        extract_snapshot_id=extract_snapshot_id,
        snapshots_behind=snapshots_behind(table, current, extract_snapshot_id),
        lag_seconds=lag_seconds,
        added_files=added,
        removed_files=removed,
        stale=extract_snapshot_id != current.snapshot_id,
    )
