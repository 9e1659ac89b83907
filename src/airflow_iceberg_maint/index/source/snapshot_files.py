"""The data and delete files of one table snapshot, and which deletes apply to which data file.

pyiceberg 0.12 refuses to plan a snapshot that holds equality deletes, so the index plans
snapshots itself from the manifests: data files with their data sequence numbers, position
delete files and deletion vectors (matched through pyiceberg's ``DeleteFileIndex``), and
equality delete files (matched here by the table spec's sequence-number and partition rules).
A plan is immutable for a snapshot, so recent plans are kept in a small in-process cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from threading import Lock

from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.manifest import INITIAL_SEQUENCE_NUMBER, DataFile, DataFileContent, ManifestEntry
from pyiceberg.table import Table
from pyiceberg.table.delete_file_index import DeleteFileIndex
from pyiceberg.table.snapshots import Snapshot

from airflow_iceberg_maint.errors import InvalidInputError, MetadataReadError
from airflow_iceberg_maint.reachability.manifest_entries import live_entries

_CACHE_SIZE = 16


@dataclass(frozen=True)
class LiveDataFile:
    """A live data file of a snapshot with its data sequence number."""

    data_file: DataFile
    sequence_number: int


@dataclass
class SnapshotFiles:
    """Everything a reader needs to produce the live rows of one snapshot."""

    snapshot_id: int
    schema_id: int | None
    data_files: dict[str, LiveDataFile]
    delete_files: dict[str, DataFile]
    _position_index: DeleteFileIndex = field(repr=False)
    _equality_deletes: list[tuple[DataFile, int]] = field(repr=False)

    def deletes_for(self, path: str) -> list[DataFile]:
        """Delete files (position, deletion vector, equality) that apply to a live data file."""
        live = self.data_files[path]
        data_file = live.data_file
        matched = list(self._position_index.for_data_file(live.sequence_number, data_file, data_file.partition))
        matched.extend(
            delete
            for delete, seq in self._equality_deletes
            if seq > live.sequence_number and _same_partition_scope(delete, data_file)
        )
        return sorted(matched, key=lambda d: d.file_path)

    def data_bytes(self) -> int:
        return sum(f.data_file.file_size_in_bytes for f in self.data_files.values())


def _same_partition_scope(delete: DataFile, data_file: DataFile) -> bool:
    """An equality delete of an unpartitioned spec is global; otherwise it needs the same partition."""
    if not delete.partition or len(delete.partition) == 0:
        return True
    return delete.spec_id == data_file.spec_id and delete.partition == data_file.partition


def resolve_snapshot(table: Table, snapshot_id: int | None) -> Snapshot | None:
    """The requested snapshot, or the current one; None for a table without snapshots."""
    if snapshot_id is None:
        return table.current_snapshot()
    snapshot = table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise InvalidInputError(f"--snapshot-id {snapshot_id}: the table has no such snapshot")
    return snapshot


@cached(
    LRUCache(maxsize=_CACHE_SIZE),
    lock=Lock(),
    key=lambda table, snapshot: hashkey(str(table.metadata.table_uuid), snapshot.snapshot_id),
)
def plan_snapshot(table: Table, snapshot: Snapshot) -> SnapshotFiles:
    """The live files of a snapshot (cached: a snapshot's manifests never change)."""
    return _read_plan(table, snapshot)


def _manifest_entries(table: Table, snapshot: Snapshot) -> Iterable[ManifestEntry]:
    try:
        for manifest in snapshot.manifests(table.io):
            yield from live_entries(table.io, manifest)
    except Exception as exc:
        raise MetadataReadError(f"snapshot {snapshot.snapshot_id}: manifests cannot be read ({exc})") from exc


def _read_plan(table: Table, snapshot: Snapshot) -> SnapshotFiles:
    data_files: dict[str, LiveDataFile] = {}
    delete_files: dict[str, DataFile] = {}
    position_index = DeleteFileIndex()
    equality: list[tuple[DataFile, int]] = []
    for entry in _manifest_entries(table, snapshot):
        data_file = entry.data_file
        seq = entry.sequence_number if entry.sequence_number is not None else INITIAL_SEQUENCE_NUMBER
        if data_file.content == DataFileContent.DATA:
            data_files[data_file.file_path] = LiveDataFile(data_file, seq)
        elif data_file.content == DataFileContent.POSITION_DELETES:
            delete_files[data_file.file_path] = data_file
            position_index.add_delete_file(entry, partition_key=data_file.partition)
        elif data_file.content == DataFileContent.EQUALITY_DELETES:
            delete_files[data_file.file_path] = data_file
            equality.append((data_file, seq))
        else:
            raise MetadataReadError(f"snapshot {snapshot.snapshot_id}: unknown content {data_file.content!r}")
    return SnapshotFiles(
        snapshot_id=snapshot.snapshot_id,
        schema_id=snapshot.schema_id,
        data_files=data_files,
        delete_files=delete_files,
        _position_index=position_index,
        _equality_deletes=equality,
    )
