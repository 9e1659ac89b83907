"""Orphan removal on an indexed table deletes no live index file (S1), fails closed (S2), and the
index's own clean-up removes exactly the index files nothing references."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.cli import main
from airflow_iceberg_maint.errors import InvalidInputError, MetadataReadError
from airflow_iceberg_maint.fs.locations import Uri, local_path
from airflow_iceberg_maint.index.format.extract_files import region_file_paths
from airflow_iceberg_maint.index.lifecycle.references import (
    INDEX_FILES,
    index_file_batches,
    remove_unreferenced_index_files,
)
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.write.refresh import refresh_full
from airflow_iceberg_maint.index.write.sharded_build import build_shard, commit_sharded_build, plan_sharded_build
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
LATER = timedelta(minutes=10)  # "now" for the runs: every file written by the test is older than the cutoff


def rows(start: int, count: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "name": pa.array([f"n{i}" for i in range(start, start + count)]),
        }
    )


class Storage:
    """Plain listing, writing and existence checks on the table's storage, independent of the code under test."""

    def __init__(self, table: Table) -> None:
        self.uri = Uri.parse(table.location())
        props = table.io.properties
        self.s3 = (
            None
            if self.uri.is_local
            else boto3.client(
                "s3",
                endpoint_url=props["s3.endpoint"],
                aws_access_key_id=props["s3.access-key-id"],
                aws_secret_access_key=props["s3.secret-access-key"],
                region_name=props.get("s3.region"),
            )
        )

    def _key(self, path: str) -> str:
        return Uri.parse(path).path.lstrip("/")

    def write(self, path: str, data: bytes) -> None:
        if self.s3 is None:
            os.makedirs(os.path.dirname(local_path(path)), exist_ok=True)
            with open(local_path(path), "wb") as f:
                f.write(data)
        else:
            self.s3.put_object(Bucket=self.uri.authority, Key=self._key(path), Body=data)

    def list(self, prefix: str) -> set[str]:
        if self.s3 is None:
            base = local_path(prefix)
            return {
                f"{prefix}/{os.path.relpath(os.path.join(d, n), base)}" for d, _, names in os.walk(base) for n in names
            }
        head = f"{self.uri.scheme}://{self.uri.authority}/"
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.uri.authority, Prefix=self._key(prefix) + "/"
        )
        return {head + o["Key"] for page in pages for o in page.get("Contents", [])}


@dataclass
class IndexedTable:
    table: Table
    store: IndexStore
    live: set[str]  # every file the index keeps alive
    dropped: set[str]  # tracking and region files of an extract no longer in the metadata
    stray: str  # a region-like file no extract ever referenced


def indexed_table(catalog: SqlCatalog) -> IndexedTable:
    table = catalog.create_table("db.events", SCHEMA)
    store = IndexStore(table)
    store.create(new_index_metadata(table, "by_id", ["bucket(4, id)", "id"], [], True, {}), "by_id")
    table.append(rows(0, 50))
    dropped_result = refresh_full(table, "by_id")
    table.append(rows(50, 50))
    refresh_full(table, "by_id")
    table.append(rows(100, 50))
    refresh_full(table, "by_id")
    # Drop the first extract from the metadata without deleting its files: they become unreferenced.
    store.commit("by_id", lambda m: m.without_extracts([dropped_result.extract.extract_id]))

    metadata, _, _ = store.load("by_id")
    tracking = dropped_result.extract.tracking_file
    dropped = {tracking, *region_file_paths(table.io, tracking)}
    live = set(store.versions("by_id").values())
    for extract in metadata.extracts:
        live |= {extract.tracking_file, *region_file_paths(table.io, extract.tracking_file)}
    stray = f"{store.index_dir('by_id')}/data/region-from-a-failed-build.parquet"
    Storage(table).write(stray, b"PAR1")
    assert not dropped & live
    return IndexedTable(table, store, live, dropped, stray)


def test_the_orphans_command_keeps_live_index_files(
    sqlite_catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command passes the index's reference source: a real run deletes only unreferenced index files."""
    indexed = indexed_table(sqlite_catalog)
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__URI", sqlite_catalog.properties["uri"])
    for path in indexed.live | indexed.dropped | {indexed.stray}:  # all old enough for a 1-day cutoff
        os.utime(local_path(path), (time.time() - 2 * 86400,) * 2)

    assert main(["orphans", "db.events", "--older-than-days", "1", "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    assert set(report["orphan_files"]) == indexed.dropped | {indexed.stray}
    assert all(os.path.exists(local_path(path)) for path in indexed.live)


def test_index_file_batches_yield_every_live_file(sqlite_catalog: SqlCatalog) -> None:
    indexed = indexed_table(sqlite_catalog)
    yielded = {path for batch in index_file_batches(indexed.table) for path in batch}
    assert yielded == indexed.live
    assert len([p for p in yielded if p.endswith(".metadata.json")]) == 5


def run_orphans(indexed: IndexedTable) -> set[str]:
    now = datetime.now(UTC) + LATER
    report = remove_orphan_files(
        indexed.table, OrphanOptions(older_than=now - timedelta(minutes=1)), now=now, sources=[INDEX_FILES]
    )
    return set(report.orphan_files)


def check_orphans_keep_live_index_files(indexed: IndexedTable) -> None:
    storage = Storage(indexed.table)
    before = storage.list(indexed.store.index_dir("by_id"))
    assert indexed.live | indexed.dropped | {indexed.stray} <= before

    orphans = run_orphans(indexed)

    assert orphans == indexed.dropped | {indexed.stray}
    after = storage.list(indexed.store.index_dir("by_id"))
    assert after == before - orphans
    assert indexed.live <= after
    # The index still loads and its extracts still list readable region files.
    metadata, _, _ = indexed.store.load("by_id")
    assert len(metadata.extracts) == 2


def test_orphans_delete_no_live_index_file_but_old_unreferenced_ones(sqlite_catalog: SqlCatalog) -> None:
    check_orphans_keep_live_index_files(indexed_table(sqlite_catalog))


@pytest.mark.s3
def test_s3_orphans_delete_no_live_index_file_but_old_unreferenced_ones(s3_catalog: SqlCatalog) -> None:
    check_orphans_keep_live_index_files(indexed_table(s3_catalog))


def test_unreadable_tracking_file_aborts_the_orphan_run(sqlite_catalog: SqlCatalog) -> None:
    indexed = indexed_table(sqlite_catalog)
    metadata, _, _ = indexed.store.load("by_id")
    tracking = metadata.extracts[0].tracking_file
    Storage(indexed.table).write(tracking, b"not parquet")
    before = Storage(indexed.table).list(indexed.table.location())

    with pytest.raises(MetadataReadError, match=f"tracking file '{tracking}': cannot be read"):
        run_orphans(indexed)
    assert Storage(indexed.table).list(indexed.table.location()) == before


def test_malformed_index_metadata_aborts_the_orphan_run(sqlite_catalog: SqlCatalog) -> None:
    indexed = indexed_table(sqlite_catalog)
    broken = indexed.store.version_location("by_id", 6)
    Storage(indexed.table).write(broken, b"{")
    before = Storage(indexed.table).list(indexed.table.location())

    with pytest.raises(MetadataReadError, match=f"indexes of table .*: cannot be read .*index metadata {broken}"):
        run_orphans(indexed)
    assert Storage(indexed.table).list(indexed.table.location()) == before


# The index's own clean-up of unreferenced files


def check_remove_unreferenced_index_files(indexed: IndexedTable) -> None:
    store = indexed.store
    # Keep one previous metadata version in the log: versions 1..4 are then stale.
    store.commit("by_id", lambda m: replace(m, properties={"write.metadata.previous-versions-max": "1"}))
    temporary = f"{store.metadata_dir('by_id')}/.00009.metadata.json.abc.tmp"
    Storage(indexed.table).write(temporary, b"{}")
    stale = {store.version_location("by_id", v) for v in range(1, 5)}
    expected = sorted(indexed.dropped | {indexed.stray, temporary} | stale)
    now = datetime.now(UTC) + LATER

    dry = remove_unreferenced_index_files(indexed.table, now - timedelta(minutes=1), dry_run=True, now=now)
    assert (dry.indexes, dry.unreferenced_files, dry.deleted_file_count) == (["by_id"], expected, 0)
    assert set(expected) <= Storage(indexed.table).list(store.index_dir("by_id"))

    report = remove_unreferenced_index_files(indexed.table, now - timedelta(minutes=1), name="by_id", now=now)
    assert (report.unreferenced_files, report.deleted_file_count, report.failed) == (expected, len(expected), [])
    remaining = Storage(indexed.table).list(store.index_dir("by_id"))
    assert remaining == (indexed.live | {store.version_location("by_id", 6)}) - stale
    metadata, _, version = store.load("by_id")
    assert (version, len(metadata.extracts)) == (6, 2)


def test_remove_unreferenced_index_files(sqlite_catalog: SqlCatalog) -> None:
    check_remove_unreferenced_index_files(indexed_table(sqlite_catalog))


@pytest.mark.s3
def test_s3_remove_unreferenced_index_files(s3_catalog: SqlCatalog) -> None:
    check_remove_unreferenced_index_files(indexed_table(s3_catalog))


def test_the_index_remove_unreferenced_command(
    sqlite_catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`iceberg-maint index remove-unreferenced`: a dry run lists, a real run deletes, the unreferenced files."""
    indexed = indexed_table(sqlite_catalog)
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__URI", sqlite_catalog.properties["uri"])
    index_dir = indexed.store.index_dir("by_id")
    for path in Storage(indexed.table).list(index_dir):  # every index file old enough for a 1-day cutoff
        os.utime(local_path(path), (time.time() - 2 * 86400,) * 2)
    expected = sorted(indexed.dropped | {indexed.stray})
    command = ["index", "remove-unreferenced", "db.events", "--older-than-days", "1", "--json"]

    assert main([*command, "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert (dry["indexes"], dry["unreferenced_files"], dry["deleted_file_count"]) == (["by_id"], expected, 0)
    assert set(expected) <= Storage(indexed.table).list(index_dir)

    assert main(command) == 0
    real = json.loads(capsys.readouterr().out)
    assert (real["unreferenced_files"], real["deleted_file_count"], real["failed"]) == (expected, len(expected), [])
    assert Storage(indexed.table).list(index_dir) == indexed.live | set(indexed.store.versions("by_id").values())


def test_young_files_are_kept_and_future_cutoffs_refused(sqlite_catalog: SqlCatalog) -> None:
    indexed = indexed_table(sqlite_catalog)
    report = remove_unreferenced_index_files(indexed.table, datetime.now(UTC) - timedelta(hours=1))
    assert (report.unreferenced_files, report.deleted_file_count) == ([], 0)
    with pytest.raises(InvalidInputError, match=r"^older_than .*: is in the future \(now is .*\)$"):
        remove_unreferenced_index_files(indexed.table, datetime.now(UTC) + timedelta(hours=1))


def test_unreadable_tracking_file_aborts_the_clean_up(sqlite_catalog: SqlCatalog) -> None:
    indexed = indexed_table(sqlite_catalog)
    metadata: IndexMetadata = indexed.store.load("by_id")[0]
    Storage(indexed.table).write(metadata.extracts[1].tracking_file, b"")
    now = datetime.now(UTC) + LATER
    with pytest.raises(MetadataReadError, match="tracking file"):
        remove_unreferenced_index_files(indexed.table, now - timedelta(minutes=1), now=now)
    assert indexed.dropped | {indexed.stray} <= Storage(indexed.table).list(indexed.store.index_dir("by_id"))


def test_remove_unreferenced_keeps_the_files_a_commit_during_its_run_references(sqlite_catalog: SqlCatalog) -> None:
    """A sharded build's shards wrote their region files before the cutoff; its commit lands after the
    run found those files unreferenced and before it deletes: the re-check keeps them, the index reads."""
    indexed = indexed_table(sqlite_catalog)
    table, store = indexed.table, indexed.store
    table.append(rows(150, 50))
    build = plan_sharded_build(table, "by_id", shards=2)
    results = [build_shard(table, build, shard) for shard in range(build.shards)]
    regions = {path for result in results for path in region_file_paths(table.io, result.manifest)}
    manifests = {result.manifest for result in results}
    now = datetime.now(UTC) + LATER
    committed: list[bool] = []

    def commit_during_the_run(stage: str) -> None:
        assert stage == "unreferenced"
        committed.append(commit_sharded_build(table, build, results).committed)  # a real commit of the index

    report = remove_unreferenced_index_files(
        table, now - timedelta(minutes=1), name="by_id", now=now, on_stage=commit_during_the_run
    )
    assert committed == [True]
    remaining = Storage(table).list(store.index_dir("by_id"))
    assert regions <= remaining, f"region files of the committed extract deleted: {sorted(regions - remaining)}"
    assert sorted(report.kept_by_recheck) == sorted(regions)  # unreferenced when found, referenced now
    # The rest goes: the dropped extract, the stray file, the shard manifests (the commit removed those).
    assert set(report.unreferenced_files) == indexed.dropped | {indexed.stray} | manifests
    metadata, _, _ = store.load("by_id")
    newest = metadata.extracts[-1].tracking_file
    assert set(region_file_paths(table.io, newest)) == regions
    assert indexed.live | regions | {newest} <= remaining
    assert not (indexed.dropped | {indexed.stray}) & remaining
