"""Indexes of tables in SeaweedFS's Iceberg REST catalog, whose table bucket refuses ``<table>/index/``.

The command as a user runs it (``iceberg-maint index``, configured by variables): a create under the
table is refused as a refused location, not an unknown outcome; ``--location`` puts the indexes in a
plain bucket, recorded as the table property ``write.index.path`` through the catalog, and create,
refresh (full and incremental), lookup, lag and expire work there; orphan removal of the table keeps
every index file, and two concurrent refreshes land one extract each.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import WriteRefusedError
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.lifecycle.lag import index_lag
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.placement import use_index_location
from airflow_iceberg_maint.index.metadata.spec import INDEX_PATH_PROPERTY
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.write.incremental import refresh_index
from tests.orphans.catalog_cases import CatalogCase, cutoff_after_writes, older_than
from tests.orphans.scenario import SCHEMA, Files, rows
from tests.support.services import create_plain_bucket

pytestmark = pytest.mark.rest


@pytest.fixture
def case(rest_catalog_config: tuple[Any, dict[str, str]]) -> CatalogCase:
    catalog, config = rest_catalog_config
    return CatalogCase("rest", catalog, "default", config)


def _index(case: CatalogCase, *args: str) -> dict[str, Any]:
    result = case.run("index", *args, "--json")
    assert result.returncode == 0, result.stderr
    body: dict[str, Any] = json.loads(result.stdout)
    return body


def _files(root: str, properties: dict[str, str]) -> set[str]:
    return {f.path for f in storage_for(root, properties).list_files(root, lambda _: True)}


def _ids(found: dict[str, Any]) -> list[int]:
    return sorted(row["id"] for row in found["rows"])


def test_an_index_under_the_table_is_refused_as_a_refused_location(case: CatalogCase) -> None:
    table = case.catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 10))
    refused = case.run("index", "create", "db.t", "by_id", "--ordering", "id")
    version_file = f"{table.location()}/index/by_id/metadata/00001.metadata.json"
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"index 'by_id': the store refused to create {version_file} (" in refused.stderr
    assert "AccessDenied, HTTP 403" in refused.stderr and "index create --location" in refused.stderr
    assert "may or may not" not in refused.stderr
    loaded = load_table(case.catalog, "db.t")
    with pytest.raises(WriteRefusedError, match="nothing was committed"):
        IndexStore(loaded).create(new_index_metadata(loaded, "by_id", ["id"], [], True, {}), "by_id")
    assert INDEX_PATH_PROPERTY not in case.catalog.load_table("db.t").properties


def _lag(case: CatalogCase) -> Any:
    table = load_table(case.catalog, "db.t")
    return index_lag(table, "by_id", IndexStore(table).load("by_id")[0])


def test_index_lifecycle_with_its_location_in_a_plain_bucket(case: CatalogCase) -> None:
    table = case.catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 10))
    root = f"s3://{create_plain_bucket()}/indexes/db/t"
    created = _index(case, "create", "db.t", "by_id", "--ordering", "id", "--with-row-location", "--location", root)
    assert (created["location"], created["metadata_location"]) == (
        f"{root}/by_id",
        f"{root}/by_id/metadata/00001.metadata.json",
    )
    assert case.catalog.load_table("db.t").properties[INDEX_PATH_PROPERTY] == root
    # Another folder is refused, naming both; a second index goes to the same folder.
    moved = case.run("index", "create", "db.t", "x", "--ordering", "id", "--location", f"{root}-2")
    assert moved.returncode == 2 and f"live at '{root}' (table property write.index.path)" in moved.stderr
    loaded = load_table(case.catalog, "db.t")
    IndexStore(loaded).create(new_index_metadata(loaded, "by_cat", ["category"], [], False, {}), "by_cat")

    assert _lag(case).stale is True
    first = refresh_index(load_table(case.catalog, "db.t"), "by_id")
    assert (first.mode, first.entries) == ("full", 10)
    assert (_lag(case).snapshots_behind, _lag(case).stale) == (0, False)
    found = _index(case, "lookup", "db.t", "by_id", "--eq", "7")
    assert (_ids(found), found["mode"], found["region_files_read"]) == ([7], "index", 1)

    case.catalog.load_table("db.t").append(rows(10, 5))
    lag = _lag(case)
    assert (lag.snapshots_behind, lag.stale) == (1, True)
    second = refresh_index(load_table(case.catalog, "db.t"), "by_id")
    assert (second.mode, second.entries) == ("incremental", 15)
    looked_up = lookup(load_table(case.catalog, "db.t"), "by_id", [(12,)])
    assert (looked_up.rows.column("id").to_pylist(), looked_up.mode) == ([12], "index")
    expired = expire_extracts(load_table(case.catalog, "db.t"), "by_id", retain_last=1, older_than=None)
    assert expired["expired_extract_ids"] == [first.extract.extract_id]
    assert expired["deleted_files"] == 1 + first.region_files_written - second.region_files_reused
    assert IndexStore(load_table(case.catalog, "db.t")).names() == ["by_cat", "by_id"]

    # The table's orphan run, dry: the index files are outside its location, and referenced.
    whole = load_table(case.catalog, "db.t")
    planted = Files(whole).put(f"{whole.location()}/data/orphan.parquet")
    index_files = _files(root, whole.io.properties)
    dry = case.orphans("db.t", "--dry-run", *older_than(cutoff_after_writes()))
    assert dry["orphan_files"] == [planted] and dry["failed"] == []
    assert _files(root, whole.io.properties) == index_files


def test_two_concurrent_refreshes_land_one_extract_each(case: CatalogCase) -> None:
    table = case.catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 20))
    table = use_index_location(load_table(case.catalog, "db.t"), f"s3://{create_plain_bucket()}/indexes")
    IndexStore(table).create(new_index_metadata(table, "by_id", ["id"], [], True, {}), "by_id")
    both = threading.Barrier(2)
    real_create = IndexStore._create_version

    def create_together(store: IndexStore, name: str, location: str, version: int, data: bytes) -> bool:
        if version == 2:
            both.wait(timeout=60)  # both refreshes send version 2 at once: exactly one may win
        return real_create(store, name, location, version, data)

    results: list[Any] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(IndexStore, "_create_version", create_together)
        threads = [
            threading.Thread(target=lambda: results.append(refresh_index(load_table(case.catalog, "db.t"), "by_id")))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert len(results) == 2
    metadata, location, version = IndexStore(table).load("by_id")
    assert version == 3 and location.endswith("/by_id/metadata/00003.metadata.json")
    assert sorted(e.extract_id for e in metadata.extracts) == sorted(r.extract.extract_id for r in results)
    assert len({e.tracking_file for e in metadata.extracts}) == 2
    found = lookup(load_table(case.catalog, "db.t"), "by_id", [(13,)])
    assert (found.rows.column("id").to_pylist(), found.mode) == ([13], "index")
