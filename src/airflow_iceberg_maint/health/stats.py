"""A table's statistics from its metadata and the manifests of its current snapshot: no data file is read,
nothing is listed.

The manifests are decoded by pyiceberg (its entries carry the partition tuple, the record count and the
content kind the counts need); on object stores they are read on a few threads. A manifest that cannot
be read is a ``MetadataReadError`` naming it: the statistics are exact or not given.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestFile
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.errors import InvalidInputError, MetadataReadError, first_line
from airflow_iceberg_maint.fs.locations import Uri

#: A data file below this share of the target size is small (docs/cli.md, health).
SMALL_SHARE = 0.75
#: The histogram's bucket bounds: a file of ``s`` bytes counts in the first bucket with ``s <= upper``;
#: the last bucket (``upper_bytes`` null) holds the rest.
HISTOGRAM_UPPER_BYTES = tuple([64 * 2**10, 2**20, 16 * 2**20, 64 * 2**20, 128 * 2**20, 256 * 2**20, 512 * 2**20, 2**30])
REMOTE_READERS = 8


@dataclass
class PartitionStats:
    """The counts of one partition (``spec_id`` and its tuple, rendered as a path)."""

    partition: str
    spec_id: int
    data_files: int = 0
    small_data_files: int = 0
    data_rows: int = 0
    delete_files: int = 0
    deleted_rows: int = 0
    manifests: set[str] = field(default_factory=set)

    @property
    def delete_ratio(self) -> float:
        return min(1.0, self.deleted_rows / self.data_rows) if self.data_rows else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "spec_id": self.spec_id,
            "data_files": self.data_files,
            "small_data_files": self.small_data_files,
            "data_rows": self.data_rows,
            "delete_files": self.delete_files,
            "deleted_rows": self.deleted_rows,
            "delete_ratio": round(self.delete_ratio, 6),
            "manifests": len(self.manifests),
        }


@dataclass
class TableStats:
    snapshot_id: int | None
    target_file_size_bytes: int
    data_files: int = 0
    data_bytes: int = 0
    data_rows: int = 0
    small_data_files: int = 0
    histogram: list[int] = field(default_factory=lambda: [0] * (len(HISTOGRAM_UPPER_BYTES) + 1))
    position_deletes: int = 0
    equality_deletes: int = 0
    deletion_vectors: int = 0
    delete_bytes: int = 0
    deleted_rows: int = 0
    manifests: int = 0
    manifest_bytes: int = 0
    manifest_entries: int = 0
    #: Manifests more than the target manifest size needs, per spec and content (what rewrite-manifests removes).
    surplus_manifests: int = 0
    partitions: dict[tuple[int, Any], PartitionStats] = field(default_factory=dict)

    @property
    def delete_files(self) -> int:
        return self.position_deletes + self.equality_deletes + self.deletion_vectors

    @property
    def compactable_small_files(self) -> int:
        """Small data files that share their partition with another small file: compaction can merge them."""
        return sum(p.small_data_files for p in self.partitions.values() if p.small_data_files > 1)

    def histogram_json(self) -> list[dict[str, int | None]]:
        uppers: list[int | None] = [*HISTOGRAM_UPPER_BYTES, None]
        return [{"upper_bytes": upper, "files": n} for upper, n in zip(uppers, self.histogram, strict=True)]


def _bucket(size: int) -> int:
    for i, upper in enumerate(HISTOGRAM_UPPER_BYTES):
        if size <= upper:
            return i
    return len(HISTOGRAM_UPPER_BYTES)


def target_file_size(metadata: TableMetadata, given: int | None) -> int:
    """``given``, else the table's ``write.target-file-size-bytes``, else Iceberg's default (512 MiB)."""
    if given is not None:
        return given
    text = metadata.properties.get(TableProperties.WRITE_TARGET_FILE_SIZE_BYTES)
    if text is None:
        return TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidInputError(
            f"table property {TableProperties.WRITE_TARGET_FILE_SIZE_BYTES}={text!r}: expected a whole number >= 1"
        )
    return value


def _manifest_target(metadata: TableMetadata) -> int:
    text = metadata.properties.get(TableProperties.MANIFEST_TARGET_SIZE_BYTES)
    try:
        value = int(str(text).strip()) if text is not None else TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
    except ValueError:
        value = TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
    return max(value, 1)


def _entries(io: FileIO, manifest: ManifestFile) -> list[DataFile]:
    try:
        return [entry.data_file for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)]
    except Exception as exc:
        raise MetadataReadError(f"manifest {manifest.manifest_path!r}: cannot be read ({first_line(exc)})") from exc


def _read_all(table: Table, manifests: list[ManifestFile]) -> Iterator[tuple[ManifestFile, list[DataFile]]]:
    if Uri.parse(table.metadata.location).is_local or len(manifests) < 2:
        for manifest in manifests:
            yield manifest, _entries(table.io, manifest)
        return
    with ThreadPoolExecutor(max_workers=min(REMOTE_READERS, len(manifests))) as pool:
        yield from zip(manifests, pool.map(lambda m: _entries(table.io, m), manifests), strict=True)


def _manifests(table: Table) -> list[ManifestFile]:
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return []
    try:
        return list(snapshot.manifests(table.io))
    except Exception as exc:
        raise MetadataReadError(
            f"manifest list {snapshot.manifest_list!r}: cannot be read ({first_line(exc)})"
        ) from exc


def _partition(table: Table, stats: TableStats, file: DataFile) -> PartitionStats:
    key = (file.spec_id, file.partition)
    found = stats.partitions.get(key)
    if found is None:
        spec = table.metadata.specs().get(file.spec_id)
        try:
            name = spec.partition_to_path(file.partition, table.schema()) if spec and spec.fields else ""
        except Exception:  # a partition of an old schema: its tuple still groups, only the name is raw
            name = str(file.partition)
        found = stats.partitions[key] = PartitionStats(name, file.spec_id)
    return found


def table_stats(table: Table, target_file_size_bytes: int | None = None) -> TableStats:
    """Count the live files of the current snapshot, by kind, size and partition."""
    metadata = table.metadata
    snapshot = metadata.current_snapshot()
    stats = TableStats(snapshot.snapshot_id if snapshot else None, target_file_size(metadata, target_file_size_bytes))
    small_below = stats.target_file_size_bytes * SMALL_SHARE
    manifests = _manifests(table)
    stats.manifests = len(manifests)
    stats.manifest_bytes = sum(m.manifest_length for m in manifests)
    groups: dict[tuple[int, int], tuple[int, int]] = {}
    for m in manifests:
        count, size = groups.get((m.partition_spec_id, int(m.content)), (0, 0))
        groups[(m.partition_spec_id, int(m.content))] = (count + 1, size + m.manifest_length)
    target = _manifest_target(metadata)
    stats.surplus_manifests = sum(count - max(1, math.ceil(size / target)) for count, size in groups.values())
    for manifest, files in _read_all(table, manifests):
        stats.manifest_entries += len(files)
        for file in files:
            part = _partition(table, stats, file)
            part.manifests.add(manifest.manifest_path)
            if file.content == DataFileContent.DATA:
                stats.data_files += 1
                stats.data_bytes += file.file_size_in_bytes
                stats.data_rows += file.record_count
                stats.histogram[_bucket(file.file_size_in_bytes)] += 1
                part.data_files += 1
                part.data_rows += file.record_count
                if file.file_size_in_bytes < small_below:
                    stats.small_data_files += 1
                    part.small_data_files += 1
                continue
            if file.content == DataFileContent.EQUALITY_DELETES:
                stats.equality_deletes += 1
            elif file.file_format == FileFormat.PUFFIN:
                stats.deletion_vectors += 1
            else:
                stats.position_deletes += 1
            stats.delete_bytes += file.file_size_in_bytes
            stats.deleted_rows += file.record_count
            part.delete_files += 1
            part.deleted_rows += file.record_count
    return stats
