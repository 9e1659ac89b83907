"""Delete files that no longer apply to any live data file, removed in a ``replace`` commit of their own.

A position delete file or deletion vector is dangling when none of the data files it names is
live. An equality delete file is dangling when no live data file in its scope (its partition, or
every partition for an unpartitioned spec's) has a data sequence number below its own. Removing
either changes no row of the snapshot. The set is computed again on the metadata of each commit
attempt, so a file that a concurrent commit gives something to delete again is kept. A snapshot
whose manifest list counts no added or existing file in any delete manifest has no live delete file,
and its manifests are not read (a count that is missing is read as "some": the manifests are read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from airflow_iceberg_maint.compaction.commit import commit_replace
from airflow_iceberg_maint.compaction.live_files import (
    LiveEntries,
    live_entries,
    may_hold_live_deletes,
    referenced_data_files,
    sequence_number,
)
from airflow_iceberg_maint.compaction.options import COMMIT_ATTEMPTS
from airflow_iceberg_maint.compaction.snapshot import replace_snapshot


@dataclass(frozen=True)
class DanglingResult:
    snapshot_id: int | None
    removed: int
    error: str | None = None


def dangling_deletes(table: Table, live: LiveEntries) -> set[str]:
    data_paths = set(live.data)
    oldest: dict[tuple[int, Record] | None, int] = {}  # lowest data sequence number per partition, and overall
    for entry in live.data.values():
        for key in (None, (entry.data_file.spec_id, entry.data_file.partition)):
            oldest[key] = min(oldest.get(key, sequence_number(entry)), sequence_number(entry))
    dangling = set()
    for path, entry in live.deletes.items():
        delete = entry.data_file
        if delete.content == DataFileContent.POSITION_DELETES:
            applies = bool(referenced_data_files(table, delete) & data_paths)
        else:
            scope = None if not delete.partition or len(delete.partition) == 0 else (delete.spec_id, delete.partition)
            applies = oldest.get(scope, sequence_number(entry)) < sequence_number(entry)
        if not applies:
            dangling.add(path)
    return dangling


def remove_dangling_deletes(load: Callable[[], Table]) -> DanglingResult:
    for _attempt in range(COMMIT_ATTEMPTS):
        table = load()
        if not may_hold_live_deletes(table):
            return DanglingResult(None, 0)
        live = live_entries(table)
        dangling = dangling_deletes(table, live)
        if not dangling:
            return DanglingResult(None, 0)
        replace = replace_snapshot(table, table.metadata, dangling, [], None)
        if not commit_replace(load, table, replace, "the dangling-delete commit"):
            continue
        return DanglingResult(replace.snapshot_id, len(replace.removed))
    return DanglingResult(None, 0, f"lost the commit race {COMMIT_ATTEMPTS} times; retry later")
