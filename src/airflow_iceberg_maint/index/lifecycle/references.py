"""The files an index keeps alive (S1), and the clean-up of index files nothing references.

Live index files are: every numbered metadata file of the index, and the tracking file and
region files of every extract of the current metadata (the only root of reachability:
docs/index-format.md, decision 16).
``index_file_batches`` feeds them to the orphan engine's referenced set; any read error aborts
the orphan run (S2). ``remove_unreferenced_index_files`` deletes what lies under an index
directory outside that set: files of failed builds, of expired extracts whose deletion failed,
metadata versions dropped from the log, and temporary files of interrupted commits. Like the
orphan run's re-check, it reloads each index's metadata after finding those files and before
deleting them, and keeps any file a commit that landed meanwhile references (a sharded build
whose shards wrote their files long ago and commits now, say).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.fs.backends import table_storage
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.index.format.extract_files import region_file_paths
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.reachability.cutoff import resolve_cutoff
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource

log = logging.getLogger(__name__)

#: Called with a stage name: ``"unreferenced"`` once every index's unreferenced files are known,
#: before the re-check and the deletion (tests commit there to prove the re-check).
UnreferencedHook = Callable[[str], None]


def extract_file_batches(table: Table, metadata: IndexMetadata) -> Iterator[list[str]]:
    """Per extract of ``metadata``: its tracking file and the region files that tracking file lists."""
    for extract in metadata.extracts:
        tracking = metadata.resolve_location(extract.tracking_file)
        yield [tracking, *region_file_paths(table.io, tracking, metadata.location)]


def not_referenced(paths: list[str], refs: ReferencedSet) -> list[str]:
    """The paths that are neither referenced exactly nor the same file under another spelling (S4)."""
    unmatched = [path for path, hit in zip(paths, refs.contains_exact(paths), strict=True) if not hit]
    protected = refs.classify_unmatched(unmatched)
    return [path for path in unmatched if path not in protected]


def _index_batches(store: IndexStore, name: str) -> Iterator[list[str]]:
    metadata, _, _ = store.load(name)
    # Every numbered metadata file: they are cleaned by the index itself (delete-after-commit, or
    # remove_unreferenced_index_files), never by the orphan run.
    yield [*store.versions(name).values(), *(entry.metadata_file for entry in metadata.metadata_log)]
    yield from extract_file_batches(store.table, metadata)


def index_file_batches(table: Table) -> Iterator[list[str]]:
    """Every metadata, tracking and region file of every live extract of every index of the table.

    Any failure raises ``MetadataReadError`` so the orphan run deletes nothing (S2).
    """
    try:
        store = IndexStore(table)
        for name in store.names():
            yield from _index_batches(store, name)
    except MetadataReadError:
        raise
    except Exception as exc:
        raise MetadataReadError(f"indexes of table {table.metadata.location!r}: cannot be read ({exc})") from exc


@dataclass
class UnreferencedReport:
    """What ``remove_unreferenced_index_files`` found and did."""

    table: str
    older_than: datetime
    dry_run: bool
    indexes: list[str] = field(default_factory=list)
    unreferenced_files: list[str] = field(default_factory=list)
    kept_by_recheck: list[str] = field(default_factory=list)
    deleted_file_count: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "older_than": self.older_than.isoformat(),
            "dry_run": self.dry_run,
            "indexes": self.indexes,
            "unreferenced_files": self.unreferenced_files,
            "kept_by_recheck": self.kept_by_recheck,
            "deleted_file_count": self.deleted_file_count,
            "failed": self.failed,
        }


def _index_references(store: IndexStore, name: str) -> ReferencedSet:
    """What the index references now: the current metadata file, those its log lists, any newer
    one (a concurrent commit), and the files of the current extracts. Read afresh on each call."""
    metadata, location, current = store.load(name)
    refs = ReferencedSet(PathEquivalence())
    newer = [loc for version, loc in store.versions(name).items() if version > current]
    refs.add([location, *(entry.metadata_file for entry in metadata.metadata_log), *newer])
    for batch in extract_file_batches(store.table, metadata):
        refs.add(batch)
    return refs


def _unreferenced_in(store: IndexStore, name: str, cutoff: datetime) -> list[str]:
    """Files under the index directory, older than ``cutoff``, that nothing of the index references."""
    refs = _index_references(store, name)
    directory = store.index_dir(name)
    listed = [
        f.path
        for f in table_storage(directory, store.table.io).list_files(directory, lambda _: True)
        if f.mtime is not None and f.mtime < cutoff
    ]
    return sorted(not_referenced(listed, refs))


def remove_unreferenced_index_files(
    table: Table,
    older_than: datetime,
    name: str | None = None,
    dry_run: bool = False,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    now: datetime | None = None,
    on_stage: UnreferencedHook | None = None,
) -> UnreferencedReport:
    """Delete index files older than ``older_than`` that no extract or metadata version references.

    All indexes of the table, or only ``name``. Every index is read before anything is deleted,
    so a read error deletes nothing (S2). The age cutoff protects files of builds still running;
    the re-check, files a commit that landed during the run references (what is left is the
    window between the re-check and the deletes, which the cutoff covers).
    """
    cutoff = resolve_cutoff(None, older_than, now or datetime.now(UTC))
    store = IndexStore(table)
    report = UnreferencedReport(table.metadata.location, cutoff, dry_run)
    report.indexes = [name] if name is not None else store.names()
    found = {index: _unreferenced_in(store, index, cutoff) for index in report.indexes}
    if on_stage is not None:
        on_stage("unreferenced")
    for index, paths in found.items():
        if not paths:
            continue
        # Re-check against the index as it is now: any read error raises, and nothing is deleted (S2).
        still = set(not_referenced(paths, _index_references(store, index)))
        report.unreferenced_files.extend(p for p in paths if p in still)
        report.kept_by_recheck.extend(p for p in paths if p not in still)
    if report.kept_by_recheck:
        log.info("kept %d index files a commit during the run references", len(report.kept_by_recheck))
    if dry_run or not report.unreferenced_files:
        return report
    storage = table_storage(store.root, table.io)
    outcome = storage.delete_files(report.unreferenced_files, max_concurrent_deletes)
    report.deleted_file_count = len(outcome.deleted)
    report.failed = [{"path": p, "error": e} for p, e in outcome.failed]
    log.info("deleted %d unreferenced index files, %d failed", report.deleted_file_count, len(report.failed))
    return report


class IndexFiles:
    """The index package's ``ReferenceSource``: the orphan run keeps every file of every index (S1)."""

    name = "indexes"

    def path_batches(self, table: Table) -> Iterator[list[str]]:
        return index_file_batches(table)


#: The reference source every orphan run passes.
INDEX_FILES: ReferenceSource = IndexFiles()


class IndexExtractSnapshots:
    """The index package's ``SnapshotPin``: expiry keeps the snapshot of each index's newest extract (S13).

    Lookups reconcile from that snapshot and refreshes start from it; without it every lookup
    scans the table and the next refresh is a full build.
    """

    name = "indexes"

    def snapshot_ids(self, table: Table) -> dict[int, str]:
        try:
            store = IndexStore(table)
            pinned: dict[int, str] = {}
            for name in store.names():
                metadata, _, _ = store.load(name)
                if metadata.extracts:
                    newest = max(metadata.extracts, key=lambda e: e.timestamp_ms)
                    pinned.setdefault(newest.source_table_snapshot_id, f"newest extract of index {name}")
            return pinned
        except MetadataReadError:
            raise
        except Exception as exc:
            raise MetadataReadError(f"indexes of table {table.metadata.location!r}: cannot be read ({exc})") from exc


#: The snapshot pin every expiry passes.
INDEX_SNAPSHOTS = IndexExtractSnapshots()
