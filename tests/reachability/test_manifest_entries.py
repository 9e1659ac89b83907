"""A manifest's live entries are decoded once within ``reading_once()``, and only there, and only those
committed by its sequence number are kept; a compaction run (plan, commits, dangling-delete check)
decodes no manifest of its starting snapshot twice, and keeps none of those committed since."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestFile

from airflow_iceberg_maint import rewrite_data_files
from airflow_iceberg_maint.reachability import manifest_entries
from airflow_iceberg_maint.reachability.manifest_entries import live_entries, reading_once
from tests.compaction.helpers import append_files, create, data_files, scanned
from tests.index.row_deletes import commit_position_deletes


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Manifest path -> times pyiceberg decoded it (the real decoder, counted)."""
    counts: Counter[str] = Counter()
    decode = ManifestFile.fetch_manifest_entry

    def counted(self: ManifestFile, io: FileIO, discard_deleted: bool = True) -> list[ManifestEntry]:
        counts[self.manifest_path] += 1
        return decode(self, io, discard_deleted=discard_deleted)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counted)
    yield counts


def test_entries_are_decoded_once_inside_and_every_time_outside(sqlite_catalog: Catalog, decoded: Counter[str]) -> None:
    table = append_files(create(sqlite_catalog, "t", partitioned=False), random.Random(1), 3, 10, [1])
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifests = snapshot.manifests(table.io)
    first = [live_entries(table.io, m) for m in manifests]
    again = [live_entries(table.io, m) for m in manifests]
    assert all(decoded[m.manifest_path] == 2 for m in manifests)  # no memo outside a block
    decoded.clear()
    with reading_once(snapshot.sequence_number):
        inside = [live_entries(table.io, m) for m in manifests]
        assert [live_entries(table.io, m) for m in manifests] == inside
        with reading_once(snapshot.sequence_number):  # a nested block starts empty, the outer one stays
            live_entries(table.io, manifests[0])
        live_entries(table.io, manifests[0])
    assert decoded[manifests[0].manifest_path] == 2 and all(decoded[m.manifest_path] == 1 for m in manifests[1:])
    decoded.clear()
    newest = max(manifests, key=lambda m: m.sequence_number)
    with reading_once(newest.sequence_number - 1):  # committed after the block's bound: never kept
        live_entries(table.io, newest)
        live_entries(table.io, newest)
    assert decoded[newest.manifest_path] == 2
    paths = [[e.data_file.file_path for e in entries] for entries in (*first, *again, *inside)]
    assert paths[: len(manifests)] == paths[len(manifests) : 2 * len(manifests)] == paths[2 * len(manifests) :]


def test_a_manifest_read_with_other_inherited_values_is_decoded_again(
    sqlite_catalog: Catalog, decoded: Counter[str]
) -> None:
    """The inherited sequence number is part of what is decoded: an uncommitted manifest (unassigned) is
    never kept, and the same path under another sequence number is read again."""
    table = append_files(create(sqlite_catalog, "t", partitioned=False), random.Random(2), 1, 10, [1])
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifest = snapshot.manifests(table.io)[0]
    unassigned = ManifestFile.from_args(**{**_fields(manifest), "sequence_number": -1})
    assert manifest.sequence_number >= 1
    other = ManifestFile.from_args(**{**_fields(manifest), "sequence_number": manifest.sequence_number - 1})
    with reading_once(manifest.sequence_number):
        live_entries(table.io, unassigned)
        live_entries(table.io, unassigned)
        kept = live_entries(table.io, manifest)
        moved = live_entries(table.io, other)
        live_entries(table.io, other)
        live_entries(table.io, manifest)
    assert decoded[manifest.manifest_path] == 4  # twice unassigned, once each committed spelling
    assert {e.sequence_number for e in kept} == {manifest.sequence_number}
    assert {e.sequence_number for e in moved} == {manifest.sequence_number - 1}


def _fields(manifest: ManifestFile) -> dict[str, Any]:
    names = [
        "manifest_path",
        "manifest_length",
        "partition_spec_id",
        "content",
        "sequence_number",
        "min_sequence_number",
        "added_snapshot_id",
        "added_files_count",
        "existing_files_count",
        "deleted_files_count",
        "added_rows_count",
        "existing_rows_count",
        "deleted_rows_count",
        "partitions",
        "key_metadata",
    ]
    return {name: getattr(manifest, name) for name in names}


def test_a_compaction_run_decodes_its_starting_manifests_once_and_keeps_none_it_wrote(
    sqlite_catalog: Catalog, decoded: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plan, commits (one a partition) and the dangling-delete check share the starting snapshot's
    manifests; those the run commits are decoded when read and never kept; the rows stay the same."""
    table = append_files(create(sqlite_catalog, "t", partitioned=True), random.Random(3), 8, 200, [1, 2, 3])
    table = commit_position_deletes(table, {f["file_path"]: [0, 5] for f in data_files(table)[:3]})
    start = table.current_snapshot()
    assert start is not None
    starting = {m.manifest_path for m in start.manifests(table.io)}
    memos: list[Any] = []
    remember = manifest_entries.reading_once

    def watched(sequence_number: int) -> Any:
        memos.append(sequence_number)
        return remember(sequence_number)

    monkeypatch.setattr(manifest_entries, "reading_once", watched)
    monkeypatch.setattr("airflow_iceberg_maint.compaction.run.reading_once", watched)
    before = scanned(table)
    decoded.clear()
    report = rewrite_data_files(table, dry_run=False)
    assert report.failed == [] and len(report.commits) >= 3
    assert memos == [start.sequence_number]
    assert {decoded[path] for path in starting} == {1}
    written = set(decoded) - starting
    assert written and max(decoded[path] for path in written) >= 2  # read again: not kept
    assert scanned(sqlite_catalog.load_table("db.t")) == before
