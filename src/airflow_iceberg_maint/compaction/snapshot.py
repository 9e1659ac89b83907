"""A ``replace`` snapshot on the current one: data and delete files removed, new data files added.

pyiceberg 0.12 has no rewrite operation (its overwrite removes data files only, puts added files in
the default spec's manifest and gives them the commit's sequence number), so the snapshot is built
here with its manifest writers. Manifests that hold none of the removed files are kept as they
are; those that do are written again, merged per spec and content up to the manifest target size,
with those entries ``DELETED`` and the others ``EXISTING`` (with their sequence numbers). Added
files go into one manifest per spec, each entry with an explicit data sequence number: the
rewrite's starting snapshot's, so that equality deletes committed since still apply to the rows
the new files hold (Iceberg Java's ``use-starting-sequence-number``). Their file sequence number is
the new snapshot's.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest_list,
)
from pyiceberg.table import Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate, TableUpdate

from airflow_iceberg_maint.compaction.manifests import target_size as manifest_target_size
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.pyiceberg_compat import manifest_writer, replace_summary
from airflow_iceberg_maint.reachability.manifest_entries import live_entries

AVRO_COMPRESSION_PROPERTY = "write.avro.compression-codec"


@dataclass
class ReplaceSnapshot:
    updates: tuple[TableUpdate, ...]
    snapshot_id: int
    #: The files removed that the base still held (a removed path the base lacks is left out).
    removed: list[DataFile]
    #: Manifests and the manifest list written for it (unreferenced if the commit fails).
    written: list[str] = field(default_factory=list)


class _Files:
    """Where the snapshot's manifests go, as pyiceberg names them."""

    def __init__(self, table: Table, base: TableMetadata) -> None:
        self.io, self.base = table.io, base
        self.locations = load_location_provider(base.location, base.properties)
        self.commit_uuid = uuid.uuid4()
        self.compression = base.properties.get(AVRO_COMPRESSION_PROPERTY, "gzip")
        self.written: list[str] = []

    def output(self, name: str) -> Any:
        path = self.locations.new_metadata_location(name)
        self.written.append(path)
        return self.io.new_output(path)

    def writer(self, spec_id: int, snapshot_id: int, deletes: bool) -> Any:
        output = self.output(f"{self.commit_uuid}-m{len(self.written)}.avro")
        spec = self.base.specs()[spec_id]
        return manifest_writer(
            format_version=self.base.format_version,
            content=ManifestContent.DELETES if deletes else ManifestContent.DATA,
            spec=spec,
            schema=self.base.schema(),
            output_file=output,
            snapshot_id=snapshot_id,
            avro_compression=self.compression,
        )


def check_format(metadata: TableMetadata) -> None:
    if metadata.format_version not in (1, 2):
        raise InvalidInputError(
            f"table format version {metadata.format_version}: compaction commits v1 and v2 tables only "
            "(pyiceberg 0.12 writes no v3 manifests)"
        )


#: A manifest with its live entries.
_Read = tuple[ManifestFile, tuple[ManifestEntry, ...]]


def _merged(items: list[_Read], target: int) -> Iterator[list[_Read]]:
    """``items`` in runs whose manifests add up to at most ``target`` bytes (one manifest at least)."""
    run: list[_Read] = []
    size = 0
    for manifest, entries in items:
        if run and size + manifest.manifest_length > target:
            yield run
            run, size = [], 0
        run.append((manifest, entries))
        size += manifest.manifest_length
    if run:
        yield run


def _filtered(
    files: _Files, manifests: list[ManifestFile], removed: Collection[str], snapshot_id: int, found: list[DataFile]
) -> list[ManifestFile]:
    """The snapshot's manifests with the removed files ``DELETED``: a manifest holding none is kept as it is;
    those that hold some are written again, merged per spec and content into manifests of up to the target
    size (``commit.manifest.target-size-bytes``, measured by the manifests they replace), as Iceberg Java's
    merging commits do. Every other entry stays, ``EXISTING``, with its snapshot and sequence numbers."""
    kept: list[ManifestFile] = []
    touched: dict[tuple[int, int], list[_Read]] = {}
    for manifest in manifests:
        entries = live_entries(files.io, manifest)
        if any(e.data_file.file_path in removed for e in entries):
            touched.setdefault((manifest.partition_spec_id, int(manifest.content)), []).append((manifest, entries))
        else:
            kept.append(manifest)
    written: list[ManifestFile] = []
    target = manifest_target_size(files.base, None)
    for (spec_id, content), items in sorted(touched.items()):
        for run in _merged(items, target):
            writer = files.writer(spec_id, snapshot_id, content == ManifestContent.DELETES)
            with writer:
                for _, entries in run:
                    for entry in entries:
                        if entry.data_file.file_path in removed:
                            found.append(entry.data_file)
                            writer.delete(entry)
                        else:
                            writer.existing(entry)
            written.append(writer.to_manifest_file())
    return written + kept


def _added(
    files: _Files, added: Sequence[DataFile], snapshot_id: int, data_sequence_number: int | None
) -> list[ManifestFile]:
    by_spec: dict[int, list[DataFile]] = {}
    for data_file in added:
        by_spec.setdefault(data_file.spec_id, []).append(data_file)
    manifests = []
    for spec_id, spec_files in sorted(by_spec.items()):
        writer = files.writer(spec_id, snapshot_id, deletes=False)
        with writer:
            for data_file in spec_files:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=snapshot_id,
                        sequence_number=data_sequence_number,
                        file_sequence_number=None,
                        data_file=data_file,
                    )
                )
        manifests.append(writer.to_manifest_file())
    return manifests


def replace_snapshot(
    table: Table,
    base: TableMetadata,
    removed: Collection[str],
    added: Sequence[DataFile],
    data_sequence_number: int | None,
) -> ReplaceSnapshot:
    """The updates of a ``replace`` snapshot on ``base``'s main branch (the files are written, nothing committed)."""
    check_format(base)
    parent = base.current_snapshot()
    if parent is None:
        raise InvalidInputError("compaction: the table has no snapshot")
    files = _Files(table, base)
    snapshot_id = base.new_snapshot_id()
    manifests = _added(files, added, snapshot_id, data_sequence_number)
    found: list[DataFile] = []
    manifests += _filtered(files, parent.manifests(files.io), removed, snapshot_id, found)
    sequence_number = base.next_sequence_number()
    list_output = files.output(f"snap-{snapshot_id}-0-{files.commit_uuid}.avro")
    with write_manifest_list(
        format_version=base.format_version,
        output_file=list_output,
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=sequence_number,
        avro_compression=files.compression,  # type: ignore[arg-type]
    ) as list_writer:
        list_writer.add_manifests(manifests)
    snapshot = Snapshot.model_validate(
        {
            "snapshot-id": snapshot_id,
            "parent-snapshot-id": parent.snapshot_id,
            "sequence-number": sequence_number,
            "manifest-list": list_output.location,
            "summary": replace_summary(list(added), found, base),
            "schema-id": base.current_schema_id,
        }
    )
    updates: tuple[TableUpdate, ...] = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate.model_validate(
            {"ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot-id": snapshot_id}
        ),
    )
    return ReplaceSnapshot(updates, snapshot_id, found, files.written)
