"""A manifest's live entries are decoded once within ``reading_once()``, and only there; a compaction run
(plan, commit, dangling-delete check) decodes no manifest twice."""

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
    with reading_once():
        inside = [live_entries(table.io, m) for m in manifests]
        assert [live_entries(table.io, m) for m in manifests] == inside
        with reading_once():  # a nested block starts empty and leaves the outer one as it was
            live_entries(table.io, manifests[0])
        live_entries(table.io, manifests[0])
    assert decoded[manifests[0].manifest_path] == 2 and all(decoded[m.manifest_path] == 1 for m in manifests[1:])
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
    other = ManifestFile.from_args(**{**_fields(manifest), "sequence_number": manifest.sequence_number + 5})
    with reading_once():
        live_entries(table.io, unassigned)
        live_entries(table.io, unassigned)
        kept = live_entries(table.io, manifest)
        moved = live_entries(table.io, other)
        live_entries(table.io, other)
    assert decoded[manifest.manifest_path] == 4
    assert {e.sequence_number for e in kept} == {manifest.sequence_number}
    assert {e.sequence_number for e in moved} == {manifest.sequence_number + 5}


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


def test_a_compaction_run_decodes_no_manifest_twice(sqlite_catalog: Catalog, decoded: Counter[str]) -> None:
    """Plan, commit and the dangling-delete check share the run's reads; the rows stay the same."""
    table = append_files(create(sqlite_catalog, "t", partitioned=True), random.Random(3), 8, 200, [1, 2])
    table = commit_position_deletes(table, {f["file_path"]: [0, 5] for f in data_files(table)[:3]})
    before = scanned(table)
    decoded.clear()
    report = rewrite_data_files(table, dry_run=False)
    assert report.failed == [] and report.commits
    assert decoded and max(decoded.values()) == 1, decoded
    assert scanned(sqlite_catalog.load_table("db.t")) == before
