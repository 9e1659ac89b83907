"""The live manifest entries of a snapshot, by file path, with their sequence numbers.

Compaction reads these, not a pyiceberg scan: pyiceberg 0.12 refuses to plan equality deletes, and
a commit needs each entry's data sequence number and the manifest it lives in.
"""

from __future__ import annotations

from dataclasses import dataclass
from threading import Lock

from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.manifest import INITIAL_SEQUENCE_NUMBER, DataFile, DataFileContent, ManifestContent, ManifestEntry
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.index.source.position_deletes import deleted_positions_by_file, single_target
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.reachability.manifest_entries import live_entries as manifest_live_entries


@dataclass(frozen=True)
class LiveEntries:
    snapshot: Snapshot | None
    data: dict[str, ManifestEntry]
    deletes: dict[str, ManifestEntry]


def sequence_number(entry: ManifestEntry) -> int:
    return entry.sequence_number if entry.sequence_number is not None else INITIAL_SEQUENCE_NUMBER


def live_entries(table: Table) -> LiveEntries:
    """The live data and delete entries of the table's current snapshot (empty for a table without one)."""
    snapshot = table.current_snapshot()
    data: dict[str, ManifestEntry] = {}
    deletes: dict[str, ManifestEntry] = {}
    if snapshot is None:
        return LiveEntries(None, data, deletes)
    try:
        for manifest in snapshot.manifests(table.io):
            for entry in manifest_live_entries(table.io, manifest):
                kind = data if entry.data_file.content == DataFileContent.DATA else deletes
                kind[entry.data_file.file_path] = entry
    except Exception as exc:
        raise MetadataReadError(f"snapshot {snapshot.snapshot_id}: manifests cannot be read ({exc})") from exc
    return LiveEntries(snapshot, data, deletes)


def may_hold_live_deletes(table: Table) -> bool:
    """False when the current snapshot's manifest list counts no live entry in any delete manifest.

    A count only ever lets the caller skip work that removes files (trusting it can keep a file, never
    lose one); a manifest list without counts (they are optional in v1) reads as holding some."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return False
    try:
        manifests = snapshot.manifests(table.io)
    except Exception as exc:
        raise MetadataReadError(f"snapshot {snapshot.snapshot_id}: manifest list cannot be read ({exc})") from exc
    return any(
        m.content == ManifestContent.DELETES and (m.has_added_files() or m.has_existing_files()) for m in manifests
    )


@cached(LRUCache(maxsize=1024), lock=Lock(), key=lambda table, delete: hashkey(delete.file_path))
def referenced_data_files(table: Table, delete: DataFile) -> frozenset[str]:
    """The data files a position delete file or deletion vector names (cached: a delete file never changes).

    From the manifest entry when it says (v3's referenced data file, or equal ``file_path`` bounds), else
    read from the file."""
    target = single_target(delete)
    if target is not None:
        return frozenset([target])
    try:
        return frozenset(deleted_positions_by_file(table.io, delete))
    except Exception as exc:
        raise MetadataReadError(f"delete file {delete.file_path!r}: cannot be read ({exc})") from exc


def applying_deletes(table: Table, files: SnapshotFiles, path: str) -> tuple[DataFile, ...]:
    """The delete files that apply to the live data file ``path``: pyiceberg's delete index matches a
    position delete file by partition and path bounds, so one that does not name ``path`` is left out."""
    return tuple(
        d
        for d in files.deletes_for(path)
        if d.content != DataFileContent.POSITION_DELETES or path in referenced_data_files(table, d)
    )
