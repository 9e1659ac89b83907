"""Listed files spilled to local disk past a memory budget give exactly the in-memory result."""

from __future__ import annotations

import logging
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.fs.storage import FileInfo
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.listing.listed_rows import ListedRows, file_infos_of
from airflow_iceberg_maint.orphans.matching import match_candidates, match_listed
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.sharded.scan import remove_orphan_files_sharded
from airflow_iceberg_maint.reachability import manifests
from airflow_iceberg_maint.reachability.path_hashes import path_hashes128
from airflow_iceberg_maint.reachability.referenced import ReferencedSet

ROOT = "s3://bucket/wh/db/t"
OLD = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)


def _rows(files: list[FileInfo], budget: int, spill_dir: Path, step: int = 3) -> ListedRows:
    """``files`` added in chunks of ``step``, as the listing adds its chunks."""
    rows = ListedRows(budget, str(spill_dir))
    for start in range(0, len(files), step):
        chunk = files[start : start + step]
        rows.add(chunk, path_hashes128([f.path for f in chunk])[0])
    rows.finish()
    return rows


def test_rows_spilled_read_back_as_listed(tmp_path: Path) -> None:
    files = [
        FileInfo(f"{ROOT}/data/a-{i}.parquet", i, OLD - timedelta(microseconds=i), (7, 2**63 + i) if i % 2 else None)
        for i in range(10)
    ]
    files.append(FileInfo("file:///tmp/t/data/caf\udce9.parquet", 5, OLD, (1, 2)))  # a name that is not UTF-8
    with _rows(files, 1, tmp_path) as rows:
        assert rows.spilled and rows.spilled_bytes > 0
        # The rows, and the hashes' sorted runs.
        assert sorted(p.name.split("-")[2] for p in tmp_path.iterdir()) == ["hashes", "scan"]
        assert rows.all() == files
        assert rows.undecodable == [10]
        assert rows.rows([1, 4, 10]) == [files[1], files[4], files[10]]
    assert list(tmp_path.iterdir()) == []  # removed with the scan
    with _rows(files, 10**9, tmp_path) as rows:
        assert not rows.spilled and rows.spilled_bytes == 0 and rows.all() == files
    assert list(tmp_path.iterdir()) == []


def test_abandoned_spill_directory_is_removed(tmp_path: Path) -> None:
    """A directory left by a killed scan (its process is gone) goes when the next scan spills; a live one stays."""
    gone = tmp_path / "iceberg-orphan-scan-999999999-x"  # beyond any PID the kernel hands out
    gone.mkdir()
    mine = tmp_path / f"iceberg-orphan-scan-{os.getpid()}-y"
    mine.mkdir()
    index_build = tmp_path / "iceberg-index-build-999999999-z"  # another user's prefix: not this one's to remove
    index_build.mkdir()
    with _rows([FileInfo(f"{ROOT}/a", 1, OLD)], 1, tmp_path):
        assert not gone.exists() and mine.exists() and index_build.exists()


# Listed files of the property: referenced ones, other spellings of referenced ones (s3a: equal to s3;
# another bucket: a conflict), files nobody references, and names that are not UTF-8.
_NAMES = st.integers(0, 40).map(lambda i: f"data/p={i % 4}/f-{i}.parquet")
_LISTED = st.tuples(st.sampled_from(["s3://bucket", "s3a://bucket", "s3://other", "s3://bucket/x"]), _NAMES)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    referenced=st.sets(_NAMES, max_size=30),
    listed=st.lists(_LISTED, unique=True, max_size=60),
    undecodable=st.lists(st.integers(0, 60), max_size=3),
    step=st.integers(1, 7),
)
def test_spilled_and_in_memory_matching_are_equal(
    tmp_path: Path, referenced: set[str], listed: list[tuple[str, str]], undecodable: list[int], step: int
) -> None:
    paths = sorted(f"s3://bucket/wh/db/t/{n}" for n in referenced)
    refs = ReferencedSet(PathEquivalence({"s3a": "s3"}))
    refs.add(paths)
    files = [FileInfo(f"{head}/wh/db/t/{name}", i, OLD) for i, (head, name) in enumerate(listed)]
    for i in undecodable:
        files.insert(min(i, len(files)), FileInfo(f"{ROOT}/data/\udcff-{i}.parquet", 1, OLD))
    expected = match_candidates(list(files), refs)
    for refs_budget in (1, None):  # the referenced set in sorted runs on disk (a run every few paths); in memory
        with ReferencedSet(PathEquivalence({"s3a": "s3"}), refs_budget, str(tmp_path)) as both:
            again = paths + paths[::2]  # paths added twice, in other runs: counted once
            for start in range(0, len(again), step):
                both.add(again[start : start + step])
            assert (both.spilled is not None) == (refs_budget == 1 and bool(paths))
            assert len(both) == len(refs)
            for budget in (1, 10**9):  # every batch spilled; none
                with _rows(files, budget, tmp_path, step) as rows:
                    assert rows.spilled == (budget == 1 and bool(files))
                    found = match_listed(rows, both)
                    with found.orphans as batches:
                        orphans = file_infos_of(batches.table())
                    assert (orphans, found.conflicts, found.equivalent, found.undecodable) == expected
        assert list(tmp_path.iterdir()) == []


def _local_table(catalog: SqlCatalog, referenced: int, orphans: int) -> tuple[Table, list[str]]:
    table = catalog.create_table("db.spill", schema=Schema(NestedField(1, "id", LongType())))
    data = Path(table.location().removeprefix("file://")) / "data"
    data.mkdir(parents=True)
    old = (datetime.now(UTC) - timedelta(days=10)).timestamp()
    names = [f"f-{i:05d}.parquet" for i in range(referenced)] + [f"orphan-{i:05d}.parquet" for i in range(orphans)]
    for name in names:
        (data / name).write_bytes(b"")
        os.utime(data / name, (old, old))
    _append(table, names[:referenced])
    return catalog.load_table("db.spill"), [f"{table.location()}/data/{n}" for n in names[referenced:]]


def _append(table: Table, names: list[str]) -> None:
    """One snapshot that adds the files ``names`` under the table's ``data``."""
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for name in names:
            append.append_data_file(
                DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=f"{table.location()}/data/{name}",
                    file_format=FileFormat.PARQUET,
                    partition=Record(),
                    record_count=1,
                    file_size_in_bytes=0,
                )
            )


def test_scan_in_a_tiny_budget_equals_the_scan_in_memory(
    sqlite_catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole dry run with 1 MB of budget reports what it reports with the default, and leaves no spilled file
    behind: a quarter for listed rows (12,500 spill), an eighth each for the listed files' identities and the
    deferred referenced paths, half for the referenced set (12,000 paths in sorted runs)."""
    table, orphans = _local_table(sqlite_catalog, 12_000, 500)
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))  # the system temporary directory, for this test
    cutoff = datetime.now(UTC) - timedelta(days=1)
    reports = []
    for budget in (1, OrphanOptions().memory_budget_mb):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="airflow_iceberg_maint"):
            options = OrphanOptions(older_than=cutoff, dry_run=True, only_this_table=True, memory_budget_mb=budget)
            report = remove_orphan_files(table, options, sources=[INDEX_FILES])
        spilled = [r.getMessage().split(":")[0] for r in caplog.records if "spilled" in r.getMessage()]
        assert spilled == (["listed files", "file identities", "referenced paths"] if budget == 1 else [])
        assert list(spill.iterdir()) == []
        reports.append({k: v for k, v in report.to_json().items() if k != "phase_seconds"})
    assert reports[0] == reports[1]
    assert sorted(reports[0]["orphan_files"]) == sorted(orphans)
    assert reports[0]["orphan_file_count"] == 500
    assert reports[0]["referenced_files"] > 12_000


def test_a_match_task_of_a_sharded_scan_in_a_tiny_budget_equals_the_single_scan(
    sqlite_catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A sharded scan's match task holds its buckets within the plan's budget: with 1 MB its one bucket's
    candidates and referenced paths spill (12,500 and 12,000), and it finds exactly the orphans of the single
    scan and of the same sharded scan with the default budget, leaving no spilled file behind."""
    table, orphans = _local_table(sqlite_catalog, 12_000, 500)
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    cutoff = datetime.now(UTC) - timedelta(days=1)
    single = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff, dry_run=True, only_this_table=True), sources=[INDEX_FILES]
    )
    reports = []
    for budget in (1, OrphanOptions().memory_budget_mb):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="airflow_iceberg_maint"):
            options = OrphanOptions(older_than=cutoff, dry_run=True, only_this_table=True, memory_budget_mb=budget)
            report = remove_orphan_files_sharded(
                table,
                options,
                shards=1,
                scratch=f"file://{tmp_path}/scratch-{budget}",
                io_properties=dict(table.io.properties),
                sources=[INDEX_FILES],
            )
        spilled = [r.getMessage().split(":")[0] for r in caplog.records if "spilled" in r.getMessage()]
        assert spilled == (["listed files", "referenced paths"] if budget == 1 else [])
        assert list(spill.iterdir()) == []
        reports.append(report)
    assert reports[0].orphan_files == reports[1].orphan_files == sorted(single.orphan_files) == sorted(orphans)
    for report in reports:
        assert (report.referenced_files, report.kept_equivalent, report.files_listed) == (
            single.referenced_files,
            single.kept_equivalent,
            single.files_listed,
        )


def test_orphans_past_the_budget_wait_on_local_disk_as_long_as_the_report(
    sqlite_catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """3,000 orphans pass a quarter of 1 MB: the unmatched rows and the orphans go to local disk, the report
    reads every orphan back from there, the directory goes with the report, and a real run deletes exactly them."""
    table, orphans = _local_table(sqlite_catalog, 1_000, 3_000)
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    cutoff = datetime.now(UTC) - timedelta(days=1)
    options = OrphanOptions(older_than=cutoff, dry_run=True, only_this_table=True, memory_budget_mb=1)
    with caplog.at_level(logging.INFO, logger="airflow_iceberg_maint"):
        report = remove_orphan_files(table, options, sources=[INDEX_FILES])
    spilled = [r.getMessage().split(":")[0] for r in caplog.records if "spilled" in r.getMessage()]
    assert {"unmatched files", "orphans"} <= set(spilled)
    assert [p.name.split("-")[2] for p in spill.iterdir()] == ["found"]  # the report's orphans, nothing else
    listed = list(report.orphan_files)
    assert sorted(listed) == sorted(orphans) and len(report.orphan_files) == 3_000
    assert (report.orphan_files[0], report.orphan_files[-1], report.orphan_files[1_999:2_002]) == (
        listed[0],
        listed[-1],
        listed[1_999:2_002],
    )
    assert report.to_json()["orphan_files"] == listed and report.orphan_files == listed
    del report
    assert list(spill.iterdir()) == []

    real = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff, only_this_table=True, memory_budget_mb=1), sources=[INDEX_FILES]
    )
    assert real.deleted_file_count == 3_000 and real.failed == []
    data = Path(table.location().removeprefix("file://")) / "data"
    assert sorted(p.name for p in data.iterdir()) == [f"f-{i:05d}.parquet" for i in range(1_000)]


@pytest.mark.parametrize("path_chunk", [manifests.PATH_CHUNK, 1_000])
def test_a_scan_in_a_tiny_budget_keeps_other_spellings_through_resolved_identities_on_disk(
    sqlite_catalog: SqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_chunk: int
) -> None:
    """With 1 MB the identities of the 12,001 referenced local paths are in sorted runs on disk when the listed
    files are matched, and a hard link of a referenced file (identity from the listing) and the target of a
    referenced symlink (identity ``stat``-ed) are still kept as equivalent, as with the default budget; also
    when the 12,000-entry manifest is read 1,000 paths at a time (each chunk read again for its own paths)."""
    monkeypatch.setattr(manifests, "PATH_CHUNK", path_chunk)
    table, orphans = _local_table(sqlite_catalog, 12_000, 500)
    data = Path(table.location().removeprefix("file://")) / "data"
    old = (datetime.now(UTC) - timedelta(days=10)).timestamp()
    (data / "target.parquet").write_bytes(b"")
    os.link(data / "f-00007.parquet", data / "other-name.parquet")
    for name in ("target.parquet", "other-name.parquet"):
        os.utime(data / name, (old, old))
    os.symlink(data / "target.parquet", data / "link.parquet")
    _append(table, ["link.parquet"])
    table = sqlite_catalog.load_table("db.spill")
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    on_disk: list[set[str]] = []
    narrowed_for_parts = ReferencedSet.narrowed_for_parts

    def seen(refs: ReferencedSet, *args: Any) -> ReferencedSet:
        on_disk.append({p.name.split("-")[2] for p in spill.iterdir()})  # what is on disk as matching starts
        return narrowed_for_parts(refs, *args)

    monkeypatch.setattr(ReferencedSet, "narrowed_for_parts", seen)
    cutoff = datetime.now(UTC) - timedelta(days=1)
    reports = []
    for budget in (1, OrphanOptions().memory_budget_mb):
        on_disk.clear()
        options = OrphanOptions(older_than=cutoff, dry_run=True, only_this_table=True, memory_budget_mb=budget)
        report = remove_orphan_files(table, options, sources=[INDEX_FILES])
        assert ("resolved" in on_disk[0]) == (budget == 1)
        assert list(spill.iterdir()) == []
        reports.append({k: v for k, v in report.to_json().items() if k != "phase_seconds"})
    assert reports[0] == reports[1]
    assert sorted(reports[0]["orphan_files"]) == sorted(orphans)
    assert reports[0]["kept_equivalent"] == 2
