"""pyiceberg's Glue catalog against the Glue API of the local server: orphan removal (dry run, then for
real, exact files) and index commits, as with the SQL catalogs."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.glue import GlueCatalog

from airflow_iceberg_maint.fs.s3 import S3Storage
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.index.test_store import add_extract, create_index
from tests.orphans.scenario import Files

pytestmark = pytest.mark.s3


def glue_table(catalog: Any, name: str = "events") -> Any:
    identifier = f"{catalog.test_namespace}.{name}"
    table = catalog.create_table(identifier, pa.schema([("id", pa.int64()), ("name", pa.string())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    table.append(pa.table({"id": pa.array([4], pa.int64()), "name": ["d"]}))
    return catalog.load_table(identifier)


def test_orphan_removal_dry_run_then_real(glue_catalog: GlueCatalog) -> None:
    table = glue_table(glue_catalog)
    files = Files(table)
    live = files.all_files(table.location())
    orphans = {files.put(f"{table.location()}/data/orphan-{i}.parquet") for i in range(3)}
    orphans.add(files.put(f"{table.location()}/metadata/00009-stale.metadata.json", b"{}"))
    time.sleep(1.2)
    cutoff = datetime.now(UTC)

    dry = remove_orphan_files(table, OrphanOptions(older_than=cutoff, dry_run=True), sources=[INDEX_FILES])
    assert set(dry.orphan_files) == orphans and dry.deleted_file_count == 0
    assert files.all_files(table.location()) == live | orphans

    real = remove_orphan_files(table, OrphanOptions(older_than=cutoff), sources=[INDEX_FILES])
    assert set(real.orphan_files) == orphans and real.deleted_file_count == 4 and real.delete_requests == 1
    assert files.all_files(table.location()) == live
    assert sorted(glue_catalog.load_table(table.name()).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]


def test_other_glue_tables_under_the_location_are_kept(glue_catalog: GlueCatalog) -> None:
    outer = glue_table(glue_catalog, "outer")
    inner_id = f"{glue_catalog.test_namespace}.inner"  # type: ignore[attr-defined]  # set by the glue_catalog fixture
    inner = glue_catalog.create_table(
        inner_id, pa.schema([("id", pa.int64())]), location=f"{outer.location()}/data/nested"
    )
    inner.append(pa.table({"id": [9]}))
    files = Files(outer)
    inner_files = files.all_files(inner.location())
    orphan = files.put(f"{outer.location()}/data/orphan.parquet")
    time.sleep(1.2)
    report = remove_orphan_files(outer, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert report.orphan_files == [orphan]
    assert [p["location"] for p in report.protected_locations] == [inner.location()]
    assert f"table {inner_id}" in report.protected_locations[0]["reason"]
    assert files.all_files(inner.location()) == inner_files
    assert glue_catalog.load_table(inner_id).scan().to_arrow()["id"].to_pylist() == [9]


def test_index_create_and_commit(glue_catalog: GlueCatalog) -> None:
    table = glue_table(glue_catalog)
    store = create_index(table)
    assert isinstance(store.files, S3Storage)
    committed, location = store.commit("by_id", add_extract(table, f"{table.location()}/tracking-1.parquet"))
    assert location == f"{table.location()}/index/by_id/metadata/00002.metadata.json"
    reloaded = IndexStore(glue_catalog.load_table(table.name()))
    assert reloaded.names() == ["by_id"]
    assert reloaded.load("by_id") == (committed, location, 2)
    assert store.files.create_exclusive(location, b"{}") is False
