"""Committing merge-on-read deletes for tests: pyiceberg 0.12 writes neither position nor equality deletes.

Delete files are written as Parquet with the table spec's field IDs (or, for a deletion vector,
as a Puffin file with one ``deletion-vector-v1`` blob) and committed in a delete manifest of a
new snapshot (operation ``delete``), with sequence numbers assigned at commit. pyiceberg 0.12
writes no v3 manifests, so deletion vectors go into a v2 table's delete manifest here: enough
to exercise the readers, which recognise them by their Puffin format.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import Record
from pyroaring import BitMap

from airflow_iceberg_maint.pyiceberg_compat import DeleteManifestWriter

POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"}),
    ]
)


class _AddDeleteFiles(_FastAppendFiles):
    """A snapshot that adds delete files to the parent's manifests."""

    def __init__(self, table: Table, transaction: Any, delete_files: Sequence[DataFile]) -> None:
        super().__init__(operation=Operation.DELETE, transaction=transaction, io=table.io)
        self._delete_files = list(delete_files)

    def _manifests(self) -> list[ManifestFile]:
        by_spec: dict[int, list[DataFile]] = {}
        for delete in self._delete_files:
            by_spec.setdefault(delete.spec_id, []).append(delete)
        manifests = []
        for spec_id, deletes in sorted(by_spec.items()):
            writer = DeleteManifestWriter(
                self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
            )
            with writer:
                for delete in deletes:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=delete,
                        )
                    )
            manifests.append(writer.to_manifest_file())
        return [*manifests, *self._existing_manifests()]


def _write(table: Table, data: pa.Table) -> tuple[str, int]:
    path = f"{table.location()}/data/delete-{uuid.uuid4()}.parquet"
    with table.io.new_output(path).create() as stream:
        pq.write_table(data, stream)
    return path, len(table.io.new_input(path))


def _deletion_vector_blob(positions: Sequence[int]) -> bytes:
    """A ``deletion-vector-v1`` blob: length, magic, portable 64-bit roaring bitmap, CRC-32."""
    by_key: dict[int, list[int]] = {}
    for position in sorted(set(positions)):
        by_key.setdefault(position >> 32, []).append(position & 0xFFFF_FFFF)
    vector = len(by_key).to_bytes(8, "little")
    for key, low in sorted(by_key.items()):
        vector += key.to_bytes(4, "little") + BitMap(low).serialize()
    body = bytes([0xD1, 0xD3, 0x39, 0x64]) + vector
    return len(body).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")


def commit_deletion_vector(table: Table, data_path: str, positions: Sequence[int]) -> Table:
    """Commit one Puffin deletion vector removing ``positions`` of one data file."""
    blob = _deletion_vector_blob(positions)
    footer = {
        "blobs": [
            {
                "type": "deletion-vector-v1",
                "fields": [2147483645],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": 4,
                "length": len(blob),
                "properties": {"referenced-data-file": data_path, "cardinality": str(len(set(positions)))},
            }
        ]
    }
    payload = json.dumps(footer).encode()
    puffin = b"PFA1" + blob + b"PFA1" + payload + len(payload).to_bytes(4, "little") + bytes(4) + b"PFA1"
    spec_id, partition = _partitions(table)[data_path]
    path = f"{table.location()}/data/dv-{uuid.uuid4()}.puffin"
    with table.io.new_output(path).create() as stream:
        stream.write(puffin)
    delete = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PUFFIN,
        partition=partition,
        record_count=len(set(positions)),
        file_size_in_bytes=len(puffin),
        referenced_data_file=data_path,
    )
    delete.spec_id = spec_id
    return _commit(table, [delete])


def _commit(table: Table, delete_files: Sequence[DataFile]) -> Table:
    with table.transaction() as tx:
        _AddDeleteFiles(table, tx, delete_files).commit()
    # The commit updated ``table`` in place. No refresh: a concurrent cutoff-0 orphan run may have
    # deleted the new metadata file in flight, which the reliability writer repairs on its own.
    return table


def _partitions(table: Table) -> dict[str, tuple[int, Record]]:
    """Spec ID and partition tuple of every live data file of the current snapshot."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return {
        e.data_file.file_path: (e.data_file.spec_id, e.data_file.partition)
        for m in snapshot.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io)
    }


def commit_position_deletes(table: Table, positions: Mapping[str, Sequence[int]]) -> Table:
    """Commit position delete files removing ``positions`` of each data file (one file per partition)."""
    partitions = _partitions(table)
    groups: dict[tuple[int, Record], list[tuple[str, int]]] = {}
    for data_path, poss in positions.items():
        groups.setdefault(partitions[data_path], []).extend((data_path, p) for p in poss)
    deletes = []
    for (spec_id, partition), pairs in groups.items():
        pairs.sort()
        data = pa.table(
            {"file_path": [p for p, _ in pairs], "pos": [q for _, q in pairs]}, schema=POSITION_DELETE_SCHEMA
        )
        path, size = _write(table, data)
        delete = DataFile.from_args(
            content=DataFileContent.POSITION_DELETES,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=partition,
            record_count=len(pairs),
            file_size_in_bytes=size,
        )
        delete.spec_id = spec_id
        deletes.append(delete)
    return _commit(table, deletes)


def commit_equality_deletes(table: Table, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """Commit one equality delete file of an unpartitioned spec (so global) on ``columns``."""
    schema = table.schema().select(*columns)
    arrow_schema = schema_to_pyarrow(schema, include_field_ids=True)
    data = pa.Table.from_pylist([dict(zip(columns, row, strict=True)) for row in rows], schema=arrow_schema)
    path, size = _write(table, data)
    delete = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(rows),
        file_size_in_bytes=size,
        equality_ids=[table.schema().find_field(c).field_id for c in columns],
    )
    delete.spec_id = next(i for i, spec in table.specs().items() if spec.is_unpartitioned())
    return _commit(table, [delete])
