"""What a read through an index reads: the current metadata, the extract, the snapshots to reconcile.

An extract is used as is only for exactly its source snapshot. For another snapshot the read is
reconciled against that snapshot's files: hits in data files that are gone are dropped; hits in
data files whose deletes only grew get the new deletes applied; data files that are new (or whose
deletes shrank) are scanned with the key filter. When those files exceed
``RECONCILE_MAX_SCAN_FRACTION`` of the snapshot's data bytes, or no usable extract exists, the
read is a plain filtered scan instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from threading import Lock

from cachetools import LRUCache
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from airflow_iceberg_maint.index.lifecycle.lag import closest_extract
from airflow_iceberg_maint.index.metadata.expressions import FILE_COLUMN_ID, POS_COLUMN_ID
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles, plan_snapshot

#: Reconcile a lagging extract only while the data files to scan stay below this share of the
#: snapshot's data bytes; beyond it a plain scan is about as cheap and simpler (Hyperspace's 30%).
RECONCILE_MAX_SCAN_FRACTION = 0.3


_metadata_cache: LRUCache[tuple[str, str], IndexMetadata] = LRUCache(maxsize=64)
_metadata_lock = Lock()


def current_metadata(store: IndexStore, name: str) -> IndexMetadata:
    """The index's current metadata; a file already loaded and checked against this table state is reused.

    Metadata files are immutable and named by version, so listing the versions is enough to know
    whether the newest one is already known.
    """
    versions = store.versions(name)
    table_state = store.table.metadata_location
    if versions:
        key = (versions[max(versions)], table_state)
        with _metadata_lock:
            known = _metadata_cache.get(key)
        if known is not None:
            return known
    metadata, location, _ = store.load(name)
    with _metadata_lock:
        _metadata_cache[(location, table_state)] = metadata
    return metadata


@dataclass
class ReadPlan:
    """What a read reads: the extract, the snapshot and, for reconciliation, both file sets."""

    target: SnapshotFiles
    extract: Extract | None = None
    source: SnapshotFiles | None = None
    rescan: set[str] = field(default_factory=set)


def _has_row_location(metadata: IndexMetadata) -> bool:
    sources = {f.source_id for f in metadata.identity_fields}
    return FILE_COLUMN_ID in sources and POS_COLUMN_ID in sources


def choose_plan(table: Table, metadata: IndexMetadata, snapshot: Snapshot) -> ReadPlan:
    """The closest readable extract for ``snapshot`` with the files to rescan, or a plain scan (no extract)."""
    target = plan_snapshot(table, snapshot)
    extract = None
    if _has_row_location(metadata):
        # Encrypted extracts (a key-id) cannot be read here.
        extract = closest_extract(table, metadata, snapshot, usable=lambda e: e.key_id is None)
    source_snapshot = table.snapshot_by_id(extract.source_table_snapshot_id) if extract else None
    if extract is None or source_snapshot is None:
        return ReadPlan(target)  # no readable extract, or its snapshot expired: its files are unknown
    if source_snapshot.snapshot_id == snapshot.snapshot_id:
        return ReadPlan(target, extract)
    source = plan_snapshot(table, source_snapshot)
    rescan = {p for p in target.data_files if p not in source.data_files or not _deletes_only_grew(source, target, p)}
    rescan_bytes = sum(target.data_files[p].data_file.file_size_in_bytes for p in rescan)
    if rescan_bytes > RECONCILE_MAX_SCAN_FRACTION * max(target.data_bytes(), 1):
        return ReadPlan(target)
    return ReadPlan(target, extract, source, rescan)


def _deletes_only_grew(source: SnapshotFiles, target: SnapshotFiles, path: str) -> bool:
    """Whether every delete applied to the file in the extract's snapshot still applies (rows can't revive)."""
    before = {d.file_path for d in source.deletes_for(path)}
    return before <= {d.file_path for d in target.deletes_for(path)}
