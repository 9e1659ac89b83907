"""The core's progress phases, seen through ``LoggingReporter`` on real orphan runs and real index refreshes."""

from __future__ import annotations

import logging
import os
import time

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.fs import batches as deleting
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.progress import LoggingReporter, Phase, reporting
from tests.orphans.scenario import SCHEMA, rows

LOGGER = "test.progress"


def _table(catalog: SqlCatalog, appends: int) -> Table:
    table = catalog.create_table("db.t", schema=SCHEMA)
    for i in range(appends):
        table.append(rows(i * 10, 10))
    return table


def _plant_orphans(table: Table, count: int) -> list[str]:
    paths = []
    for i in range(count):
        path = f"{table.location().removeprefix('file://')}/data/orphan-{i}.parquet"
        with open(path, "wb") as fh:
            fh.write(b"x")
        old = time.time() - 5 * 86400
        os.utime(path, (old, old))
        paths.append(f"file://{path}")
    return paths


def _lines(caplog: pytest.LogCaptureFixture, phase: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.getMessage().startswith(f"{phase}:")]


def test_orphan_run_reports_listing_manifests_and_deleting(sqlite_catalog, caplog):
    table = _table(sqlite_catalog, appends=3)
    orphans = _plant_orphans(table, 2)
    caplog.set_level(logging.INFO, LOGGER)
    # A long interval: only each phase's start and end are logged.
    with reporting(LoggingReporter(logging.getLogger(LOGGER), interval=3600)):
        report = remove_orphan_files(table, OrphanOptions(only_this_table=True), sources=[INDEX_FILES])

    assert sorted(report.orphan_files) == orphans and report.deleted_file_count == 2
    assert _lines(caplog, "listing") == ["listing: 0, started", f"listing: {report.files_listed}, done"]
    # The re-check's walk continues the phase: 3 manifests (one an append), none new.
    assert report.manifests_read == 3
    assert _lines(caplog, "reading manifests") == [
        "reading manifests: 0, started",
        "reading manifests: 3 of 3, done",
        "reading manifests: 3 of 3, done",
    ]
    assert _lines(caplog, "deleting") == ["deleting: 0 of 2, started", "deleting: 2 of 2, done"]


def test_deletes_in_steps_report_each_step(sqlite_catalog, caplog, monkeypatch):
    table = _table(sqlite_catalog, appends=1)
    orphans = _plant_orphans(table, 3)
    monkeypatch.setattr(deleting, "DELETE_STEP_PER_WORKER", 1)  # one file a step with one worker
    caplog.set_level(logging.INFO, LOGGER)
    with reporting(LoggingReporter(logging.getLogger(LOGGER), interval=0)):
        report = remove_orphan_files(
            table, OrphanOptions(only_this_table=True, max_concurrent_deletes=1), sources=[INDEX_FILES]
        )

    assert report.deleted_file_count == 3 and report.failed == [] and report.delete_requests == 3
    assert not any(os.path.exists(p.removeprefix("file://")) for p in orphans)
    assert _lines(caplog, "deleting") == [
        "deleting: 0 of 3, started",
        "deleting: 1 of 3, in progress",
        "deleting: 2 of 3, in progress",
        "deleting: 3 of 3, in progress",
        "deleting: 3 of 3, done",
    ]


def test_full_and_incremental_refresh_report_data_files_and_regions(sqlite_catalog, caplog):
    table = _table(sqlite_catalog, appends=3)
    IndexStore(table).create(new_index_metadata(table, "ix", split_expression_list("id"), [], True, {}), "ix")
    caplog.set_level(logging.INFO, LOGGER)
    with reporting(LoggingReporter(logging.getLogger(LOGGER), interval=0)):
        full = refresh_index(table, "ix")
    assert full.mode == "full" and full.region_files_written == 1
    files = len(table.inspect.files())
    assert files == 3  # one an append
    assert _lines(caplog, "reading data files") == [
        f"reading data files: 0 of {files}, started",
        *(f"reading data files: {n} of {files}, in progress" for n in range(1, files + 1)),
        f"reading data files: {files} of {files}, done",
    ]
    assert _lines(caplog, "building regions") == [
        "building regions: 0, started",
        "building regions: 1, in progress",
        "building regions: 1, done",
    ]

    caplog.clear()
    table.append(pa.Table.from_pylist([{"id": 99, "category": "a/b"}], schema=rows(0, 1).schema))
    with reporting(LoggingReporter(logging.getLogger(LOGGER), interval=3600)):
        incremental = refresh_index(table, "ix")
    assert incremental.mode == "incremental"
    assert _lines(caplog, "reading data files") == [
        "reading data files: 0 of 1, started",
        "reading data files: 1 of 1, done",
    ]
    assert _lines(caplog, "building regions") == ["building regions: 0 of 1, started", "building regions: 1 of 1, done"]


def test_without_a_reporter_phases_report_nothing(caplog):
    caplog.set_level(logging.DEBUG)
    with Phase("listing") as listing:
        listing.advance(5)
        listing.set_total(5)
    assert (listing.done, listing.total) == (5, 5)
    assert caplog.records == []
