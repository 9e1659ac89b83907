"""End-to-end orphan removal on real tables: SQLite, PostgreSQL, and the S3 (moto and SeaweedFS), GCS and
Azure emulators."""

from __future__ import annotations

import logging
import threading

import pytest

from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans.scenario import build, snapshot_row_counts

BACKENDS = ["sqlite_catalog", "pg_catalog", "s3_catalog", "seaweed_s3_catalog", "gcs_catalog", "azure_catalog"]


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_removes_exactly_the_orphans_and_every_snapshot_still_reads(request, backend, partitioned):
    catalog = request.getfixturevalue(backend)
    s = build(catalog, partitioned=partitioned)
    assert s.old_orphans <= s.expected_orphans
    assert s.expired_manifest_lists <= s.expected_orphans  # expiry made real orphans

    dry = remove_orphan_files(s.table, OrphanOptions(older_than=s.cutoff, dry_run=True), sources=[INDEX_FILES])
    assert set(dry.orphan_files) == s.expected_orphans
    assert dry.deleted_file_count == 0
    assert all(s.files.exists(p) for p in s.expected_orphans)

    report = remove_orphan_files(s.table, OrphanOptions(older_than=s.cutoff), sources=[INDEX_FILES])

    assert set(report.orphan_files) == s.expected_orphans  # the dry run showed exactly what a real run deletes
    assert report.deleted_file_count == len(s.expected_orphans)
    assert report.failed == [] and report.conflicts == []
    assert not any(s.files.exists(p) for p in s.expected_orphans)
    assert all(s.files.exists(p) for p in s.kept_planted)
    table = catalog.load_table("db.events")
    assert snapshot_row_counts(table) == s.row_counts
    assert report.orphan_bytes == sum(k["bytes"] for k in report.by_kind.values())
    assert report.by_kind["manifest_list"]["count"] == len(s.expired_manifest_lists)


def test_second_run_finds_nothing(sqlite_catalog):
    s = build(sqlite_catalog)
    remove_orphan_files(s.table, OrphanOptions(older_than=s.cutoff), sources=[INDEX_FILES])
    again = remove_orphan_files(s.table, OrphanOptions(older_than=s.cutoff), sources=[INDEX_FILES])
    assert again.orphan_files == []
    assert again.deleted_file_count == 0


def test_metadata_files_beyond_previous_versions_max_are_orphans(sqlite_catalog):
    s = build(sqlite_catalog)
    md = s.table.metadata
    kept_json = {s.table.metadata_location} | {e.metadata_file for e in md.metadata_log}
    assert len(md.metadata_log) == 3
    report = remove_orphan_files(s.table, OrphanOptions(older_than=s.cutoff), sources=[INDEX_FILES])
    deleted_json = {p for p in report.orphan_files if p.endswith(".metadata.json")}
    assert deleted_json and not (deleted_json & kept_json)
    assert all(s.files.exists(p) for p in kept_json)


@pytest.mark.parametrize("other_thread", [False, True], ids=["fork", "forkserver"])
def test_worker_processes_find_the_same_orphans(sqlite_catalog, caplog, other_thread):
    """Workers are forked while the caller runs one thread, and come from the forkserver otherwise."""
    s = build(sqlite_catalog)
    here = remove_orphan_files(
        s.table, OrphanOptions(older_than=s.cutoff, dry_run=True, reader_processes=0), sources=[INDEX_FILES]
    )
    stop = threading.Event()
    # pytest may run helper threads of its own: only a thread started here is sure to exist.
    side = threading.Thread(target=stop.wait) if other_thread else None
    if side is not None:
        side.start()
    method = "forkserver" if threading.active_count() > 1 else "fork"
    try:
        with caplog.at_level(logging.INFO, logger="airflow_iceberg_maint.reachability.reference_walk"):
            pooled = remove_orphan_files(
                s.table, OrphanOptions(older_than=s.cutoff, dry_run=True, reader_processes=2), sources=[INDEX_FILES]
            )
    finally:
        stop.set()
    assert f"decoding manifests in 2 worker processes ({method})" in caplog.messages
    assert set(pooled.orphan_files) == set(here.orphan_files) == s.expected_orphans
    assert pooled.referenced_files == here.referenced_files
